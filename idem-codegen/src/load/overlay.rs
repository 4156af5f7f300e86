//! OpenAPI Overlay 1.0: actions that change a document somebody else
//! publishes, applied as it loads.
//!
//! An overlay is a list of actions. Each names a `target`, an RFC 9535
//! JSONPath query evaluated against the document as the previous actions
//! left it, and either an `update` to merge into every node it selects or
//! `remove: true` to delete them. Targets are evaluated by `serde_json_path`
//! on a JSON copy of the tree, and the normalized paths it returns lead back
//! to the positioned nodes. The copy holds only what the query can look at:
//! along a leading run of name, index and wildcard selectors it keeps the
//! members those select, and below it, where filters and the like begin,
//! everything; a query that refers to the root again (`$` inside a filter)
//! gets the whole document. Merged
//! nodes keep the positions they have in the overlay file, so a finding that
//! stems from an update points into the overlay, and one from the spec into
//! the spec.
//!
//! Merging follows the specification: an update of a mapping replaces the
//! properties it names and adds the others, recursively, so a nested mapping
//! is merged rather than replaced; a nested sequence is extended; an update
//! of a sequence appends one entry. A target that selects nothing is a
//! warning, since the document it was written for has drifted.
//!
//! Overlays see the document as written: for Swagger 2.0, the 2.0 shape
//! (`parameters` with `in: body`, `definitions`), before idem reads it into
//! the 3.0 shape.

use serde_json::Value as Json;
use serde_json_path::{JsonPath, PathElement};

use crate::source::{Pos, SourceMap};
use crate::tree::{Key, Node, Value};

use super::LoadError;

/// Something an overlay did that is allowed but probably not meant, such as
/// a target that no longer selects anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub pos: Pos,
    pub message: String,
}

/// One step of a normalized path: a member name or an array index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Name(String),
    Index(usize),
}

/// Apply the overlay `overlay` (a parsed overlay file) to `document`, in
/// the order its actions are written.
pub(crate) fn apply(
    document: &mut Node,
    overlay: &Node,
    sources: &SourceMap,
) -> Result<Vec<Warning>, LoadError> {
    let actions = read_overlay(overlay)?;
    let mut warnings = Vec::new();
    for action in actions {
        let query = JsonPath::parse(action.target).map_err(|e| LoadError::Overlay {
            message: format!(
                "`{}` is not a valid JSONPath query (RFC 9535): {}",
                action.target,
                e.message()
            ),
            pos: text_pos(sources, action.target_node, e.position()),
        })?;
        let json = match leading(action.target) {
            Some((lead, complete)) => project(document, &lead, complete),
            None => to_json(document),
        };
        let mut paths: Vec<Vec<Step>> = query
            .query_located(&json)
            .iter()
            .map(|n| {
                n.location()
                    .iter()
                    .map(|e| match e {
                        PathElement::Name(name) => Step::Name((*name).to_owned()),
                        PathElement::Index(i) => Step::Index(*i),
                    })
                    .collect()
            })
            .collect();
        if paths.is_empty() {
            warnings.push(Warning {
                pos: action.target_node.pos,
                message: format!(
                    "overlay target `{}` selects nothing in the document; the action was not applied",
                    action.target
                ),
            });
            continue;
        }
        if action.remove {
            if paths.iter().any(Vec::is_empty) {
                return Err(LoadError::Overlay {
                    message: "an overlay cannot remove the document's root".into(),
                    pos: action.target_node.pos,
                });
            }
            // Deepest and highest index first, so each removal leaves the
            // paths still to be removed valid.
            paths.sort();
            paths.dedup();
            for path in paths.iter().rev() {
                remove(document, path);
            }
        } else if let Some(update) = action.update {
            for path in &paths {
                update_at(document, path, update, &action)?;
            }
        } else {
            warnings.push(Warning {
                pos: action.pos,
                message: "this overlay action has neither an `update` nor `remove: true`; it changes nothing".into(),
            });
        }
    }
    Ok(warnings)
}

struct Action<'a> {
    pos: Pos,
    target: &'a str,
    target_node: &'a Node,
    update: Option<&'a Node>,
    remove: bool,
}

fn overlay_error(message: impl Into<String>, pos: Pos) -> LoadError {
    LoadError::Overlay {
        message: message.into(),
        pos,
    }
}

/// Check the overlay's shape and list its actions.
fn read_overlay(overlay: &Node) -> Result<Vec<Action<'_>>, LoadError> {
    let Some(entries) = overlay.as_map() else {
        return Err(overlay_error(
            format!("an overlay is a mapping, not {}", overlay.kind()),
            overlay.pos,
        ));
    };
    let Some(version) = overlay.get("overlay") else {
        return Err(overlay_error(
            "not an overlay: it has no `overlay` field (write `overlay: 1.0.0`)",
            overlay.pos,
        ));
    };
    let text = version.scalar_text().unwrap_or_default();
    let mut parts = text.split('.');
    let is_1_0 = parts.next() == Some("1")
        && parts.next() == Some("0")
        && parts
            .next()
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && parts.next().is_none();
    if !is_1_0 {
        return Err(overlay_error(
            format!(
                "unsupported overlay version `{text}`: idem applies Overlay 1.0 (`overlay: 1.0.0`)"
            ),
            version.pos,
        ));
    }
    for (key, _) in entries {
        if !matches!(
            key.name.as_str(),
            "overlay" | "info" | "extends" | "actions"
        ) && !key.name.starts_with("x-")
        {
            return Err(overlay_error(
                format!(
                    "unknown overlay field `{}` (an overlay has `overlay`, `info`, `extends`, `actions` and `x-` extensions)",
                    key.name
                ),
                key.pos,
            ));
        }
    }
    match overlay.get("info") {
        None => {
            return Err(overlay_error(
                "an overlay needs `info` with a `title` and a `version`",
                overlay.pos,
            ));
        }
        Some(info) => {
            for field in ["title", "version"] {
                if info.get(field).and_then(Node::scalar_text).is_none() {
                    return Err(overlay_error(
                        format!("the overlay's `info` needs a `{field}`"),
                        info.pos,
                    ));
                }
            }
        }
    }
    let Some(list) = overlay.get("actions") else {
        return Err(overlay_error(
            "an overlay needs `actions`, a list of at least one action",
            overlay.pos,
        ));
    };
    let Some(items) = list.as_seq().filter(|items| !items.is_empty()) else {
        return Err(overlay_error(
            format!(
                "`actions` is a list of at least one action, not {}",
                if list.as_seq().is_some() {
                    "an empty list"
                } else {
                    list.kind()
                }
            ),
            list.pos,
        ));
    };
    items.iter().map(read_action).collect()
}

fn read_action(node: &Node) -> Result<Action<'_>, LoadError> {
    let Some(entries) = node.as_map() else {
        return Err(overlay_error(
            format!("an overlay action is a mapping, not {}", node.kind()),
            node.pos,
        ));
    };
    for (key, _) in entries {
        if !matches!(
            key.name.as_str(),
            "target" | "description" | "update" | "remove"
        ) && !key.name.starts_with("x-")
        {
            return Err(overlay_error(
                format!(
                    "unknown action field `{}` (an action has `target`, `description`, `update`, `remove` and `x-` extensions)",
                    key.name
                ),
                key.pos,
            ));
        }
    }
    let Some(target_node) = node.get("target") else {
        return Err(overlay_error(
            "an overlay action needs a `target` (a JSONPath query such as `$.paths.*.post`)",
            node.pos,
        ));
    };
    let Some(target) = target_node.as_str() else {
        return Err(overlay_error(
            format!(
                "`target` is a JSONPath query string, not {}",
                target_node.kind()
            ),
            target_node.pos,
        ));
    };
    let remove = match node.get("remove") {
        None => false,
        Some(flag) => flag.as_bool().ok_or_else(|| {
            overlay_error(
                format!("`remove` is true or false, not {}", flag.kind()),
                flag.pos,
            )
        })?,
    };
    Ok(Action {
        pos: node.pos,
        target,
        target_node,
        update: node.get("update"),
        remove,
    })
}

/// The position of character `offset` of a one-line string written at
/// `node` (past its opening quote, when it has one).
fn text_pos(sources: &SourceMap, node: &Node, offset: usize) -> Pos {
    let quoted = sources
        .get(node.pos.file)
        .and_then(|f| f.excerpt(node.pos.line, node.pos.column, 1, 1))
        .and_then(|e| e.text[e.offset..].chars().next())
        .is_some_and(|c| c == '"' || c == '\'');
    let shift = u32::try_from(offset).unwrap_or(0) + u32::from(quoted);
    Pos {
        column: node.pos.column.saturating_add(shift),
        ..node.pos
    }
}

fn update_at(
    document: &mut Node,
    path: &[Step],
    update: &Node,
    action: &Action<'_>,
) -> Result<(), LoadError> {
    let Some(node) = node_at(document, path) else {
        return Ok(());
    };
    match &node.value {
        Value::Map(_) => {
            if update.as_map().is_none() {
                return Err(overlay_error(
                    format!(
                        "target `{}` selects a mapping (at {}), so its `update` must be a mapping, not {}",
                        action.target,
                        shown(path),
                        update.kind()
                    ),
                    update.pos,
                ));
            }
            merge(node, update);
        }
        Value::Seq(_) => {
            if let Value::Seq(items) = &mut node.value {
                items.push(update.clone());
            }
        }
        _ => {
            return Err(overlay_error(
                format!(
                    "target `{}` selects {} (at {}); Overlay 1.0 updates mappings and sequences only, so select its parent and update the field",
                    action.target,
                    node.kind(),
                    shown(path)
                ),
                action.target_node.pos,
            ));
        }
    }
    Ok(())
}

/// A normalized path as RFC 9535 writes it: `$['paths']['/a']['post']`.
fn shown(path: &[Step]) -> String {
    let mut out = String::from("$");
    for step in path {
        match step {
            Step::Name(name) => {
                out.push_str("['");
                out.push_str(&name.replace('\\', "\\\\").replace('\'', "\\'"));
                out.push_str("']");
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Merge mapping `update` into mapping `node`: mappings merge, sequences
/// extend, anything else replaces.
fn merge(node: &mut Node, update: &Node) {
    let (Value::Map(entries), Some(updates)) = (&mut node.value, update.as_map()) else {
        return;
    };
    for (key, new) in updates {
        match entries.iter_mut().find(|(k, _)| k.name == key.name) {
            Some((_, old)) => match (&mut old.value, &new.value) {
                (Value::Map(_), Value::Map(_)) => merge(old, new),
                (Value::Seq(items), Value::Seq(more)) => items.extend(more.iter().cloned()),
                _ => *old = new.clone(),
            },
            None => entries.push((
                Key {
                    name: key.name.clone(),
                    pos: key.pos,
                },
                new.clone(),
            )),
        }
    }
}

fn remove(document: &mut Node, path: &[Step]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    if let Some(node) = node_at(document, parent) {
        match (&mut node.value, last) {
            (Value::Map(entries), Step::Name(name)) => entries.retain(|(k, _)| &k.name != name),
            (Value::Seq(items), Step::Index(i)) if *i < items.len() => {
                items.remove(*i);
            }
            _ => {}
        }
    }
}

fn node_at<'a>(mut node: &'a mut Node, path: &[Step]) -> Option<&'a mut Node> {
    for step in path {
        node = match (&mut node.value, step) {
            (Value::Map(entries), Step::Name(name)) => entries
                .iter_mut()
                .find(|(k, _)| &k.name == name)
                .map(|(_, v)| v)?,
            (Value::Seq(items), Step::Index(i)) => items.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(node)
}

/// The JSON a tree stands for. Numbers serde_json cannot hold as written
/// (YAML's `0x1F`, `.inf`) become strings.
fn to_json(node: &Node) -> Json {
    match &node.value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Number(text) => text
            .parse::<serde_json::Number>()
            .map_or_else(|_| Json::String(text.clone()), Json::Number),
        Value::String(s) => Json::String(s.clone()),
        Value::Seq(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Map(entries) => Json::Object(
            entries
                .iter()
                .map(|(k, v)| (k.name.clone(), to_json(v)))
                .collect(),
        ),
    }
}

/// A leading selector of a query: a member name, or any child (a wildcard,
/// or an index, for which every element is kept so indices stay true).
#[derive(Debug, PartialEq, Eq)]
enum Lead {
    Name(String),
    Any,
}

/// The run of name, index and wildcard selectors a query starts with, and
/// whether that run is the whole query; `None` when the query refers to
/// the root again, so the whole document must be at hand. What is not
/// recognised here ends the run; it is never guessed at, as everything
/// below the run is kept whole.
fn leading(target: &str) -> Option<(Vec<Lead>, bool)> {
    let mut rest = target.strip_prefix('$')?;
    if rest.contains('$') {
        return None;
    }
    let mut lead = Vec::new();
    loop {
        if rest.is_empty() {
            return Some((lead, true));
        }
        if let Some(r) = rest.strip_prefix(".*").or_else(|| rest.strip_prefix("[*]")) {
            lead.push(Lead::Any);
            rest = r;
        } else if rest.starts_with("..") {
            break;
        } else if let Some(r) = rest.strip_prefix('.') {
            // RFC 9535 member-name-shorthand, ASCII only: a name that goes
            // on in non-ASCII characters ends the run instead.
            let end = r
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(r.len());
            let (name, after) = r.split_at(end);
            let starts_well = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
            if !starts_well || after.starts_with(|c: char| !c.is_ascii()) {
                break;
            }
            lead.push(Lead::Name(name.to_owned()));
            rest = after;
        } else if let Some((name, after)) = bracketed_name(rest) {
            lead.push(Lead::Name(name.to_owned()));
            rest = after;
        } else if let Some(after) = bracketed_index(rest) {
            lead.push(Lead::Any);
            rest = after;
        } else {
            break;
        }
    }
    Some((lead, false))
}

/// `['name']` or `["name"]` with no escapes, and what follows it.
fn bracketed_name(text: &str) -> Option<(&str, &str)> {
    let quote = text
        .strip_prefix('[')?
        .chars()
        .next()
        .filter(|c| *c == '\'' || *c == '"')?;
    let inner = &text[2..];
    let end = inner.find(quote)?;
    let name = &inner[..end];
    let after = inner[end + 1..].strip_prefix(']')?;
    (!name.contains('\\')).then_some((name, after))
}

/// `[N]` with N a non-negative index, and what follows it.
fn bracketed_index(text: &str) -> Option<&str> {
    let inner = text.strip_prefix('[')?;
    let end = inner.find(']')?;
    let digits = &inner[..end];
    let valid = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    valid.then(|| &inner[end + 1..])
}

/// The JSON copy of `node` a query with leading run `lead` needs: the
/// members the run selects, and below the run, everything (or, when the run
/// is the whole query, nothing: only where the selected nodes are matters).
fn project(node: &Node, lead: &[Lead], complete: bool) -> Json {
    let Some((first, rest)) = lead.split_first() else {
        return if complete { Json::Null } else { to_json(node) };
    };
    match (&node.value, first) {
        (Value::Map(entries), _) => Json::Object(
            entries
                .iter()
                .filter(|(k, _)| match first {
                    Lead::Name(name) => &k.name == name,
                    Lead::Any => true,
                })
                .map(|(k, v)| (k.name.clone(), project(v, rest, complete)))
                .collect(),
        ),
        (Value::Seq(items), Lead::Any) => {
            Json::Array(items.iter().map(|v| project(v, rest, complete)).collect())
        }
        // A name selects nothing in a sequence, nor anything in a scalar.
        _ => Json::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(lead: &[Lead]) -> Vec<String> {
        lead.iter()
            .map(|l| match l {
                Lead::Name(n) => n.clone(),
                Lead::Any => "*".to_owned(),
            })
            .collect()
    }

    #[test]
    fn leading_runs() {
        let run = |t: &str| leading(t).map(|(lead, complete)| (names(&lead), complete));
        assert_eq!(run("$"), Some((vec![], true)));
        assert_eq!(
            run("$.paths.*.post"),
            Some((vec!["paths".into(), "*".into(), "post".into()], true))
        );
        assert_eq!(
            run("$.paths['/v1/a'][\"x-idempotency\"][0]"),
            Some((
                vec![
                    "paths".into(),
                    "/v1/a".into(),
                    "x-idempotency".into(),
                    "*".into()
                ],
                true
            ))
        );
        // Filters, descendants, unions, slices, escapes and non-ASCII
        // names end the run; the rest is evaluated on whole subtrees.
        assert_eq!(
            run("$.paths[?@.get].post"),
            Some((vec!["paths".into()], false))
        );
        assert_eq!(run("$..post"), Some((vec![], false)));
        assert_eq!(run("$.a['b','c']"), Some((vec!["a".into()], false)));
        assert_eq!(run("$.a[0:2]"), Some((vec!["a".into()], false)));
        assert_eq!(run("$.a[-1]"), Some((vec!["a".into()], false)));
        assert_eq!(run("$.a['it\\'s']"), Some((vec!["a".into()], false)));
        assert_eq!(run("$.na\u{ef}ve"), Some((vec![], false)));
        assert_eq!(run("$.a .b"), Some((vec!["a".into()], false)));
        // The root again: the whole document.
        assert_eq!(run("$.paths[?@.x == $.info.version]"), None);
    }
}
