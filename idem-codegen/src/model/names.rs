//! Operation names where the operationId spells out more than the
//! operation: FastAPI's `{function}_{path}_{method}`
//! (`list_applications_api_v1_app__get`), and a service prefix every
//! operationId of a document repeats (Google's
//! `sasportal.customers.list`). The name drops what only repeats the path,
//! the method or the service; the operationId itself is kept as written
//! (the audit, the baseline and the probe quote it).

use super::Operation;

/// Renames the operations of one document in place. A shortened name that
/// two operations would share is not taken: both keep their own.
pub(super) fn tidy(operations: &mut [Operation]) {
    let seen: Vec<Seen<'_>> = operations
        .iter()
        .map(|op| Seen {
            method: op.method.as_str(),
            path: &op.path,
            id: op.operation_id.as_deref(),
            name: &op.name,
        })
        .collect();
    let shorter = shortened(&seen);
    for (op, name) in operations.iter_mut().zip(shorter) {
        if let Some(name) = name {
            op.name = name;
        }
    }
}

/// What naming reads of an operation.
struct Seen<'a> {
    method: &'a str,
    path: &'a str,
    id: Option<&'a str>,
    /// The name so far: the operationId, or one derived from the path.
    name: &'a str,
}

/// The shorter name of each operation, where it has one no other takes.
fn shortened(ops: &[Seen<'_>]) -> Vec<Option<String>> {
    let service = service_prefix(ops);
    let shorter: Vec<Option<String>> = ops
        .iter()
        .map(|op| {
            let id = op.id?;
            let id = match &service {
                Some(prefix) => id.strip_prefix(prefix.as_str())?,
                None => id,
            };
            Some(without_path_and_method(id, op).unwrap_or_else(|| id.to_owned()))
        })
        .collect();
    // Names as the generated code spells them: two that differ only in
    // case or separators are one.
    let spelled = |name: &str| heck::ToSnakeCase::to_snake_case(name);
    let mut count = std::collections::HashMap::new();
    for (name, op) in shorter.iter().zip(ops) {
        *count
            .entry(spelled(name.as_deref().unwrap_or(op.name)))
            .or_insert(0usize) += 1;
    }
    shorter
        .into_iter()
        .zip(ops)
        .map(|(name, op)| {
            name.filter(|n| count.get(&spelled(n)) == Some(&1) && Some(n.as_str()) != op.id)
        })
        .collect()
}

/// The first dotted segment, with its dot, when every operation has an
/// operationId of at least three segments that starts with it
/// (`sasportal.` of `sasportal.customers.list`), and there are two
/// operations or more.
fn service_prefix(operations: &[Seen<'_>]) -> Option<String> {
    let mut prefix: Option<&str> = None;
    for op in operations {
        let id = op.id?;
        let (first, rest) = id.split_once('.')?;
        if first.is_empty() || !rest.contains('.') || prefix.is_some_and(|p| p != first) {
            return None;
        }
        prefix = Some(first);
    }
    let prefix = prefix?;
    (operations.len() >= 2).then(|| format!("{prefix}."))
}

/// `id`'s words before the words of the operation's path and its method,
/// when it ends in them (FastAPI: `list_applications_api_v1_app__get` for
/// `GET /api/v1/app/` is `list_applications`); `None` otherwise.
fn without_path_and_method(id: &str, op: &Seen<'_>) -> Option<String> {
    // Words as snake case splits them, so that a camel-case path
    // (`/regionDailySales`) meets its snake-case spelling.
    let words = |text: &str| -> Vec<String> {
        let snake = heck::ToSnakeCase::to_snake_case(text);
        snake
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let own = words(id);
    let mut tail = words(op.path);
    if tail.is_empty() {
        return None;
    }
    tail.push(op.method.to_ascii_lowercase());
    let head = own.len().checked_sub(tail.len()).filter(|&n| n > 0)?;
    (own[head..] == tail[..]).then(|| own[..head].join("_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of `(method, path, operationId)`s after tidying.
    fn names<'a>(ops: &[(&'a str, &'a str, &'a str)]) -> Vec<String> {
        let seen: Vec<Seen<'a>> = ops
            .iter()
            .map(|&(method, path, id)| Seen {
                method,
                path,
                id: Some(id),
                name: id,
            })
            .collect();
        shortened(&seen)
            .into_iter()
            .zip(ops)
            .map(|(short, op)| short.unwrap_or_else(|| op.2.to_owned()))
            .collect()
    }

    #[test]
    fn fastapi_names_drop_their_path_and_method() {
        let ops = [
            ("GET", "/api/v1/app/", "list_applications_api_v1_app__get"),
            (
                "GET",
                "/api/v1/app/{app_id}/msg/{msg_id}/",
                "get_message_api_v1_app__app_id__msg__msg_id___get",
            ),
            (
                "POST",
                "/api/v1/app/{app_id}/endpoint/{endpoint_id}/replay-missing/",
                "replay_missing_webhooks_api_v1_app__app_id__endpoint__endpoint_id__replay_missing__post",
            ),
            (
                "GET",
                "/regionDailySales",
                "get_region_daily_sales_region_daily_sales_get",
            ),
            // Stripe spells the method first: not this shape.
            ("POST", "/v1/charges", "PostCharges"),
            // The path alone is no name.
            ("GET", "/health", "health_get"),
        ];
        assert_eq!(
            names(&ops),
            [
                "list_applications",
                "get_message",
                "replay_missing_webhooks",
                "get_region_daily_sales",
                "PostCharges",
                "health_get"
            ]
        );
    }

    #[test]
    fn a_repeated_service_prefix_is_dropped() {
        let ops = [
            ("GET", "/v1/customers", "sasportal.customers.list"),
            (
                "POST",
                "/v1/installer:validate",
                "sasportal.installer.validate",
            ),
        ];
        assert_eq!(names(&ops), ["customers.list", "installer.validate"]);
        // One operation that does not share it: every name stays.
        let ops = [
            ("GET", "/v1/customers", "sasportal.customers.list"),
            ("GET", "/v1/other", "other.things.list"),
        ];
        assert_eq!(
            names(&ops),
            ["sasportal.customers.list", "other.things.list"]
        );
    }

    #[test]
    fn shortened_names_that_collide_are_not_taken() {
        let ops = [
            ("GET", "/a/", "items_a__get"),
            ("GET", "/b/", "items_b__get"),
            ("POST", "/c/", "create_c__post"),
            // Another operation's name, spelled otherwise.
            ("POST", "/d/", "createItem"),
            ("PUT", "/e/", "create_item_e__put"),
        ];
        assert_eq!(
            names(&ops),
            [
                "items_a__get",
                "items_b__get",
                "create",
                "createItem",
                "create_item_e__put"
            ]
        );
    }
}
