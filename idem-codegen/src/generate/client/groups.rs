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
pub(crate) struct Group<'m> {
    pub key: String,
    /// What the group is, for docs: "the `charges` tag", "`/v1/charges`".
    pub origin: String,
    pub ops: Vec<&'m Operation>,
}

/// The operations of `model` by group, groups by key, operations by path
/// and method.
pub(crate) fn groups(model: &Model) -> Vec<Group<'_>> {
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
pub(crate) fn member_names(group: &Group<'_>) -> Vec<String> {
    let choices: Vec<Vec<String>> = group.ops.iter().map(|op| short_names(op, group)).collect();
    let tally = |names: &[Option<String>]| {
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        for name in names.iter().flatten() {
            *count.entry(name.clone()).or_default() += 1;
        }
        count
    };
    // First choices; one that collides falls back to its second, when that
    // is free.
    // A parent's name that tells siblings apart stays: beside
    // `list_organization` (`GET /organization/certificates`), `list_project`
    // (`GET /organization/projects/{id}/certificates`) says which list.
    let qualifiers: Vec<String> = group
        .ops
        .iter()
        .zip(&choices)
        .filter(|(_, c)| c.len() == 1)
        .filter_map(|(op, c)| qualifier(&c[0], op))
        .collect();
    let choices: Vec<Vec<String>> = choices
        .into_iter()
        .map(|c| match c.as_slice() {
            [_, rest @ .., last] if qualifiers.iter().any(|q| verb(q) == verb(last)) => {
                rest.iter().chain([last]).cloned().collect()
            }
            _ => c,
        })
        .collect();
    let picked = |pick: &[usize]| -> Vec<Option<String>> {
        choices
            .iter()
            .zip(pick)
            .map(|(c, &i)| c.get(i).cloned())
            .collect()
    };
    // Each takes its first name; where names collide, those that have
    // another try it, while it is free.
    let mut pick: Vec<usize> = vec![0; choices.len()];
    for _ in 0..3 {
        let short = picked(&pick);
        let count = tally(&short);
        let mut moved = false;
        for (n, c) in choices.iter().enumerate() {
            let Some(name) = &short[n] else { continue };
            if count.get(name) != Some(&1)
                && let Some(next) = c.get(pick[n] + 1)
                && !count.contains_key(next)
            {
                pick[n] += 1;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let short = picked(&pick);
    let count = tally(&short);
    let mut namer = Namer::default();
    group
        .ops
        .iter()
        .zip(&short)
        .map(|(op, name)| {
            let name = match name {
                Some(name) if count.get(name) == Some(&1) => name.clone(),
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

/// The names inside the group, best first, when shorter ones than the
/// operationId's say as much; none keeps the full name.
fn short_names(op: &Operation, group: &Group<'_>) -> Vec<String> {
    let words = word_list(&op.name);
    let method = op.method.as_str().to_ascii_lowercase();
    let names = if let Some(name) = op
        .operation_id
        .as_deref()
        .and_then(|id| after_group_segment(id, &group.key))
    {
        vec![name]
    } else if words.first() == Some(&method) && words[1..] == path_words(&op.path)[..] {
        from_path(op, &group.key).into_iter().collect()
    } else {
        let loose = op.operation_id.as_ref().is_some_and(|id| *id != op.name);
        match without_group(&words, &group.key, loose) {
            None => Vec::new(),
            Some(stripped) => {
                let shorter = without_selector(&words, &group.key);
                let named = shorter.as_deref().unwrap_or(&stripped);
                // What names another resource gives way to the path's
                // shape, in a group that is a collection; each name gives
                // way to the next when it is taken.
                let words: Vec<&str> = named.split('_').collect();
                let collection = singularize(&group.key) != group.key;
                let shape = ((collection && misleads(named, op, &group.key))
                    || stray(&words, op, &group.key))
                .then(|| from_path(op, &group.key))
                .flatten();
                let mut names: Vec<String> = shape.into_iter().chain(shorter).collect();
                names.push(stripped);
                names.dedup();
                names
            }
        }
    };
    // A keyword would need `r#`; the full name reads better.
    names
        .into_iter()
        .filter(|name| naming::snake(name, "call") == *name)
        .collect()
}

/// For a dotted operationId (`v1.message-attempt.list-by-msg`, Google's
/// `pubsub.projects.topics.create`), what follows the segment that names
/// the group: `list_by_msg` on `message_attempt`, `topics_create` on
/// `projects`. Whether the document's other operationIds are dotted does
/// not matter.
fn after_group_segment(id: &str, key: &str) -> Option<String> {
    let segments: Vec<&str> = id.split('.').collect();
    if segments.len() < 2 {
        return None;
    }
    let group = word_list(key).join("_");
    let names_group = |segment: &str| {
        let spelled = word_list(segment).join("_");
        !spelled.is_empty()
            && (spelled == group
                || singularize(&spelled) == singularize(&group)
                || pluralize(&spelled) == group)
    };
    let at = segments.iter().rposition(|s| names_group(s))?;
    let rest: Vec<String> = segments[at + 1..]
        .iter()
        .map(|s| word_list(s).join("_"))
        .filter(|s| !s.is_empty())
        .collect();
    (!rest.is_empty()).then(|| rest.join("_"))
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
/// `loose`, for a name already shortened from a FastAPI- or Google-shaped
/// operationId, also takes the plural and, in a group of several words,
/// its last word alone.
fn without_group(words: &[String], key: &str, loose: bool) -> Option<String> {
    let group = word_list(key);
    if group.is_empty() {
        return None;
    }
    let with_last = |f: fn(&str) -> String| {
        let mut words = group.clone();
        if let Some(last) = words.last_mut() {
            *last = f(last);
        }
        words
    };
    let (singular, plural) = (with_last(singularize), with_last(pluralize));
    // The whole group's words (`message_attempt`), else, for a group of
    // several words, its last (`list_attempts_by_msg` on `message_attempt`).
    let last: Vec<Vec<String>> = match group.split_last() {
        Some((_, rest)) if loose && !rest.is_empty() => [&group, &singular, &plural]
            .iter()
            .filter_map(|g| g.last().map(|w| vec![w.clone()]))
            .collect(),
        _ => Vec::new(),
    };
    let plural = [&plural].into_iter().filter(|_| loose);
    for needle in [&group, &singular].into_iter().chain(plural).chain(&last) {
        if let Some(at) = words.windows(needle.len()).position(|w| w == &needle[..]) {
            let (head, tail) = (&words[..at], &words[at + needle.len()..]);
            let rest: Vec<&str> = head.iter().chain(tail).map(String::as_str).collect();
            return (!rest.is_empty()).then(|| rest.join("_"));
        }
    }
    None
}

/// The plural of a singular noun, for matching: `application` →
/// `applications`, `policy` → `policies`; a plural stays.
fn pluralize(word: &str) -> String {
    if singularize(word) != word {
        word.to_owned()
    } else if let Some(stem) = word.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'o', 'u'])
    {
        format!("{stem}ies")
    } else if word.ends_with("ss") || word.ends_with('x') || word.ends_with("ch") {
        format!("{word}es")
    } else {
        format!("{word}s")
    }
}

/// Where the group's words were taken from the middle of `words` and what
/// follows them only said which one (`by_id`), the name without it:
/// `download_file_by_id` on `files` is `download`,
/// `get_details_of_file_by_id` is `get_details`.
fn without_selector(words: &[String], key: &str) -> Option<String> {
    let group = word_list(key);
    let singular: Vec<String> = match group.split_last() {
        Some((last, rest)) => rest.iter().cloned().chain([singularize(last)]).collect(),
        None => return None,
    };
    for needle in [&group, &singular] {
        let Some(at) = words.windows(needle.len()).position(|w| w == &needle[..]) else {
            continue;
        };
        let (head, tail) = (&words[..at], &words[at + needle.len()..]);
        let selector = matches!(tail.first().map(String::as_str), Some("by"))
            && tail.len() <= 3
            && tail
                .last()
                .is_some_and(|w| matches!(w.as_str(), "id" | "uuid" | "name" | "key" | "index"));
        let head = trim_prepositions(head);
        if !selector || head.is_empty() {
            return None;
        }
        return Some(
            head.iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join("_"),
        );
    }
    None
}

fn verb(name: &str) -> &str {
    name.split('_').next().unwrap_or(name)
}

/// `name` when it is a verb and one word that is a literal of the path
/// (`list_organization` for `GET /organization/certificates`).
fn qualifier(name: &str, op: &Operation) -> Option<String> {
    let words: Vec<&str> = name.split('_').collect();
    let [_, noun] = words.as_slice() else {
        return None;
    };
    path_words(&op.path)
        .iter()
        .any(|w| w == noun || singularize(w) == *noun)
        .then(|| name.to_owned())
}

fn is_preposition(word: &str) -> bool {
    matches!(word, "of" | "by" | "for" | "with" | "from" | "in" | "to")
}

/// `words` without the prepositions they end in.
fn trim_prepositions(words: &[String]) -> &[String] {
    let keep = words
        .iter()
        .rposition(|w| !is_preposition(w))
        .map_or(0, |i| i + 1);
    &words[..keep]
}

/// Whether what is left of an operationId names another resource than the
/// operation's own: `get_vault` for `GET /vaults/{v}/items` on `items`
/// lists items, `get_server` for `GET /health` reads the health.
fn misleads(name: &str, op: &Operation, key: &str) -> bool {
    let words: Vec<&str> = name.split('_').collect();
    let Some((_verb, nouns)) = words.split_first() else {
        return false;
    };
    // The resources the group's own is nested in: the collections before
    // the group's segment that an identifier follows (`vaults` in
    // `/vaults/{v}/items`, not `memberships` in `/memberships/orgs/{org}`).
    let segments: Vec<&str> = op
        .path
        .split('/')
        .filter(|s| !s.is_empty() && !is_version(s))
        .collect();
    let snake = |s: &str| naming::snake(s, "").trim_start_matches("r#").to_owned();
    let Some(at) = segments
        .iter()
        .position(|s| !is_template(s) && snake(s) == key)
    else {
        return stray(&words, op, key);
    };
    let others: Vec<String> = segments[..at]
        .windows(2)
        .filter(|w| !is_template(w[0]) && is_template(w[1]))
        .map(|w| snake(w[0]))
        .collect();
    // The nouns after a preposition are a scope (`list_for_authenticated_user`),
    // not what the operation acts on.
    let names_another = nouns.iter().enumerate().any(|(i, w)| {
        let scoped = nouns[..i].iter().any(|n| is_preposition(n));
        !scoped
            && others
                .iter()
                .any(|o| *w == o.as_str() || *w == singularize(o).as_str())
    });
    names_another || stray(&words, op, key)
}

/// `get_X` on a group that is one thing (`health`), where `X` is not in the
/// path: what is read is the group's thing, not `X`.
fn stray(words: &[&str], op: &Operation, key: &str) -> bool {
    words.len() == 2
        && words[0] == "get"
        && singularize(key) == key
        && !path_words(&op.path)
            .iter()
            .any(|w| w == words[1] || singularize(w) == words[1])
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
            (true, "POST" | "PATCH") => "update",
            (true, "PUT") => "replace",
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
    fn a_dotted_id_is_named_by_what_follows_its_group() {
        assert_eq!(
            after_group_segment("v1.message-attempt.list-by-msg", "message_attempt").as_deref(),
            Some("list_by_msg")
        );
        assert_eq!(
            after_group_segment("v1.application.list", "application").as_deref(),
            Some("list")
        );
        assert_eq!(
            after_group_segment("pubsub.projects.topics.create", "projects").as_deref(),
            Some("topics_create")
        );
        // Plural group, singular segment.
        assert_eq!(
            after_group_segment("v1.endpoint.get", "endpoints").as_deref(),
            Some("get")
        );
        assert_eq!(after_group_segment("v1.application", "application"), None);
        assert_eq!(after_group_segment("createCharge", "charges"), None);
        assert_eq!(after_group_segment("v1.health.get", "orders"), None);
    }

    #[test]
    fn a_group_drops_its_own_words() {
        let words = |s: &str| word_list(s);
        assert_eq!(
            without_group(&words("createCharge"), "charges", false).as_deref(),
            Some("create")
        );
        assert_eq!(
            without_group(&words("listCharges"), "charges", false).as_deref(),
            Some("list")
        );
        assert_eq!(
            without_group(&words("repos/create-fork"), "repos", false).as_deref(),
            Some("create_fork")
        );
        assert_eq!(
            without_group(&words("createLegacyCharge"), "legacy_charges", false).as_deref(),
            Some("create")
        );
        assert_eq!(without_group(&words("slow"), "slow", false), None);
        assert_eq!(without_group(&words("health"), "orders", false), None);
        assert_eq!(
            without_selector(&words("DownloadFileByID"), "files").as_deref(),
            Some("download")
        );
        assert_eq!(
            without_selector(&words("GetDetailsOfFileById"), "files").as_deref(),
            Some("get_details")
        );
        assert_eq!(
            without_group(&words("instance_view_by_id"), "instances", false).as_deref(),
            Some("view_by_id")
        );
        assert_eq!(
            without_group(&words("list_applications"), "application", true).as_deref(),
            Some("list")
        );
        assert_eq!(
            without_group(&words("list_attempts_by_msg"), "message_attempt", true).as_deref(),
            Some("list_by_msg")
        );
        assert_eq!(
            without_group(&words("list_applications"), "application", false),
            None
        );
        assert_eq!(pluralize("policy"), "policies");
        assert_eq!(pluralize("key"), "keys");
        assert_eq!(pluralize("charges"), "charges");
        assert_eq!(singularize("policies"), "policy");
        assert_eq!(singularize("address"), "address");
    }
}
