//! Conversions between k8s-openapi's `jiff` timestamps and the engine's `chrono` times.

use chrono::{DateTime, Utc};

pub fn to_chrono(t: &k8s_openapi::jiff::Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond().max(0) as u32).unwrap_or_default()
}

/// When an object was created. An object read from a file has no creationTimestamp: it counts
/// as created at the beginning of time (so none of its triggers is "before creation").
pub fn created_at(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> DateTime<Utc> {
    meta.creation_timestamp
        .as_ref()
        .map(|t| to_chrono(&t.0))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// RFC 3339 UTC to the second, as annotations carry instants.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `t` to the second (the precision of annotations and creation timestamps).
pub fn whole_seconds(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

pub fn to_jiff(t: DateTime<Utc>) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = DateTime::parse_from_rfc3339("2026-10-25T01:30:00.25Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(to_chrono(&to_jiff(t)), t);
    }
}
