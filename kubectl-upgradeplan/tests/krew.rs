//! krew/upgradeplan.yaml follows krew's manifest rules
//! (https://krew.sigs.k8s.io/docs/developer-guide/plugin-manifest/).
#![allow(clippy::unwrap_used)]

use serde_json::Value;

#[test]
fn krew_manifest_is_valid() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../krew/upgradeplan.yaml");
    let m: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(m["apiVersion"], "krew.googlecontainertools.github.com/v1alpha2");
    assert_eq!(m["kind"], "Plugin");
    assert_eq!(
        m["metadata"]["name"],
        path.file_stem().unwrap().to_str().unwrap(),
        "name matches the file"
    );
    let spec = &m["spec"];
    let version = spec["version"].as_str().unwrap();
    assert_eq!(
        version,
        format!("v{}", env!("CARGO_PKG_VERSION")),
        "version is the crate's, v-prefixed"
    );
    let core = version.trim_start_matches('v');
    assert!(
        core.split('.').count() == 3 && core.split('.').all(|p| p.parse::<u64>().is_ok()),
        "semver: {version}"
    );
    for field in ["homepage", "shortDescription", "description", "caveats"] {
        assert!(
            spec[field].as_str().is_some_and(|s| !s.trim().is_empty()),
            "{field} is required"
        );
    }
    assert!(
        spec["shortDescription"].as_str().unwrap().len() <= 50,
        "krew keeps shortDescription short"
    );
    assert!(spec["caveats"]
        .as_str()
        .unwrap()
        .contains("kubectl_complete-upgradeplan"));
    let platforms = spec["platforms"].as_array().unwrap();
    let mut seen = vec![];
    for p in platforms {
        let labels = &p["selector"]["matchLabels"];
        let (os, arch) = (labels["os"].as_str().unwrap(), labels["arch"].as_str().unwrap());
        seen.push(format!("{os}/{arch}"));
        let uri = p["uri"].as_str().unwrap();
        assert!(
            uri.starts_with("https://") && uri.contains(&format!("/download/{version}/")),
            "{uri}"
        );
        let triple = match (os, arch) {
            ("linux", "amd64") => "x86_64-unknown-linux-musl",
            ("linux", "arm64") => "aarch64-unknown-linux-musl",
            ("darwin", "amd64") => "x86_64-apple-darwin",
            ("darwin", "arm64") => "aarch64-apple-darwin",
            ("windows", "amd64") => "x86_64-pc-windows-msvc",
            other => panic!("unexpected platform {other:?}"),
        };
        let ext = if os == "windows" { ".zip" } else { ".tar.gz" };
        assert!(
            uri.ends_with(&format!("kubectl-upgradeplan-{triple}{ext}")),
            "archive named by target triple: {uri}"
        );
        let sha = p["sha256"].as_str().unwrap();
        assert!(
            sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit()),
            "sha256 {sha}"
        );
        let bin = p["bin"].as_str().unwrap();
        assert_eq!(
            bin,
            if os == "windows" {
                "kubectl-upgradeplan.exe"
            } else {
                "kubectl-upgradeplan"
            }
        );
        let files: Vec<&str> = p["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["from"].as_str().unwrap())
            .collect();
        assert!(files.contains(&bin), "bin {bin} is extracted");
        assert!(files.contains(&"LICENSE"), "LICENSE is extracted");
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![
            "darwin/amd64",
            "darwin/arm64",
            "linux/amd64",
            "linux/arm64",
            "windows/amd64"
        ]
    );
}
