//! Resource groups: how a client's operations are gathered under
//! `client.charges()`, and what each is called there.
//!
//! An operation belongs to its first tag, or, untagged, to the first path
//! segment that names something (`/v1/charges/{id}` → `charges`; version
//! segments and templates are skipped). Inside its group a method drops the
//! group's own words: `createCharge` on `charges` is `create`. An
//! operationId spelled from its method and path, as Stripe's are
//! (`PostChargesChargeCapture`), says nothing the path does not, so its
//! method is named from the path's shape instead: `list`, `create`,
//! `retrieve`, `update`, `delete`, or the action the path ends in
//! (`capture`). Where two methods of a group would share a name, both keep
//! their operationId's full name.

use std::collections::BTreeMap;

use super::super::naming::{self, Namer};
use crate::model::{Model, Operation};

/// One group: its key (a snake-case name) and operations.
pub(super) struct Group<'m> {
    pub key: String,
    /// What the group is, for docs: "the `charges` tag", "`/v1/charges`".
    pub origin: String,
    pub ops: Vec<&'m Operation>,
}

/// The operations of `model` by group, groups by key, operations by path
/// and method.
pub(super) fn groups(model: &Model) -> Vec<Group<'_>> {
    let mut by_key: BTreeMap<String, Group<'_>> = BTreeMap::new();
    for op in &model.operations {
        let (raw, origin) = match op.tags.first() {
            Some(tag) => (tag.clone(), format!("the `{tag}` tag")),
            None => match leading_segment(&op.path) {
                Some((segment, prefix)) => (segment.to_owned(), format!("`{prefix}`")),
                None => ("root".to_owned(), "`/`".to_owned()),
            },
        };
        let key = naming::snake(&raw, "root");
        by_key
            .entry(key.clone())
            .or_insert_with(|| Group {
                key,
                origin,
                ops: Vec::new(),
            })
            .ops
            .push(op);
    }
    let mut out: Vec<Group<'_>> = by_key.into_values().collect();
    for group in &mut out {
        group
            .ops
            .sort_by(|a, b| (&a.path, a.method).cmp(&(&b.path, b.method)));
    }
    out
}

/// The first literal segment of `path` that is not a version (`v1`,
/// `v2.1`) or `api`, and the path up to it.
fn leading_segment(path: &str) -> Option<(&str, &str)> {
    let mut end = 0;
    for segment in path.split('/') {
        end += segment.len() + 1;
        if segment.is_empty() || is_template(segment) || is_version(segment) {
            continue;
        }
        return Some((segment, &path[..(end - 1).min(path.len())]));
    }
    None
}

fn is_template(segment: &str) -> bool {
    segment.contains('{')
}

fn is_version(segment: &str) -> bool {
    let s = segment.to_ascii_lowercase();
    s == "api"
        || s.strip_prefix('v').is_some_and(|rest| {
            rest.starts_with(|c: char| c.is_ascii_digit())
                && rest
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '.' || c == '_')
        })
}

/// The method name of each operation of `group`, in order; unique within
/// the group.
pub(super) fn member_names(group: &Group<'_>) -> Vec<String> {
    let short: Vec<Option<String>> = group.ops.iter().map(|op| short_name(op, group)).collect();
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for name in short.iter().flatten() {
        *count.entry(name.as_str()).or_default() += 1;
    }
    let mut namer = Namer::default();
    group
        .ops
        .iter()
        .zip(&short)
        .map(|(op, name)| {
            let name = match name {
                Some(name) if count.get(name.as_str()) == Some(&1) => name.clone(),
                _ => naming::snake(&op.name, "call"),
            };
            // `new` is a constructor by convention (and clippy's): an
            // operation called that is named with its method.
            let name = if name == "new" {
                format!("{}_new", op.method.as_str().to_ascii_lowercase())
            } else {
                name
            };
            namer.unique(&name)
        })
        .collect()
}

/// The name inside the group, when a shorter one than the operationId's
/// says as much; `None` keeps the full name.
fn short_name(op: &Operation, group: &Group<'_>) -> Option<String> {
    let words = word_list(&op.name);
    let method = op.method.as_str().to_ascii_lowercase();
    let name = if words.first() == Some(&method) && words[1..] == path_words(&op.path)[..] {
        from_path(op, &group.key)?
    } else {
        without_group(&words, &group.key)?
    };
    // A keyword would need `r#`; the full name reads better.
    let checked = naming::snake(&name, "call");
    (checked == name).then_some(name)
}

fn word_list(raw: &str) -> Vec<String> {
    naming::snake(raw, "")
        .trim_start_matches("r#")
        .split('_')
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The words of a path's segments, templates by their names, versions left
/// out: the words a path-derived operationId repeats.
fn path_words(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty() && !is_version(s))
        .flat_map(|s| word_list(s.trim_matches(|c| c == '{' || c == '}')))
        .collect()
}

/// `words` without the group's words (or their singular), where they
/// occur together; `None` when nothing is left or nothing was removed.
fn without_group(words: &[String], key: &str) -> Option<String> {
    let group = word_list(key);
    if group.is_empty() {
        return None;
    }
    let mut singular = group.clone();
    if let Some(last) = singular.last_mut() {
        *last = singularize(last);
    }
    for needle in [&group, &singular] {
        if let Some(at) = words.windows(needle.len()).position(|w| w == &needle[..]) {
            let rest: Vec<&str> = words[..at]
                .iter()
                .chain(&words[at + needle.len()..])
                .map(String::as_str)
                .collect();
            return (!rest.is_empty()).then(|| rest.join("_"));
        }
    }
    None
}

fn singularize(word: &str) -> String {
    if let Some(stem) = word.strip_suffix("ies") {
        format!("{stem}y")
    } else if word.ends_with("ss") {
        word.to_owned()
    } else if let Some(stem) = word.strip_suffix('s') {
        stem.to_owned()
    } else {
        word.to_owned()
    }
}

/// A REST name from the path after the group's segment and the method.
fn from_path(op: &Operation, key: &str) -> Option<String> {
    let segments: Vec<&str> = op.path.split('/').filter(|s| !s.is_empty()).collect();
    let at = segments
        .iter()
        .position(|s| !is_template(s) && naming::snake(s, "") == key)?;
    let rest = &segments[at + 1..];
    let literals: Vec<String> = rest
        .iter()
        .filter(|s| !is_template(s))
        .map(|s| naming::snake(s, "").trim_start_matches("r#").to_owned())
        .collect();
    let item = rest.last().is_some_and(|s| is_template(s));
    let method = op.method.as_str();
    // `/v1/balance` names one thing, not a collection of them.
    let singleton = singularize(key) == key;
    if literals.is_empty() {
        let name = match (item || singleton, method) {
            (false, "GET") => "list",
            (false, "POST") => "create",
            (false, "PUT") => "replace",
            (false, "PATCH") => "update",
            (false, "DELETE") => "delete_all",
            (true, "GET") => "retrieve",
            (true, "POST" | "PUT" | "PATCH") => "update",
            (true, "DELETE") => "delete",
            _ => return None,
        };
        return Some(name.to_owned());
    }
    let base = literals.join("_");
    let one = singularize(&base);
    let plural = one != base;
    Some(match (item, method) {
        (false, "GET") if plural => format!("list_{base}"),
        (false, "GET") => base,
        (false, "POST") if plural => format!("create_{one}"),
        (false, "POST") => base,
        (false, "PUT") => format!("replace_{base}"),
        (false, "PATCH") => format!("update_{base}"),
        (false, "DELETE") => format!("delete_{base}"),
        (true, "GET") => format!("retrieve_{one}"),
        (true, "POST" | "PUT" | "PATCH") => format!("update_{one}"),
        (true, "DELETE") => format!("delete_{one}"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_templates_are_not_resources() {
        assert_eq!(
            leading_segment("/v1/charges/{id}"),
            Some(("charges", "/v1/charges"))
        );
        assert_eq!(
            leading_segment("/api/v2.1/users"),
            Some(("users", "/api/v2.1/users"))
        );
        assert_eq!(
            leading_segment("/{tenant}/orders"),
            Some(("orders", "/{tenant}/orders"))
        );
        assert_eq!(leading_segment("/"), None);
        assert!(!is_version("vendors"));
    }

    #[test]
    fn a_group_drops_its_own_words() {
        let words = |s: &str| word_list(s);
        assert_eq!(
            without_group(&words("createCharge"), "charges").as_deref(),
            Some("create")
        );
        assert_eq!(
            without_group(&words("listCharges"), "charges").as_deref(),
            Some("list")
        );
        assert_eq!(
            without_group(&words("repos/create-fork"), "repos").as_deref(),
            Some("create_fork")
        );
        assert_eq!(
            without_group(&words("createLegacyCharge"), "legacy_charges").as_deref(),
            Some("create")
        );
        assert_eq!(without_group(&words("slow"), "slow"), None);
        assert_eq!(without_group(&words("health"), "orders"), None);
        assert_eq!(singularize("policies"), "policy");
        assert_eq!(singularize("address"), "address");
    }
}
