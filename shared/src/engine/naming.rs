//! Where object names meet label values and suffixes (spec §4.2). Object names may be 253
//! characters, label values only 63: every writer and every selector goes through these
//! functions, so that every name the CRDs accept works end to end.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Longest label value.
pub const LABEL_VALUE_MAX: usize = 63;
/// Longest object name (a DNS subdomain).
pub const OBJECT_NAME_MAX: usize = 253;
/// Characters of the name kept before the hash when it is shortened.
const KEPT: usize = 54;

/// An RFC 1123 subdomain, as Kubernetes requires of most object names.
pub fn is_dns_subdomain(name: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    name.len() <= 253
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && alnum(bytes[0])
                && alnum(bytes[bytes.len() - 1])
                && bytes.iter().all(|&b| alnum(b) || b == b'-')
        })
}

/// An RFC 1123 label (at most 63 characters), as gate names are.
pub fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns_subdomain(name)
}

/// Bytes as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The first 8 hex digits of the SHA-256 of `s`.
fn short_hash(s: &str) -> String {
    hex(&Sha256::digest(s.as_bytes())[..4])
}

/// `name` shortened to 63 characters: its first 54, `-`, and the first 8 hex digits of the
/// SHA-256 of the whole name. Distinct names stay distinct (but for a hash collision).
fn shortened(name: &str) -> String {
    let hex = short_hash(name);
    // Names are ASCII (DNS subdomains); a boundary check keeps odd input from panicking.
    let mut cut = KEPT.min(name.len());
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{hex}", &name[..cut])
}

/// The label value that stands for `name`: the name itself when it fits in 63 characters,
/// else its shortened form (write the full name into an annotation of the same key too:
/// [`needs_full_name_annotation`]).
pub fn label_value(name: &str) -> String {
    if name.len() <= LABEL_VALUE_MAX {
        name.to_string()
    } else {
        shortened(name)
    }
}

/// True when `name` does not fit in a label value, so its label carries the shortened form and
/// an annotation of the same key carries the name.
pub fn needs_full_name_annotation(name: &str) -> bool {
    name.len() > LABEL_VALUE_MAX
}

/// Records `name` under label `key`: its label value, and the full name in an annotation of the
/// same key when the label holds the shortened form.
pub fn put_name(
    labels: &mut BTreeMap<String, String>,
    annotations: &mut BTreeMap<String, String>,
    key: &str,
    name: &str,
) {
    labels.insert(key.to_string(), label_value(name));
    if needs_full_name_annotation(name) {
        annotations.insert(key.to_string(), name.to_string());
    }
}

/// The label selector for objects whose label `key` stands for `name`.
pub fn selector(key: &str, name: &str) -> String {
    format!("{key}={}", label_value(name))
}

/// The name of an object derived from `base` by a suffix (`<run>-resource-snapshot`, an event's
/// `<object>.<hex>`): `base` is shortened first when the whole would pass 253 characters.
pub fn derived_name(base: &str, suffix: &str) -> String {
    if base.len() + suffix.len() <= OBJECT_NAME_MAX {
        format!("{base}{suffix}")
    } else {
        // A DNS subdomain's dot-separated parts may not start with '-': never join '.' and '-'.
        format!("{}{suffix}", shortened(base).replace(".-", "--"))
    }
}

/// The name of the UpgradeApproval `kubectl upgradeplan approve` creates for `group` of `run`:
/// `<run>-<group>` (spec §13.4). A group name that cannot be part of an object name (upper case,
/// `_`, …) is written in lower case with `-` for the rest, and the hash of the real name keeps
/// distinct groups distinct; the whole stays within 253 characters.
pub fn approval_name(run: &str, group: &str) -> String {
    let mut part: String = group
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-') => c,
            _ => '-',
        })
        .collect();
    part = part.trim_matches('-').to_string();
    if part != group {
        let hex = short_hash(group);
        part = if part.is_empty() { hex } else { format!("{part}-{hex}") };
    }
    derived_name(run, &format!("-{}", label_value(&part)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values() {
        let short = "a".repeat(63);
        assert_eq!(label_value(&short), short);
        assert!(!needs_full_name_annotation(&short));
        let long = format!("{}{}", "p".repeat(60), "-with-a-long-tail");
        let v = label_value(&long);
        assert_eq!(v.len(), 63);
        assert!(v.starts_with(&"p".repeat(54)));
        assert_eq!(&v[54..55], "-");
        assert!(v[55..].chars().all(|c| c.is_ascii_hexdigit()));
        assert!(needs_full_name_annotation(&long));
        // The hash is of the whole name: two names with the same first 54 characters differ.
        assert_ne!(label_value(&format!("{long}-a")), label_value(&format!("{long}-b")));
        // SHA-256("") starts e3b0c442: the function is the spec's, not any hash.
        assert_eq!(shortened(""), "-e3b0c442");
    }

    #[test]
    fn approval_names() {
        assert_eq!(
            approval_name("redis-v1-to-v2-20260601-2300", "prod"),
            "redis-v1-to-v2-20260601-2300-prod"
        );
        let odd = approval_name("run", "Prod_EU");
        assert!(
            odd.starts_with("run-prod-eu-") && odd.len() == "run-prod-eu-".len() + 8,
            "{odd}"
        );
        assert_ne!(approval_name("run", "Prod_EU"), approval_name("run", "prod-eu"));
        assert_eq!(approval_name("run", "__").len(), "run-".len() + 8);
        let long = approval_name(&"r".repeat(253), &"g".repeat(100));
        assert!(long.len() <= OBJECT_NAME_MAX);
        for name in [odd, long] {
            assert!(is_dns_subdomain(&name), "{name}");
        }
    }

    #[test]
    fn derived_names() {
        assert_eq!(derived_name("run", "-resource-snapshot"), "run-resource-snapshot");
        let at_limit = "r".repeat(OBJECT_NAME_MAX - "-resource-snapshot".len());
        assert_eq!(derived_name(&at_limit, "-resource-snapshot").len(), OBJECT_NAME_MAX);
        let long = "r".repeat(253);
        let d = derived_name(&long, "-resource-snapshot-2");
        assert_eq!(d, format!("{}-resource-snapshot-2", label_value(&long)));
        assert!(d.len() <= OBJECT_NAME_MAX);
        // A dot at the cut would start a DNS label with '-'.
        let dotted = format!("{}.{}", "a".repeat(53), "b".repeat(230));
        let d = derived_name(&dotted, "-resource-snapshot");
        assert!(!d.contains(".-"), "{d}");
        assert!(d.len() <= OBJECT_NAME_MAX);
    }
}
