//! The targets. Each documents its input format; JSON targets are mutated structurally by the
//! driver, text targets byte- and token-wise.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, TimeZone, Utc};
use chrono_tz::Tz;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
use upgradeplan::api::kratix::ResourceBinding;
use upgradeplan::api::{RolloutSelectors, UpgradePlanSpec, UpgradeWindow, WindowKind};
use upgradeplan::engine::concurrency::Limit;
use upgradeplan::engine::cron::{parse_zone, resolve_local_time, CronSchedule};
use upgradeplan::engine::snapshot::{assign, eligibility};
use upgradeplan::engine::version::{is_regex_pattern, VersionPattern};
use upgradeplan::engine::window::{parse_go_duration, Windows};
use upgradeplan::engine::{selector, validate_plan};

/// The naive reference of spec §6 that the engine's property tests use.
#[path = "../../shared/tests/oracle/mod.rs"]
mod oracle;

/// How the driver mutates a target's inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// UTF-8 text (lines where the target says so).
    Text,
    /// A JSON document.
    Json,
}

pub struct Target {
    pub name: &'static str,
    pub about: &'static str,
    pub shape: Shape,
    /// Runs one input; panics when an invariant breaks; returns the input's signature.
    pub run: fn(&[u8]) -> String,
    /// Starting inputs, from the spec's examples and the edge cases the engine tests name.
    pub seeds: &'static [&'static str],
    /// Tokens the driver splices into inputs.
    pub dictionary: &'static [&'static str],
}

pub const TARGETS: &[Target] = &[
    Target {
        name: "cron",
        about: "repeatSchedule / window schedule: parse, then next/latest/upcoming in DST zones",
        shape: Shape::Text,
        run: cron,
        seeds: &[
            "0 2 * * 6", "30 1 * * *", "0 22 * * *", "*/15 9-17 * * 1-5", "0 0 1 1 *", "0 0 29 2 *",
            "0 0 31 * *", "0 0 * * 0", "0 0 * * 7", "0 0 1 * 1", "@daily", "@hourly", "@weekly",
            "5,10,15 3 * JAN-MAR SUN", "0 0 30 2 *", "59 23 31 12 *",
        ],
        dictionary: CRON_TOKENS,
    },
    Target {
        name: "execute-at",
        about: "executeAt with timeZone: line 1 the zone, line 2 the local time",
        shape: Shape::Text,
        run: execute_at,
        seeds: &[
            "Europe/London\n2026-03-29T01:30", "Europe/London\n2026-10-25T01:30", "UTC\n2026-12-05T02:00",
            "America/New_York\n2026-03-08T02:15", "Australia/Lord_Howe\n2026-10-04T02:15",
            "Pacific/Apia\n2011-12-30T12:00", "\n2026-01-01T00:00", "Asia/Kathmandu\n9999-12-31T23:59",
        ],
        dictionary: TIME_TOKENS,
    },
    Target {
        name: "duration",
        about: "a window's duration (Go syntax), then the window evaluated around it",
        shape: Shape::Text,
        run: duration,
        seeds: &["4h", "30m", "1h30m", "90s", "0s", "-1h", "1.5h", "2562047h", "1ns", "3000ms", "1h1m1s1ms1us1ns"],
        dictionary: DURATION_TOKENS,
    },
    Target {
        name: "version",
        about: "an upgradePath.from entry (line 1) matched against versions (the other lines)",
        shape: Shape::Text,
        run: version,
        seeds: &[
            "/v1\\.1\\..*/\nv1.1.0\nv1.10.0\nxv1.1.0", "v1.0.0\nv1.0.0\nv1.0.00", "//\n\nx", "/\n/",
            "/(a+)+$/\naaaaaaaaaaaaaaaaaaaaaaaaaaaa!", "/v1|v2/\nv1\nv2\nv12", "/.{1000}{1000}/\nx",
            "/[/\nx", "latest\nlatest",
        ],
        dictionary: REGEX_TOKENS,
    },
    Target {
        name: "max-concurrent",
        about: "maxConcurrent as JSON (an integer or a string), resolved against group sizes",
        shape: Shape::Json,
        run: max_concurrent,
        seeds: &["1", "20", "\"25%\"", "\"100%\"", "\"0%\"", "\"101%\"", "0", "-1", "\"5\"", "2147483647", "\"%\""],
        dictionary: NUMBER_TOKENS,
    },
    Target {
        name: "selectors",
        about: "{\"selectors\": <rollout group selectors>, \"labels\": <a binding's labels>}",
        shape: Shape::Json,
        run: selectors,
        seeds: &[
            r#"{"selectors":{"matchLabels":{"env":"dev"}},"labels":{"env":"dev"}}"#,
            r#"{"selectors":{"matchExpressions":[{"key":"tier","operator":"In","values":["a","b"]}]},"labels":{"tier":"c"}}"#,
            r#"{"selectors":{"matchExpressions":[{"key":"x","operator":"DoesNotExist"},{"key":"y","operator":"Exists"}]},"labels":{"y":""}}"#,
            r#"{"selectors":{"matchExpressions":[{"key":"x","operator":"NotIn","values":[]}]},"labels":{}}"#,
            r#"{"selectors":{"matchAll":true},"labels":{"a":"b"}}"#,
            r#"{"selectors":{},"labels":{"a":"b"}}"#,
            r#"{"selectors":null,"labels":{}}"#,
        ],
        dictionary: SELECTOR_TOKENS,
    },
    Target {
        name: "plan",
        about: "{\"name\", \"spec\": <UpgradePlan spec>, \"bindings\": [<ResourceBinding>]}: validation, then the engine on a valid plan",
        shape: Shape::Json,
        run: plan,
        seeds: &[PLAN_SEED, PLAN_SEED_WINDOWS, PLAN_SEED_MATCH_ALL],
        dictionary: PLAN_TOKENS,
    },
];

const CRON_TOKENS: &[&str] = &[
    "*",
    "/",
    ",",
    "-",
    "?",
    "L",
    "W",
    "#",
    " ",
    "  ",
    "\t",
    "@daily",
    "@hourly",
    "@yearly",
    "@reboot",
    "0",
    "1",
    "7",
    "12",
    "13",
    "23",
    "24",
    "29",
    "30",
    "31",
    "32",
    "59",
    "60",
    "99999999999",
    "-1",
    "JAN",
    "DEC",
    "SUN",
    "SAT",
    "MON-FRI",
    "5L",
    "1#5",
    "15W",
    "*/0",
    "*/61",
    "0-59/7",
];
const TIME_TOKENS: &[&str] = &[
    "\n",
    "UTC",
    "Europe/London",
    "America/New_York",
    "Pacific/Apia",
    "Etc/GMT+14",
    "2026",
    "0000",
    "9999",
    "-",
    "T",
    ":",
    "02",
    "13",
    "29",
    "30",
    "31",
    "60",
    "24",
    "Z",
    "+01:00",
    ":00",
    " ",
];
const DURATION_TOKENS: &[&str] = &[
    "h",
    "m",
    "s",
    "ms",
    "us",
    "µs",
    "ns",
    ".",
    "-",
    "+",
    "0",
    "1",
    "9223372036854775807",
    "2562047",
    "99999999999",
    "1e9",
    " ",
    "d",
    "w",
];
const REGEX_TOKENS: &[&str] = &[
    "/", "\n", ".*", "\\.", "\\d", "[", "]", "(", ")", "(?:", "|", "+", "*", "?", "{1000}", "{0,}", "^", "$", "\\",
    "\\p{L}", "(?i)", "(?-u)", "\\b", "v1.0.0", "latest", "\u{0}", "é",
];
const NUMBER_TOKENS: &[&str] = &[
    "0",
    "1",
    "-1",
    "100",
    "\"%\"",
    "\"50%\"",
    "2147483648",
    "-2147483649",
    "1.5",
    "1e3",
    "\"1%\"",
    "\"+5%\"",
    "\" 5%\"",
    "\"٣%\"",
    "null",
    "true",
    "[]",
];
const SELECTOR_TOKENS: &[&str] = &[
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Equals",
    "",
    "env",
    "a/b",
    "x.io/y",
    "\u{0}",
    " ",
    "true",
    "false",
];
const PLAN_TOKENS: &[&str] = &[
    "latest",
    "/.*/",
    "/v1\\..*/",
    "v1.0.0",
    "v2.0.0",
    "*/5 * * * *",
    "0 22 * * *",
    "4h",
    "0s",
    "-1h",
    "Allow",
    "Deny",
    "Europe/London",
    "Mars/Base",
    "2026-03-29T01:30",
    "25%",
    "0%",
    "In",
    "Exists",
    "NotSet",
    "",
];

const PLAN_SEED: &str = r#"{"name":"redis-to-v2","spec":{"promiseRef":{"name":"redis"},"upgradePath":{"from":["v1.0.0","/v1\\.1\\..*/"],"to":"v2.0.0"},"upgradeExecutionPolicy":{"repeatSchedule":"0 2 * * 6","timeZone":"Europe/London"},"rolloutGroups":[{"name":"dev","selectors":{"matchLabels":{"env":"dev"}},"maxConcurrent":"25%"},{"name":"rest","selectors":{"matchAll":true},"maxConcurrent":2}]},"bindings":[{"metadata":{"name":"a","namespace":"ns","labels":{"kratix.io/promise-name":"redis","env":"dev"}},"spec":{"version":"v1.0.0","promiseRef":{"name":"redis"}},"status":{"lastAppliedVersion":"v1.0.0"}},{"metadata":{"name":"b","namespace":"ns","labels":{"kratix.io/promise-name":"redis"}},"spec":{"version":"v1.1.3"},"status":{"lastAppliedVersion":"v1.1.3"}}]}"#;
const PLAN_SEED_WINDOWS: &str = r#"{"name":"w","spec":{"promiseRef":{"name":"redis"},"upgradePath":{"from":["/.*/"],"to":"v3"},"upgradeExecutionPolicy":{"executeAt":"2026-03-29T01:30","timeZone":"Europe/London"},"rolloutGroups":[{"name":"g","selectors":{"matchExpressions":[{"key":"tier","operator":"NotIn","values":["gold"]}]},"resourceUpgradeWindows":[{"kind":"Allow","schedule":"0 22 * * *","duration":"4h","timeZone":"Europe/London"},{"kind":"Deny","schedule":"0 0 25 12 *","duration":"24h"}]}]},"bindings":[]}"#;
const PLAN_SEED_MATCH_ALL: &str = r#"{"name":"m","spec":{"promiseRef":{"name":"p"},"upgradePath":{"from":["v1"],"to":"v2"},"rolloutGroups":[{"name":"all","selectors":{"matchAll":true}},{"name":"again","selectors":{"matchAll":true}}]},"bindings":[{"metadata":{"name":"x","namespace":"n","labels":{"kratix.io/promise-name":"p"}},"status":{"lastAppliedVersion":"v1"}}]}"#;

fn text(input: &[u8]) -> String {
    String::from_utf8_lossy(input).into_owned()
}

/// The error's variant (or "ok"), without its payload: what the signature keys on.
fn variant<T, E: std::fmt::Debug>(r: &Result<T, E>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => {
            let s = format!("{e:?}");
            s.split(['(', ' ', '{']).next().unwrap_or_default().to_string()
        }
    }
}

/// Zones with the awkward rules: DST in both hemispheres, half-hour DST, a skipped day.
fn zones() -> [Tz; 7] {
    [
        Tz::UTC,
        chrono_tz::Europe::London,
        chrono_tz::America::New_York,
        chrono_tz::Australia::Lord_Howe,
        chrono_tz::Asia::Kathmandu,
        chrono_tz::Pacific::Apia,
        chrono_tz::Pacific::Chatham,
    ]
}

/// Instants next to transitions and at the ends of the calendar.
fn instants() -> Vec<DateTime<Utc>> {
    let at = |s: &str| DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).ok();
    [
        "2026-03-29T00:59:59Z",
        "2026-10-25T00:30:00Z",
        "2026-11-01T05:59:00Z",
        "2026-04-04T15:00:00Z",
        "2026-12-31T23:59:59Z",
        "2028-02-29T12:00:00Z",
        "2011-12-29T10:00:00Z",
        "9999-12-31T22:00:00Z",
    ]
    .iter()
    .filter_map(|s| at(s))
    .collect()
}

fn cron(input: &[u8]) -> String {
    let expr = text(input);
    let parsed = expr.parse::<CronSchedule>();
    let sig = variant(&parsed);
    let Ok(schedule) = parsed else { return sig };
    for tz in zones() {
        for t in instants() {
            if let Some(next) = schedule.next_after(t, tz) {
                assert!(next > t, "{expr:?} in {tz}: next_after({t}) = {next} is not after it");
                let back = schedule.latest_at_or_before(next, tz);
                assert_eq!(
                    back,
                    Some(next),
                    "{expr:?} in {tz}: latest_at_or_before(next_after({t}) = {next})"
                );
            }
            if let Some(latest) = schedule.latest_at_or_before(t, tz) {
                assert!(
                    latest <= t,
                    "{expr:?} in {tz}: latest_at_or_before({t}) = {latest} is after it"
                );
            }
            let upcoming = schedule.upcoming(t, tz, 4);
            assert!(
                upcoming.windows(2).all(|w| w[0] < w[1]),
                "{expr:?} in {tz}: upcoming({t}) not strictly increasing: {upcoming:?}"
            );
            agrees_with_oracle(&expr, &schedule, tz, t);
        }
    }
    format!(
        "{sig}:{}",
        if schedule.follows_wall_clock() {
            "wall-clock"
        } else {
            "fixed"
        }
    )
}

/// The firings of the next two days equal the naive oracle's (shared/tests/oracle, issue 15).
fn agrees_with_oracle(expr: &str, schedule: &CronSchedule, tz: Tz, t: DateTime<Utc>) {
    use chrono::Datelike;
    if !(2000..2100).contains(&t.year()) {
        return; // the oracle walks days with plain arithmetic: keep it inside the calendar
    }
    let naive = oracle::NaiveCron::parse(expr)
        .unwrap_or_else(|| panic!("{expr:?}: the engine accepts it, the oracle cannot read it"));
    let horizon = t + Duration::days(2);
    let first = oracle::local_day(t, tz) - Duration::days(2);
    let fires = naive.firings(tz, first, oracle::local_day(horizon, tz) + Duration::days(1));
    let (got, want) = oracle::upcoming_side_by_side(&fires, t, horizon, 30, |n| schedule.upcoming(t, tz, n));
    assert_eq!(
        got, want,
        "{expr:?} in {tz} after {t}: engine (left) and oracle (right) disagree"
    );
}

fn execute_at(input: &[u8]) -> String {
    let s = text(input);
    let (zone, value) = s.split_once('\n').unwrap_or(("", s.as_str()));
    let tz = parse_zone(Some(zone));
    let Ok(tz) = tz else {
        return format!("zone:{}", variant(&tz));
    };
    let resolved = resolve_local_time(value, tz);
    if let Ok(t) = &resolved {
        // The instant is the local time given, or (in a spring gap) the first instant after it.
        let local = t.with_timezone(&tz).naive_local();
        let wanted = chrono::NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M");
        assert!(
            wanted.is_ok_and(|w| local >= w),
            "{value:?} in {tz} resolved to {t} ({local} local), before the time asked for"
        );
    }
    variant(&resolved)
}

fn duration(input: &[u8]) -> String {
    let s = text(input);
    let parsed = parse_go_duration(&s);
    if let Ok(d) = &parsed {
        assert!(*d > Duration::zero(), "{s:?} parsed to a non-positive {d}");
        // A window of that length, hourly, must evaluate everywhere without overflowing.
        let w = UpgradeWindow {
            kind: WindowKind::Allow,
            schedule: "0 * * * *".into(),
            duration: s.clone(),
            time_zone: None,
        };
        let gate = Windows::compile(std::slice::from_ref(&w));
        assert!(gate.is_ok(), "duration {s:?} parses but its window does not compile");
        if let Ok(gate) = gate {
            for t in instants() {
                let state = gate.state(t);
                let _ = (state.open, state.next_open, state.next_close);
            }
        }
    }
    match &parsed {
        Ok(_) => "ok".into(),
        Err(e) if e.ends_with("must be greater than zero") => "not-positive".into(),
        Err(e) => e.rsplit(": ").next().unwrap_or_default().to_string(),
    }
}

fn version(input: &[u8]) -> String {
    let s = text(input);
    let mut lines = s.split('\n');
    let entry = lines.next().unwrap_or_default();
    let parsed = VersionPattern::parse(entry);
    let sig = variant(&parsed);
    let Ok(pattern) = parsed else { return sig };
    assert_eq!(pattern.source(), entry);
    let kind = match &pattern {
        VersionPattern::Exact(_) => "exact",
        VersionPattern::Regex { .. } => "regex",
    };
    assert_eq!(
        kind == "regex",
        is_regex_pattern(entry),
        "{entry:?} classified as {kind}"
    );
    let mut matched = 0;
    for v in lines {
        let m = pattern.matches(v);
        if kind == "exact" {
            assert_eq!(m, v == entry, "exact {entry:?} against {v:?}");
        }
        matched += usize::from(m);
    }
    format!("{sig}:{kind}:{}", matched.min(2))
}

fn max_concurrent(input: &[u8]) -> String {
    let Ok(value) = serde_json::from_slice::<IntOrString>(input) else {
        return "not-int-or-string".into();
    };
    let parsed = Limit::parse(Some(&value));
    if let Ok(limit) = parsed {
        for size in [0usize, 1, 2, 3, 7, 100, 10_000, 1_000_000, u32::MAX as usize] {
            let n = limit.resolve(size);
            assert!(n >= 1, "{value:?} resolves to {n} for a group of {size}");
            if let Limit::Percent(_) = limit {
                assert!(
                    n <= size.max(1),
                    "{value:?} resolves to {n}, more than the group of {size}"
                );
            }
        }
    }
    variant(&parsed)
}

fn selectors(input: &[u8]) -> String {
    let Ok(doc) = serde_json::from_slice::<Value>(input) else {
        return "not-json".into();
    };
    let sel = doc
        .get("selectors")
        .cloned()
        .map(serde_json::from_value::<Option<RolloutSelectors>>);
    let labels = doc
        .get("labels")
        .cloned()
        .map(serde_json::from_value::<BTreeMap<String, String>>);
    let (Some(Ok(sel)), Some(Ok(labels))) = (sel, labels) else {
        return "bad-shape".into();
    };
    let checked = selector::check(sel.as_ref(), &labels);
    let matched = selector::matches(sel.as_ref(), &labels);
    assert_eq!(checked.is_ok(), matched, "check and matches disagree: {checked:?}");
    let described = selector::describe(sel.as_ref());
    assert!(!described.is_empty(), "an empty description of {sel:?}");
    if let Err(failure) = &checked {
        assert!(!failure.to_string().is_empty());
    }
    format!(
        "{:?}:{}",
        std::mem::discriminant(&selector::kind(sel.as_ref())),
        matched
    )
}

fn plan(input: &[u8]) -> String {
    let Ok(doc) = serde_json::from_slice::<Value>(input) else {
        return "not-json".into();
    };
    let name = doc.get("name").and_then(Value::as_str).unwrap_or("fuzz").to_string();
    let Some(Ok(spec)) = doc.get("spec").cloned().map(serde_json::from_value::<UpgradePlanSpec>) else {
        return "bad-spec".into();
    };
    let bindings: Vec<ResourceBinding> = doc
        .get("bindings")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|b| serde_json::from_value(b.clone()).ok())
                .collect()
        })
        .unwrap_or_default();
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 3, 0, 0).single().unwrap_or_default();

    let problems = validate_plan(&name, &spec, now);
    for p in &problems {
        assert!(
            p.field.starts_with("spec.") || p.field == "metadata.name",
            "problem without a field path: {p}"
        );
        assert!(!p.message.is_empty(), "problem without a message at {}", p.field);
    }
    let _ = upgradeplan::engine::validate::summarize(&problems);
    if !problems.is_empty() {
        let mut fields: BTreeSet<&str> = BTreeSet::new();
        for p in &problems {
            fields.insert(p.field.split(['[', '.']).nth(1).unwrap_or_default());
        }
        return format!("invalid:{}", fields.into_iter().collect::<Vec<_>>().join(","));
    }

    // A plan validation accepts must be one the engine can execute: it compiles, and its windows
    // and triggers answer.
    let compiled = upgradeplan::engine::compile::compile(&spec);
    assert!(compiled.is_ok(), "a valid plan does not compile: {:?}", compiled.err());
    let Ok(compiled) = compiled else { return "valid".into() };
    for g in &compiled.groups {
        let _ = g.windows.state(now);
    }
    if let Some(t) = &compiled.triggers {
        let _ = t.upcoming(now, now - Duration::days(1), 3);
        let _ = t.latest_at_or_before(now);
    }
    let matcher = &compiled.from;
    let assignment = assign(&compiled, &bindings);
    assert_eq!(assignment.snapshot.groups.len(), spec.rollout_groups.len());
    // Every eligible binding is placed in a group or reported unassigned, never both, never lost.
    let key = |ns: &str, binding: &str| (ns.to_string(), binding.to_string());
    let eligible: BTreeSet<(String, String)> = bindings
        .iter()
        .filter(|b| upgradeplan::engine::snapshot::belongs_to(*b, &spec.promise_ref.name))
        .filter(|b| eligibility(*b, matcher, &spec.upgrade_path.to).is_ok())
        .map(|b| {
            let r = upgradeplan::engine::snapshot::SnapshotResource::from_binding(b);
            key(&r.namespace, &r.binding)
        })
        .collect();
    let placed: BTreeSet<(String, String)> = assignment
        .snapshot
        .groups
        .iter()
        .flat_map(|g| g.resources.iter().map(|r| key(&r.namespace, &r.binding)))
        .collect();
    let unassigned: BTreeSet<(String, String)> = assignment
        .unassigned
        .iter()
        .map(|u| key(&u.resource.namespace, &u.resource.binding))
        .collect();
    assert!(placed.is_disjoint(&unassigned), "a binding both placed and unassigned");
    let accounted: BTreeSet<_> = placed.union(&unassigned).cloned().collect();
    assert_eq!(accounted, eligible, "assignment lost or invented bindings");
    let counts = assignment.snapshot.initial_counts();
    assert_eq!(counts.len(), spec.rollout_groups.len());
    format!("valid:{}:{}", spec.rollout_groups.len().min(3), placed.len().min(3))
}
