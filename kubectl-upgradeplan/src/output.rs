//! Tables, colour and machine-readable output.

use std::io::{IsTerminal, Write};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::cli::{Global, Output};

/// What a freeze holding a group says in every view: `frozen until 2026-12-27 09:00 UTC (09:00
/// GMT in Europe/London): end-of-year freeze (UpgradeFreeze "eoy")`.
pub fn frozen_words(style: &Style, hold: &upgradeplan::engine::freeze::Hold) -> String {
    let until = hold
        .until
        .map_or_else(|| "further notice".to_string(), |t| style.time(t, Some(hold.zone)));
    format!(
        "frozen until {until}: {} (UpgradeFreeze {:?})",
        hold.reason, hold.freeze
    )
}

/// Stdout was closed by its reader (`| head -1`): the program ends quietly, as kubectl does.
#[derive(Debug)]
pub struct ClosedPipe;

impl std::fmt::Display for ClosedPipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for ClosedPipe {}

/// Writes `text` to stdout and flushes it. Every line the plugin prints goes through here, so
/// that a closed pipe is [`ClosedPipe`] (never a panic, as `print!` would).
pub fn out(text: impl std::fmt::Display) -> anyhow::Result<()> {
    write_to(&mut std::io::stdout().lock(), text)
}

/// [`out`] to any writer.
pub fn write_to(w: &mut impl Write, text: impl std::fmt::Display) -> anyhow::Result<()> {
    match write!(w, "{text}").and_then(|_| w.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(ClosedPipe.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
        Ok(()) => Ok(()),
    }
}

/// Whether `e` is (or was caused by) a closed stdout.
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<ClosedPipe>())
}

/// How text is rendered.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub color: bool,
    pub headers: bool,
    pub wide: bool,
    /// The zone every view writes instants in: the viewer's (`TZ`), or UTC with `--utc`.
    pub zone: chrono_tz::Tz,
}

/// Whether `a` and `b` show `t` the same way: the same date, time and abbreviation.
fn same_wall_time(t: DateTime<Utc>, a: chrono_tz::Tz, b: chrono_tz::Tz) -> bool {
    let shown = |z: chrono_tz::Tz| t.with_timezone(&z).format("%Y-%m-%d %H:%M %Z").to_string();
    shown(a) == shown(b)
}

impl Style {
    pub fn from(g: &Global) -> Style {
        let color = !g.no_color && std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal();
        Style {
            color,
            headers: !g.no_headers,
            wide: g.output == Output::Wide,
            zone: if g.utc { chrono_tz::Tz::UTC } else { viewer_zone() },
        }
    }

    pub fn plain() -> Style {
        Style {
            color: false,
            headers: true,
            wide: false,
            zone: chrono_tz::Tz::UTC,
        }
    }

    /// The one rule for instants in every view: in the viewer's zone (`2026-03-27 18:00 EDT`),
    /// with the plan's own zone beside when it has one and it differs
    /// (`2026-03-27 18:00 EDT (22:00 GMT in Europe/London)`).
    pub fn time(&self, t: DateTime<Utc>, plan_zone: Option<chrono_tz::Tz>) -> String {
        self.time_to(t, plan_zone, "%H:%M")
    }

    /// `from → to` by [`Style::time`], to the second when minutes would show the same instant
    /// twice (a 30 s soak reads `19:25:00 → 19:25:30`, not `19:25 → 19:25`).
    pub fn span(&self, from: DateTime<Utc>, to: DateTime<Utc>, plan_zone: Option<chrono_tz::Tz>) -> String {
        let (a, b) = self.span_ends(from, to, plan_zone);
        format!("{a} → {b}")
    }

    /// The two ends of [`Style::span`], for views that show them in separate columns.
    pub fn span_ends(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        plan_zone: Option<chrono_tz::Tz>,
    ) -> (String, String) {
        let (a, b) = (self.time(from, plan_zone), self.time(to, plan_zone));
        if a != b || from == to {
            return (a, b);
        }
        let seconds = |t| self.time_to(t, plan_zone, "%H:%M:%S");
        (seconds(from), seconds(to))
    }

    fn time_to(&self, t: DateTime<Utc>, plan_zone: Option<chrono_tz::Tz>, clock: &str) -> String {
        let mine = t
            .with_timezone(&self.zone)
            .format(&format!("%Y-%m-%d {clock} %Z"))
            .to_string();
        match plan_zone {
            // Two names of one zone (UTC and Etc/UTC) say the same thing: once is enough.
            Some(z) if z != self.zone && !same_wall_time(t, z, self.zone) => {
                let theirs = t.with_timezone(&z);
                let day = if theirs.date_naive() == t.with_timezone(&self.zone).date_naive() {
                    theirs.format(&format!("{clock} %Z")).to_string()
                } else {
                    theirs.format(&format!("%a {clock} %Z")).to_string()
                };
                format!("{mine} ({day} in {z})")
            }
            _ => mine,
        }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    pub fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }

    pub fn dim(&self, s: &str) -> String {
        self.paint("2", s)
    }

    /// Colours a state or result by its meaning.
    pub fn state(&self, s: &str) -> String {
        match s {
            "Completed" | "Available" | "open" | "valid" | "Succeeded" => self.paint("32", s),
            "Failed" | "invalid" | "closed" | "frozen" => self.paint("31", s),
            // Someone chose to stop it: not a failure.
            "Cancelled" => self.paint("90", s),
            "InProgress" | "Pending" | "Running" | "in flight" => self.paint("33", s),
            _ => s.to_string(),
        }
    }
}

/// Orders names as people read them: digit runs by value, so `k-4` comes before `k-10`.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (x, y) = (chunks(a), chunks(b));
    for ((xd, xs), (yd, ys)) in x.iter().zip(&y) {
        let order = if *xd && *yd {
            let (xt, yt) = (xs.trim_start_matches('0'), ys.trim_start_matches('0'));
            xt.len().cmp(&yt.len()).then_with(|| xt.cmp(yt))
        } else {
            xs.cmp(ys)
        };
        if order != std::cmp::Ordering::Equal {
            return order;
        }
    }
    x.len().cmp(&y.len()).then_with(|| a.cmp(b))
}

/// Aligned columns separated by three spaces, like kubectl's; ANSI colour codes do not count
/// towards widths.
pub fn table(style: &Style, headers: &[&str], rows: &[Vec<String>]) -> String {
    let visible = |s: &str| {
        let mut n = 0;
        let mut in_escape = false;
        for c in s.chars() {
            match (in_escape, c) {
                (false, '\x1b') => in_escape = true,
                (true, 'm') => in_escape = false,
                (true, _) => {}
                (false, _) => n += 1,
            }
        }
        n
    };
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(visible(cell));
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            l.push_str(c);
            if i < last {
                l.push_str(&" ".repeat(widths[i] - visible(c) + 3));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    if style.headers {
        line(headers.iter().map(|h| h.to_string()).collect());
    }
    for row in rows {
        line(row.clone());
    }
    out
}

/// What a command prints in `format`: `text` for the human views (table, wide), else `value` —
/// its JSON — as JSON, YAML, or through kubectl's printers (name, jsonpath, custom-columns).
pub fn render<T: Serialize>(format: &Output, style: &Style, value: &T, text: &str) -> anyhow::Result<String> {
    Ok(match format {
        Output::Table | Output::Wide => text.to_string(),
        Output::Yaml => serde_saphyr::to_string(value)?,
        Output::Json => format!("{}\n", serde_json::to_string_pretty(value)?),
        Output::Name => crate::printers::names(&serde_json::to_value(value)?).map_err(anyhow::Error::msg)?,
        Output::JsonPath(template) => template.render(&serde_json::to_value(value)?),
        Output::CustomColumns(columns) => {
            let headers: Vec<&str> = columns.iter().map(|c| c.header.as_str()).collect();
            let rows = crate::printers::column_rows(columns, &serde_json::to_value(value)?);
            table(style, &headers, &rows)
        }
    })
}

/// Objects as `kubectl get -o json|yaml` prints them: one named object as itself, otherwise a
/// `List`; `metadata.managedFields` left out unless `show_managed_fields`.
pub fn objects_as_kubectl<K: Serialize>(
    objects: &[K],
    one_named: bool,
    show_managed_fields: bool,
) -> anyhow::Result<serde_json::Value> {
    let mut items = Vec::with_capacity(objects.len());
    for o in objects {
        let mut v = serde_json::to_value(o)?;
        if !show_managed_fields {
            if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.remove("managedFields");
            }
        }
        items.push(v);
    }
    Ok(match (one_named, items.len()) {
        (true, 1) => items.remove(0),
        _ => serde_json::json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": items,
            "metadata": {"resourceVersion": ""},
        }),
    })
}

/// "in 3h", "5m ago".
pub fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let d = t - now;
    let secs = d.num_seconds().abs();
    let amount = if secs < 120 {
        format!("{secs}s")
    } else if secs < 2 * 3600 {
        format!("{}m", secs / 60)
    } else if secs < 2 * 86400 {
        format!("{}h", secs / 3600)
    } else {
        format!("{}d", secs / 86400)
    };
    // Less than a second ahead is "now", written as the past: a run that just finished says
    // "0s ago", not "in 0s".
    if d.num_seconds() > 0 {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

/// A duration as "1h02m", "3m20s", "45s".
pub fn duration(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        s if s >= 3600 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        s if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// The zone a group's windows are written in, when they share one (shown beside the viewer's).
pub fn windows_zone(windows: &[upgradeplan::api::UpgradeWindow]) -> Option<chrono_tz::Tz> {
    let zones: Vec<chrono_tz::Tz> = windows
        .iter()
        .map(|w| upgradeplan::engine::cron::parse_zone(w.time_zone.as_deref()).ok())
        .collect::<Option<_>>()?;
    let first = *zones.first()?;
    zones.iter().all(|z| *z == first).then_some(first)
}

/// Whether a watching view redraws itself in place: on a terminal, for the text views.
pub fn redraws_in_place(g: &Global) -> bool {
    std::io::stdout().is_terminal() && g.output.is_text()
}

/// Replaces the view `last` drawn on the terminal with `text`: up as many lines as it took,
/// clear to the end, draw again.
pub fn redraw(last: &str, text: &str) -> anyhow::Result<()> {
    out(format!("\x1b[{}A\x1b[J{text}", last.lines().count()))
}

/// The viewer's time zone (from TZ or the system), UTC when unknown.
pub fn viewer_zone() -> chrono_tz::Tz {
    std::env::var("TZ")
        .ok()
        .and_then(|z| z.parse().ok())
        .or_else(|| iana_time_zone::get_timezone().ok().and_then(|z| z.parse().ok()))
        .unwrap_or(chrono_tz::Tz::UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_ignoring_colour() {
        let style = Style {
            color: true,
            ..Style::plain()
        };
        let t = table(
            &style,
            &["NAME", "STATE"],
            &[
                vec!["a".into(), style.state("Failed")],
                vec!["longer".into(), "x".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "NAME     STATE");
        assert!(lines[1].starts_with("a        \x1b[31mFailed"));
        let plain = table(
            &Style {
                headers: false,
                ..Style::plain()
            },
            &["A"],
            &[vec!["x".into()]],
        );
        assert_eq!(plain, "x\n");
    }

    #[test]
    fn instants_in_the_viewers_zone_with_the_plans_beside() {
        let t = DateTime::parse_from_rfc3339("2026-03-27T22:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let ny = Style {
            zone: chrono_tz::America::New_York,
            ..Style::plain()
        };
        assert_eq!(ny.time(t, None), "2026-03-27 18:00 EDT");
        assert_eq!(ny.time(t, Some(chrono_tz::America::New_York)), "2026-03-27 18:00 EDT");
        assert_eq!(
            ny.time(t, Some(chrono_tz::Europe::London)),
            "2026-03-27 18:00 EDT (22:00 GMT in Europe/London)"
        );
        assert_eq!(
            ny.time(t, Some(chrono_tz::Asia::Tokyo)),
            "2026-03-27 18:00 EDT (Sat 07:00 JST in Asia/Tokyo)"
        );
        assert_eq!(Style::plain().time(t, None), "2026-03-27 22:00 UTC", "--utc");
        // Two names of one zone are said once; a zone that only agrees on the offset is not.
        let utc = Style {
            zone: chrono_tz::Etc::UTC,
            ..Style::plain()
        };
        assert_eq!(utc.time(t, Some(chrono_tz::UTC)), "2026-03-27 22:00 UTC");
        assert_eq!(
            utc.time(t, Some(chrono_tz::Europe::London)),
            "2026-03-27 22:00 UTC (22:00 GMT in Europe/London)"
        );
    }

    #[test]
    fn relative_times() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(relative(now + chrono::Duration::hours(3), now), "in 3h");
        assert_eq!(relative(now - chrono::Duration::minutes(5), now), "5m ago");
        assert_eq!(relative(now, now), "0s ago");
        assert_eq!(relative(now - chrono::Duration::milliseconds(300), now), "0s ago");
        assert_eq!(relative(now + chrono::Duration::milliseconds(300), now), "0s ago");
        assert_eq!(relative(now + chrono::Duration::seconds(1), now), "in 1s");
        assert_eq!(duration(chrono::Duration::seconds(3725)), "1h02m");
    }
}

#[cfg(test)]
mod natural_order_tests {
    use super::natural_cmp;

    #[test]
    fn numbers_sort_by_value() {
        let mut names = vec!["k-10", "k-4", "k-2", "a", "k-04x", "k", "b-1-10", "b-1-9"];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(names, vec!["a", "b-1-9", "b-1-10", "k", "k-2", "k-4", "k-04x", "k-10"]);
    }
}
