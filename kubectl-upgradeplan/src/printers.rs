//! kubectl's printers over the JSON a command prints: `-o name`, `-o jsonpath=TEMPLATE` and
//! `-o custom-columns=HEADER:PATH,…` (spec §10), with kubectl's semantics: a template is literal
//! text with `{…}` expressions (`{range …}…{end}`, `{"\n"}`), a key that is missing prints
//! nothing (kubectl's `--allow-missing-template-keys` default), several results are joined by a
//! space, strings print raw and anything else as compact JSON.

use jsonpath_rust::JsonPath;
use serde_json::Value;

/// A parsed `-o jsonpath=…` template.
#[derive(Clone, Debug, PartialEq)]
pub struct Template(Vec<Node>);

#[derive(Clone, Debug, PartialEq)]
enum Node {
    Text(String),
    /// An RFC 9535 path; relative to the current element unless it starts at the root (`$`).
    Path(Path),
    Range(Path, Vec<Node>),
}

#[derive(Clone, Debug, PartialEq)]
struct Path {
    query: String,
    from_root: bool,
}

/// One column of `-o custom-columns=…`.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub header: String,
    path: Path,
}

/// Reads a kubectl path (`.metadata.name`, `.items[*].spec`, `{.a.b}`, `metadata.labels.app\.io/x`)
/// as an RFC 9535 query. Member names that RFC 9535's dot shorthand does not take (`app-name`,
/// `kratix\.io/promise-name`) become bracketed names, as kubectl reads them.
fn path(text: &str) -> Result<Path, String> {
    let text = text.trim();
    let (from_root, rest) = match text.strip_prefix('$') {
        Some(rest) => (true, rest.to_string()),
        None => (false, text.strip_prefix('@').unwrap_or(text).to_string()),
    };
    // kubectl takes `metadata.name` for `.metadata.name`.
    let rest = if rest.is_empty() || rest.starts_with(['.', '[']) {
        rest
    } else {
        format!(".{rest}")
    };
    let chars: Vec<char> = rest.chars().collect();
    let mut query = String::from("$");
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                let descendant = chars.get(i + 1) == Some(&'.');
                i += if descendant { 2 } else { 1 };
                let mut name = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    if chars[i] == '\\' && chars.get(i + 1) == Some(&'.') {
                        i += 1;
                    }
                    name.push(chars[i]);
                    i += 1;
                }
                let shorthand = name == "*"
                    || (!name.starts_with(|c: char| c.is_ascii_digit())
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
                if descendant {
                    query.push_str("..");
                }
                match (name.is_empty(), shorthand) {
                    // `..[0]` is a descendant segment; a lone `.` before `[` adds nothing.
                    (true, _) => {}
                    (false, true) => {
                        if !descendant {
                            query.push('.');
                        }
                        query.push_str(&name);
                    }
                    (false, false) => {
                        query.push_str(&format!("['{}']", name.replace('\\', "\\\\").replace('\'', "\\'")))
                    }
                }
            }
            '[' => {
                // Copied as written up to its closing bracket (quotes may hold brackets).
                let (mut quote, mut previous) = (None, ' ');
                while i < chars.len() {
                    let c = chars[i];
                    query.push(c);
                    i += 1;
                    match (quote, c) {
                        (Some(q), c) if c == q && previous != '\\' => quote = None,
                        (None, '\'' | '"') => quote = Some(c),
                        (None, ']') => break,
                        _ => {}
                    }
                    previous = c;
                }
            }
            c => return Err(format!("unexpected {c:?} in path {text:?}")),
        }
    }
    // A syntax error shows now, at the flag, not on the first object.
    Value::Null
        .query(&query)
        .map_err(|e| format!("{text:?} is not a JSONPath expression: {e}"))?;
    Ok(Path { query, from_root })
}

impl Template {
    /// Parses a kubectl jsonpath template: `{.metadata.name}`, `{range .items[*]}{.x}{"\n"}{end}`.
    pub fn parse(s: &str) -> Result<Template, String> {
        let mut stack: Vec<(Option<Path>, Vec<Node>)> = vec![(None, Vec::new())];
        let mut text = String::new();
        let chars: Vec<char> = s.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] != '{' {
                text.push(chars[i]);
                i += 1;
                continue;
            }
            let mut end = i + 1;
            let mut quote = false;
            while end < chars.len() && (quote || chars[end] != '}') {
                if chars[end] == '"' && chars[end - 1] != '\\' {
                    quote = !quote;
                }
                end += 1;
            }
            if end == chars.len() {
                return Err(format!("unclosed '{{' in jsonpath template {s:?}"));
            }
            let body: String = chars[i + 1..end].iter().collect::<String>().trim().to_string();
            i = end + 1;
            let top = &mut stack.last_mut().expect("the template's own level is never popped").1;
            if !text.is_empty() {
                top.push(Node::Text(std::mem::take(&mut text)));
            }
            if let Some(literal) = body.strip_prefix('"').and_then(|b| b.strip_suffix('"')) {
                top.push(Node::Text(unescape(literal)));
            } else if let Some(over) = body.strip_prefix("range ") {
                stack.push((Some(path(over)?), Vec::new()));
            } else if body == "end" {
                match stack.pop() {
                    Some((Some(over), nodes)) if !stack.is_empty() => {
                        stack.last_mut().expect("checked").1.push(Node::Range(over, nodes))
                    }
                    _ => return Err(format!("{{end}} without {{range …}} in jsonpath template {s:?}")),
                }
            } else if body.is_empty() {
                return Err(format!("empty {{}} in jsonpath template {s:?}"));
            } else {
                top.push(Node::Path(path(&body)?));
            }
        }
        if stack.len() > 1 {
            return Err(format!("{{range …}} without {{end}} in jsonpath template {s:?}"));
        }
        let mut nodes = stack.pop().expect("the template's own level").1;
        if !text.is_empty() {
            nodes.push(Node::Text(text));
        }
        Ok(Template(nodes))
    }

    /// The template applied to `root`.
    pub fn render(&self, root: &Value) -> String {
        let mut out = String::new();
        render_nodes(&self.0, root, root, &mut out);
        out
    }
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

fn results<'a>(p: &Path, root: &'a Value, current: &'a Value) -> Vec<&'a Value> {
    // Checked at parse time: a query that parsed does not fail on a value.
    (if p.from_root { root } else { current })
        .query(&p.query)
        .unwrap_or_default()
}

/// A value as kubectl prints one: strings raw, anything else as compact JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn render_nodes(nodes: &[Node], root: &Value, current: &Value, out: &mut String) {
    for node in nodes {
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Path(p) => {
                let found: Vec<String> = results(p, root, current).into_iter().map(shown).collect();
                out.push_str(&found.join(" "));
            }
            Node::Range(p, body) => {
                for item in results(p, root, current) {
                    render_nodes(body, root, item, out);
                }
            }
        }
    }
}

/// Parses `HEADER:PATH,HEADER:PATH`.
pub fn parse_columns(s: &str) -> Result<Vec<Column>, String> {
    let columns = s
        .split(',')
        .map(|spec| {
            let (header, p) = spec.split_once(':').ok_or_else(|| {
                format!(
                    "custom-columns takes HEADER:PATH pairs separated by commas (NAME:.metadata.name), not {spec:?}"
                )
            })?;
            let p = p.trim();
            let p = p.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(p);
            Ok(Column {
                header: header.trim().to_string(),
                path: path(p)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    if columns.iter().any(|c| c.header.is_empty()) {
        return Err(format!("custom-columns: every column needs a header, in {s:?}"));
    }
    Ok(columns)
}

/// The objects (or view entries) a printer goes over: a `List`'s items, an array's elements,
/// else the value itself.
fn items(value: &Value) -> Vec<&Value> {
    match value {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o)
            if o.get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List")) =>
        {
            o.get("items")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default()
        }
        other => vec![other],
    }
}

/// The rows of `-o custom-columns`: one per item, `<none>` where a path finds nothing, several
/// results joined by commas.
pub fn column_rows(columns: &[Column], value: &Value) -> Vec<Vec<String>> {
    items(value)
        .into_iter()
        .map(|item| {
            columns
                .iter()
                .map(|c| {
                    let found: Vec<String> = results(&c.path, item, item).into_iter().map(shown).collect();
                    if found.is_empty() {
                        "<none>".to_string()
                    } else {
                        found.join(",")
                    }
                })
                .collect()
        })
        .collect()
}

/// `-o name`: `kind.group/name` of each object, one per line, as kubectl prints them.
pub fn names(value: &Value) -> Result<String, String> {
    let mut out = String::new();
    for item in items(value) {
        let kind = item.get("kind").and_then(Value::as_str);
        let name = item.pointer("/metadata/name").and_then(Value::as_str);
        let (Some(kind), Some(name)) = (kind, name) else {
            return Err(
                "-o name prints the objects a command reads or writes (get, run, approve, suspend, \
                 resume, cancel); this view is not made of objects: use -o json, -o jsonpath=… or \
                 -o custom-columns=…"
                    .to_string(),
            );
        };
        let group = item
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|v| v.split_once('/'))
            .map(|(group, _)| group);
        match group {
            Some(group) => out.push_str(&format!("{}.{group}/{name}\n", kind.to_lowercase())),
            None => out.push_str(&format!("{}/{name}\n", kind.to_lowercase())),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plans() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan",
                 "metadata": {"name": "a", "labels": {"kratix.io/promise-name": "redis", "team-x": "1"}},
                 "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, {"type": "Other", "status": "False"}]}},
                {"apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan",
                 "metadata": {"name": "b"}, "spec": {"suspend": true}},
            ],
        })
    }

    #[test]
    fn templates_render_as_kubectls() {
        let v = plans();
        // (template, output)
        let table = [
            ("{.items[*].metadata.name}", "a b"),
            ("{.items[0].metadata.name}", "a"),
            ("names: {.items[*].metadata.name}!", "names: a b!"),
            (
                r#"{range .items[*]}{.metadata.name}{"\t"}{.status.phase}{"\n"}{end}"#,
                "a\tRunning\nb\t\n",
            ),
            ("{.items[1].spec}", r#"{"suspend":true}"#),
            ("{.items[1].spec.suspend}", "true"),
            ("{.items[0].metadata.labels.kratix\\.io/promise-name}", "redis"),
            ("{.items[0].metadata.labels['kratix.io/promise-name']}", "redis"),
            ("{.items[0].metadata.labels.team-x}", "1"),
            ("{.items[5].metadata.name}", ""),
            ("{.missing.deeply}", ""),
            (r#"{.items[0].status.conditions[?(@.type=="Ready")].status}"#, "True"),
            ("{..phase}", "Running"),
            ("{.kind}", "List"),
            ("{$.kind}", "List"),
            (r#"{range .items[*]}{$.kind}/{.metadata.name} {end}"#, "List/a List/b "),
            ("plain text", "plain text"),
            (r#"{"{}"}"#, "{}"),
        ];
        for (template, want) in table {
            let t = Template::parse(template).unwrap_or_else(|e| panic!("{template}: {e}"));
            assert_eq!(t.render(&v), want, "{template}");
        }
    }

    #[test]
    fn bad_templates_say_what_is_wrong() {
        for (template, says) in [
            ("{.a", "unclosed"),
            ("{range .items[*]}{.a}", "without {end}"),
            ("{.a}{end}", "without {range"),
            ("{}", "empty"),
            ("{.items[?(@.a==]}", "not a JSONPath"),
        ] {
            let e = Template::parse(template).unwrap_err();
            assert!(e.contains(says), "{template}: {e}");
        }
    }

    #[test]
    fn custom_columns_per_item() {
        let columns =
            parse_columns("NAME:.metadata.name,PHASE:{.status.phase},TYPES:.status.conditions[*].type").unwrap();
        assert_eq!(
            columns.iter().map(|c| c.header.as_str()).collect::<Vec<_>>(),
            ["NAME", "PHASE", "TYPES"]
        );
        assert_eq!(
            column_rows(&columns, &plans()),
            vec![
                vec!["a".to_string(), "Running".into(), "Ready,Other".into()],
                vec!["b".to_string(), "<none>".into(), "<none>".into()],
            ]
        );
        // One object: one row; an array view: a row per element.
        let one = json!({"metadata": {"name": "x"}});
        assert_eq!(column_rows(&columns[..1], &one), vec![vec!["x".to_string()]]);
        let view = json!([{"name": "g1"}, {"name": "g2"}]);
        let name = parse_columns("GROUP:name").unwrap();
        assert_eq!(
            column_rows(&name, &view),
            vec![vec!["g1".to_string()], vec!["g2".to_string()]]
        );
        for bad in ["NAME", "NAME:.a,:.b", "X:.a[?(@.b==]"] {
            assert!(parse_columns(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_kind_dot_group_slash_name() {
        assert_eq!(
            names(&plans()).unwrap(),
            "upgradeplan.platform.syntasso.io/a\nupgradeplan.platform.syntasso.io/b\n"
        );
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(names(&config_map).unwrap(), "configmap/c\n");
        let view = json!({"plan": "p", "valid": true});
        assert!(names(&view).unwrap_err().contains("-o json"));
    }
}
