//! Conversions between k8s-openapi's `jiff` timestamps and the engine's `chrono` times.

use chrono::{DateTime, Utc};

pub fn to_chrono(t: &k8s_openapi::jiff::Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond().max(0) as u32).unwrap_or_default()
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
