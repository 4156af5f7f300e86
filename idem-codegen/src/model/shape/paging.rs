//! Which list operations page, and how, read from the spec with no
//! annotation; `x-pagination` overrides it.
//!
//! A `GET` with one JSON success answer whose items are a list is paged
//! when one of these holds, first match wins:
//! - dropshot's `x-dropshot-pagination`: `next_page` in the body, fed to
//!   `page_token`;
//! - Stripe's list object: a boolean `has_more`, a `starting_after` (or,
//!   as OpenAI names it, `after`) parameter, and items with an `id`;
//! - a cursor in the body (`next_page`, `next_cursor`, `next_page_token`,
//!   `nextPageToken`, `next_token`, `cursor`; a string) and the query
//!   parameter it feeds (`cursor`, `page_token`, `pageToken`, `next_token`,
//!   `after`, `page`), as Stripe's search lists do;
//! - a `page` query parameter and, in the body, where the pages end: a
//!   page count (`total_pages`, `totalPages`, `last_page`, `lastPage`) or a
//!   boolean `has_next` (`hasNext`);
//! - a documented `Link` response header (RFC 8288), followed as given;
//! - `offset` and `limit` query parameters.

use crate::model::schema::{Kind, Schema};
use crate::model::{Model, Operation};
use crate::vocab::{PageStyle, PaginationExt};

/// A recognised paged list.
#[derive(Debug, Clone)]
pub struct Paging {
    /// A JSON pointer to the items (`/data`); empty: the body is the list.
    pub items: String,
    pub next: Next,
    /// The items' schema.
    pub item: Schema,
}

/// How the next page is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    AfterLast {
        more: String,
        id: String,
        param: String,
    },
    Cursor {
        pointer: String,
        param: String,
    },
    Link,
    Offset {
        param: String,
        limit: Option<String>,
    },
    Page {
        param: String,
        /// The first page's number: 0 where the parameter's `minimum` or
        /// `default` says so, else 1.
        first: u64,
        /// A pointer to the body's page count or "has a next page" flag.
        last: Option<String>,
    },
}

impl Paging {
    /// How it pages, in words, for doc comments and the docs page.
    pub fn describe(&self) -> String {
        match &self.next {
            Next::AfterLast { more, param, id } => format!(
                "while `{}` is true, the next page starts after the last item's `{id}` (`{param}`)",
                more.trim_start_matches('/')
            ),
            Next::Cursor { pointer, param } => format!(
                "the body's `{}` is sent as `{param}` for the next page",
                pointer.trim_start_matches('/')
            ),
            Next::Link => "the `Link` header's `rel=\"next\"` URL is followed".to_owned(),
            Next::Offset { param, .. } => {
                format!("`{param}` advances by each page's item count")
            }
            Next::Page { param, first, last } => {
                let end = match last {
                    Some(last) => format!(
                        ", until `{}` says it was the last",
                        last.trim_start_matches('/')
                    ),
                    None => ", until a page comes back empty".to_owned(),
                };
                format!("`{param}` counts pages from {first}, one more each time{end}")
            }
        }
    }
}

/// Why a list that looks paged is not: for reports.
pub type NotPaged = String;

/// The operation's paging, `Ok(None)` when it is not a list that pages.
pub fn recognise(model: &Model, op: &Operation) -> Result<Option<Paging>, NotPaged> {
    let over = op.pagination.as_ref().map(|p| &p.value);
    if over == Some(&PaginationExt::Off) || op.method.as_str() != "GET" {
        return Ok(None);
    }
    let successes: Vec<_> = op
        .responses
        .iter()
        .filter(|r| r.status.starts_with('2'))
        .collect();
    let [success] = successes.as_slice() else {
        return Ok(None);
    };
    let Some(schema) = success
        .media
        .iter()
        .find(|m| m.media_type.contains("json"))
        .and_then(|m| m.schema.as_ref())
    else {
        return Ok(None);
    };
    let body = model.schemas.resolve(schema);
    let query: Vec<&str> = op
        .parameters
        .iter()
        .filter(|p| p.location == "query")
        .map(|p| p.name.as_str())
        .collect();
    let has = |name: &str| query.contains(&name);
    let prop = |name: &str| property(model, body, name);

    if let Some(on @ PaginationExt::On { .. }) = over {
        return declared(model, op, body, on);
    }

    // The items: the body itself, or its one list property (by name first).
    let (items, item) = match &body.kind {
        Kind::Array(item) => (String::new(), (**item).clone()),
        Kind::Object(o) => {
            let lists: Vec<_> = o
                .properties
                .iter()
                .filter_map(|p| match &model.schemas.resolve(&p.schema).kind {
                    Kind::Array(item) => Some((p.name.as_str(), item)),
                    _ => None,
                })
                .collect();
            const NAMES: &[&str] = &["data", "items", "results", "entries", "values", "records"];
            let named = NAMES
                .iter()
                .find_map(|n| lists.iter().find(|(name, _)| name == n));
            let found = match (named, lists.as_slice()) {
                (Some(found), _) | (None, [found]) => found,
                _ => return Ok(None),
            };
            (format!("/{}", found.0), (**found.1).clone())
        }
        _ => return Ok(None),
    };
    let paging = |next| {
        Ok(Some(Paging {
            items: items.clone(),
            next,
            item: item.clone(),
        }))
    };
    let string = |s: &Schema| matches!(s.kind, Kind::String(_));

    if op.dropshot_paged && prop("next_page").is_some_and(string) && has("page_token") {
        return paging(Next::Cursor {
            pointer: "/next_page".into(),
            param: "page_token".into(),
        });
    }
    let after = ["starting_after", "after"].into_iter().find(|p| has(p));
    if let Some(param) = after
        && prop("has_more").is_some_and(|s| matches!(s.kind, Kind::Boolean))
    {
        if has_id(model, &item, 0) {
            return paging(Next::AfterLast {
                more: "/has_more".into(),
                id: "id".into(),
                param: param.into(),
            });
        }
        return Err(format!(
            "`has_more` and `{param}`, but the items have no `id`"
        ));
    }
    const CURSORS: &[&str] = &[
        "next_page",
        "next_cursor",
        "nextCursor",
        "next_page_token",
        "nextPageToken",
        "next_token",
        "nextToken",
        "cursor",
    ];
    const PARAMS: &[&str] = &[
        "cursor",
        "page_token",
        "pageToken",
        "next_token",
        "nextToken",
        "after",
        "page",
    ];
    if let Some(field) = CURSORS.iter().find(|f| prop(f).is_some_and(string)) {
        return match PARAMS.iter().find(|p| has(p)) {
            Some(param) => paging(Next::Cursor {
                pointer: format!("/{field}"),
                param: (*param).into(),
            }),
            None => Err(format!(
                "the body has `{field}` but no query parameter takes it back"
            )),
        };
    }
    if let Some(next) = page_numbers(op, body, model) {
        return paging(next);
    }
    let link = success
        .header_specs
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("link"));
    if link {
        return paging(Next::Link);
    }
    if has("offset") && has("limit") {
        return paging(Next::Offset {
            param: "offset".into(),
            limit: Some("limit".into()),
        });
    }
    if prop("has_more").is_some() {
        return Err("`has_more` without a `starting_after` parameter".into());
    }
    Ok(None)
}

/// Where a page-numbered list says it ends: the body property, and whether
/// it is a "has a next page" flag (else a page count).
const PAGE_ENDS: &[(&str, bool)] = &[
    ("total_pages", false),
    ("totalPages", false),
    ("last_page", false),
    ("lastPage", false),
    ("has_next", true),
    ("hasNext", true),
];

/// A `page` query parameter and, in the body, where the pages end.
fn page_numbers(op: &Operation, body: &Schema, model: &Model) -> Option<Next> {
    op.parameters
        .iter()
        .any(|p| p.location == "query" && p.name == "page")
        .then_some(())?;
    let (name, _) = PAGE_ENDS.iter().find(|(name, flag)| {
        property(model, body, name).is_some_and(|s| match s.kind {
            Kind::Boolean => *flag,
            Kind::Integer(_) => !*flag,
            _ => false,
        })
    })?;
    Some(Next::Page {
        param: "page".into(),
        first: first_page(op, "page"),
        last: Some(format!("/{name}")),
    })
}

/// The number of the first page: 0 where the query parameter `param`
/// has `minimum: 0` or `default: 0`, else 1.
fn first_page(op: &Operation, param: &str) -> u64 {
    let Some(schema) = op
        .parameters
        .iter()
        .find(|p| p.location == "query" && p.name == param)
        .and_then(|p| p.schema.as_ref())
    else {
        return 1;
    };
    let minimum = schema
        .constraints
        .as_ref()
        .and_then(|c| c.minimum)
        .map(|b| b.value);
    let default = schema.default.as_ref().and_then(serde_json::Value::as_f64);
    if minimum == Some(0.0) || default == Some(0.0) {
        0
    } else {
        1
    }
}

/// The paging `x-pagination` declares, checked against the body it names.
fn declared(
    model: &Model,
    op: &Operation,
    body: &Schema,
    on: &PaginationExt,
) -> Result<Option<Paging>, NotPaged> {
    let PaginationExt::On {
        style,
        items,
        cursor,
        param,
        more,
        limit,
    } = on
    else {
        return Ok(None);
    };
    let prop = |name: &str| property(model, body, name);
    let (pointer, item) = match items {
        Some(name) => match prop(name).map(|s| &s.kind) {
            Some(Kind::Array(item)) => (format!("/{name}"), (**item).clone()),
            _ => {
                return Err(format!(
                    "`x-pagination.items: {name}` is not a list in the body"
                ));
            }
        },
        None => match &body.kind {
            Kind::Array(item) => (String::new(), (**item).clone()),
            _ => {
                return Err("`x-pagination` names no `items` and the body is not a list".into());
            }
        },
    };
    let param = param.clone().unwrap_or_default();
    let next = match style {
        PageStyle::Cursor => Next::Cursor {
            pointer: format!("/{}", cursor.clone().unwrap_or_default()),
            param,
        },
        PageStyle::AfterLast => Next::AfterLast {
            more: format!("/{}", more.clone().unwrap_or_else(|| "has_more".into())),
            id: "id".into(),
            param,
        },
        PageStyle::Link => Next::Link,
        PageStyle::Offset => Next::Offset {
            param,
            limit: limit.clone(),
        },
        PageStyle::Page => Next::Page {
            first: first_page(op, &param),
            param,
            last: more.clone().map(|m| format!("/{m}")),
        },
    };
    Ok(Some(Paging {
        items: pointer,
        next,
        item,
    }))
}

/// The body's property `name`, resolved, when the body is an object that
/// has it.
fn property<'m>(model: &'m Model, body: &'m Schema, name: &str) -> Option<&'m Schema> {
    match &body.kind {
        Kind::Object(o) => o
            .properties
            .iter()
            .find(|p| p.name == name)
            .map(|p| model.schemas.resolve(&p.schema)),
        _ => None,
    }
}

/// Whether every item has an `id` property: an object with one, or a
/// `oneOf` whose every variant does (Stripe's cards and bank accounts).
fn has_id(model: &Model, schema: &Schema, depth: usize) -> bool {
    if depth > 8 {
        return false;
    }
    match &model.schemas.resolve(schema).kind {
        Kind::Object(o) => o.properties.iter().any(|p| p.name == "id"),
        Kind::OneOf { variants, .. } | Kind::AllOf(variants) => {
            !variants.is_empty() && variants.iter().all(|v| has_id(model, v, depth + 1))
        }
        _ => false,
    }
}
