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

/// The release archive installs exactly as krew installs a plugin, and runs through kubectl:
/// the manifest `scripts/release.sh` writes for it (dist/upgradeplan.yaml) is read, this
/// machine's platform chosen by its `os`/`arch` selector, the archive fetched from a `file://`
/// URI and checked against the manifest's sha256, unpacked, its `files` moved into
/// `$KREW_ROOT/store/upgradeplan/<version>/`, and `bin` linked into `$KREW_ROOT/bin` as
/// `kubectl-upgradeplan` (krew's own steps; krew itself cannot be downloaded here).
/// `make krew-install` runs `PROFILE=dev scripts/release.sh` first, then this test.
#[test]
#[ignore = "needs dist/ from scripts/release.sh and kubectl: run by `make krew-install`"]
fn the_release_archive_installs_as_krew_installs_it_and_runs_through_kubectl() {
    use std::process::Command;
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest_path = repo.join("dist/upgradeplan.yaml");
    let m: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(&manifest_path)
            .unwrap_or_else(|e| panic!("{}: {e}: run scripts/release.sh first", manifest_path.display())),
    )
    .unwrap();
    let (name, version) = (
        m["metadata"]["name"].as_str().unwrap(),
        m["spec"]["version"].as_str().unwrap(),
    );
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let platform = m["spec"]["platforms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["selector"]["matchLabels"]["os"] == os && p["selector"]["matchLabels"]["arch"] == arch)
        .unwrap_or_else(|| panic!("no platform for {os}/{arch}"));

    // Download: krew fetches `uri`; for a local archive (`krew install --archive`) it reads the
    // file. This machine's archive, by a file:// URI.
    let host = String::from_utf8(Command::new("rustc").arg("-vV").output().unwrap().stdout).unwrap();
    let triple = host.lines().find_map(|l| l.strip_prefix("host: ")).unwrap();
    let archive = repo
        .join(format!("dist/kubectl-upgradeplan-{triple}.tar.gz"))
        .canonicalize()
        .unwrap();
    let uri = format!("file://{}", archive.display());
    let root = std::env::temp_dir().join(format!("krew-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let download = root.join("download");
    std::fs::create_dir_all(&download).unwrap();
    let fetched = download.join("archive.tar.gz");
    std::fs::copy(uri.strip_prefix("file://").unwrap(), &fetched).unwrap();

    // Verify: the sha256 of what was fetched is the manifest's.
    let sum = Command::new("sha256sum").arg(&fetched).output().unwrap();
    let sum = String::from_utf8(sum.stdout).unwrap();
    assert_eq!(
        sum.split_whitespace().next().unwrap(),
        platform["sha256"].as_str().unwrap(),
        "the manifest's sha256 is the archive's"
    );

    // Extract, then move each `files` entry into the store.
    let unpacked = download.join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    assert!(Command::new("tar")
        .args(["-xzf"])
        .arg(&fetched)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .unwrap()
        .success());
    let store = root.join("store").join(name).join(version);
    std::fs::create_dir_all(&store).unwrap();
    for f in platform["files"].as_array().unwrap() {
        let (from, to) = (f["from"].as_str().unwrap(), f["to"].as_str().unwrap());
        let dest = store.join(to).join(from);
        std::fs::rename(unpacked.join(from), &dest)
            .unwrap_or_else(|e| panic!("files: {from} is not in the archive: {e}"));
    }
    // Link: $KREW_ROOT/bin/kubectl-<name> -> the store's `bin`.
    let bin_dir = root.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let bin = store.join(platform["bin"].as_str().unwrap());
    assert!(bin.is_file(), "bin {} was not installed", bin.display());
    std::os::unix::fs::symlink(&bin, bin_dir.join(format!("kubectl-{name}"))).unwrap();
    assert!(
        store.join("kubectl_complete-upgradeplan").is_file(),
        "the completion helper the caveats name"
    );

    // Through kubectl, as a user runs it after `kubectl krew install`.
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let listed = Command::new("kubectl")
        .args(["plugin", "list"])
        .env("PATH", &path)
        .output()
        .expect("kubectl: tests/cluster.sh install provides it");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains(&format!("{}/kubectl-{name}", bin_dir.display())),
        "{listed}"
    );
    let out = Command::new("kubectl")
        .args(["upgradeplan", "version"])
        .env("PATH", &path)
        .env("KUBECONFIG", "")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("kubectl-upgradeplan {}", version.trim_start_matches('v'))),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&root);
}
