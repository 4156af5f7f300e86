//! The `x-idempotency` / `x-retry` vocabulary: parsing, validation and the
//! defaults `docs/vocabulary.md` documents. Every unknown field, bad value and bad
//! duration becomes an [`ExtensionError`] with a did-you-mean; nothing is
//! silently ignored.

use std::time::Duration;

use crate::source::Pos;
use crate::tree::{Key, Node, Value};

/// A value together with where the user wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub pos: Pos,
}

/// A problem in the vocabulary; reported by the `invalid-extension` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionError {
    pub pos: Pos,
    pub message: String,
    pub help: Option<String>,
}

macro_rules! keyword_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Every keyword, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The keyword as written in the vocabulary.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parse a keyword.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

keyword_enum!(
    /// What an operation does to server state.
    Effect {
        Read = "read",
        Create = "create",
        Replace = "replace",
        Delete = "delete",
        Append = "append",
        Increment = "increment",
        Decrement = "decrement",
        External = "external",
    }
);

impl Effect {
    /// Whether repeating the effect leaves the same state as doing it once.
    pub fn is_idempotent(self) -> bool {
        matches!(self, Effect::Read | Effect::Replace | Effect::Delete)
    }
}

keyword_enum!(
    /// Whether an operation takes an idempotency key.
    KeyRequirement {
        Required = "required",
        Optional = "optional",
        None = "none",
    }
);

keyword_enum!(
    /// Where the key travels.
    KeyIn {
        Header = "header",
        Body = "body",
        Query = "query",
    }
);

keyword_enum!(
    /// Whose keys share a namespace.
    Scope {
        Account = "account",
        Credential = "credential",
        Global = "global",
    }
);

keyword_enum!(
    /// What a retry of a request that failed gets.
    FailureReplay {
        Verbatim = "verbatim",
        Reattempt = "reattempt",
    }
);

keyword_enum!(
    /// What a duplicate gets while the first request is still running.
    InFlight {
        Conflict = "conflict",
        Wait = "wait",
        Accepted = "accepted",
    }
);

keyword_enum!(
    /// When a single-phase operation's key is claimed: before its handler
    /// runs, or with the handler's transaction as it commits.
    ClaimAt {
        Start = "start",
        Commit = "commit",
    }
);

keyword_enum!(
    /// How the client spaces retries.
    Backoff {
        FullJitter = "full-jitter",
        DecorrelatedJitter = "decorrelated-jitter",
    }
);

/// Root- or operation-level `x-idempotency` settings. Unset fields inherit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IdempotencyExt {
    pub header: Option<Located<String>>,
    pub key_max_length: Option<Located<u32>>,
    pub scope: Option<Located<Scope>>,
    pub replay_window: Option<Located<Duration>>,
    pub reaper_after: Option<Located<Duration>>,
    pub retry_horizon: Option<Located<Duration>>,
    pub failure_replay: Option<Located<FailureReplay>>,
    pub in_flight: Option<Located<InFlight>>,
    pub claim: Option<Located<ClaimAt>>,
    pub lock_timeout: Option<Located<Duration>>,
    pub store_wait: Option<Located<Duration>>,
    pub resume: Option<Located<Resume>>,
    pub effect: Option<Located<Effect>>,
    pub key: Option<Located<KeyRequirement>>,
    pub key_in: Option<Located<KeyIn>>,
    pub unsafe_retry: Option<Located<String>>,
    pub phases: Option<Located<Vec<String>>>,
    pub allow: Vec<Waiver>,
}

/// `allow: { rule: reason }`: a rule waived here, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiver {
    pub rule: String,
    pub reason: String,
    pub pos: Pos,
}

/// How the server resumes a phased request after a transient failure of a
/// foreign call, and when it gives up (`x-idempotency.resume`): the
/// runtime's own type, so the generator, the docs page and the server share
/// one set of defaults.
pub use idem_runtime::protocol::ResumePolicy as Resume;

/// The retry budget's token costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Budget {
    pub capacity: u32,
    pub transient_cost: u32,
    pub throttle_cost: u32,
    pub success_refund: u32,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            capacity: 500,
            transient_cost: 14,
            throttle_cost: 5,
            success_refund: 1,
        }
    }
}

/// Root- or operation-level `x-retry` settings. Unset fields inherit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RetryExt {
    pub max_attempts: Option<Located<u32>>,
    pub backoff: Option<Located<Backoff>>,
    pub base: Option<Located<Duration>>,
    pub cap: Option<Located<Duration>>,
    pub deadline: Option<Located<Duration>>,
    pub p99: Option<Located<Duration>>,
    pub budget: Option<Located<Budget>>,
}

/// Root- or operation-level `x-admission` settings: how much work the
/// generated server admits at once. The root's limit is the router's; an
/// operation's is its own route's, inside the router's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdmissionExt {
    /// Requests served at once; the next gets `503 overloaded` at once.
    pub max_in_flight: Option<Located<u32>>,
}

/// An operation's `x-pagination`: how its list pages, when the generator's
/// recognition gets it wrong or cannot tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaginationExt {
    /// `x-pagination: false`: one page, whatever it looks like.
    Off,
    /// A mapping naming the pattern and its fields.
    On {
        style: PageStyle,
        /// The body property holding a page's items; `None`: the body is
        /// the list.
        items: Option<String>,
        /// `cursor`: the body property with the next page's cursor.
        cursor: Option<String>,
        /// The query parameter the cursor, the last id or the offset goes in.
        param: Option<String>,
        /// `after-last`: the body's "more pages" flag; `page`: its page
        /// count (`total_pages`, `last_page`) or "has a next page" flag.
        more: Option<String>,
        /// `offset`: the page-size query parameter.
        limit: Option<String>,
    },
}

/// The paging patterns `x-pagination.style` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageStyle {
    /// A cursor in the body, fed to a query parameter.
    Cursor,
    /// Stripe: while `more` is true, the next page starts after the last
    /// item's `id`.
    AfterLast,
    /// RFC 8288 `Link: <…>; rel="next"`.
    Link,
    /// An offset advanced by each page's item count.
    Offset,
    /// A page number advanced by one; `more` names the body's page count
    /// or "has a next page" flag.
    Page,
}

impl PageStyle {
    const ALL: [PageStyle; 5] = [
        PageStyle::Cursor,
        PageStyle::AfterLast,
        PageStyle::Link,
        PageStyle::Offset,
        PageStyle::Page,
    ];

    fn parse(text: &str) -> Option<PageStyle> {
        PageStyle::ALL.into_iter().find(|s| s.to_string() == text)
    }
}

impl std::fmt::Display for PageStyle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PageStyle::Cursor => "cursor",
            PageStyle::AfterLast => "after-last",
            PageStyle::Link => "link",
            PageStyle::Offset => "offset",
            PageStyle::Page => "page",
        })
    }
}

const PAGINATION_FIELDS: &[&str] = &["style", "items", "cursor", "param", "more", "limit"];

/// Where a block of vocabulary may appear; some fields belong to one level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Root,
    Operation,
}

/// Fields that describe one operation and mean nothing as a document default.
/// (`key` is both: at the root it is the default for every operation that is
/// not idempotent by its effect.)
const OPERATION_ONLY: &[&str] = &["effect", "unsafe-retry", "phases"];

const IDEMPOTENCY_FIELDS: &[&str] = &[
    "header",
    "key-max-length",
    "scope",
    "replay-window",
    "reaper-after",
    "retry-horizon",
    "failure-replay",
    "in-flight",
    "claim",
    "lock-timeout",
    "store-wait",
    "resume",
    "effect",
    "key",
    "key-in",
    "unsafe-retry",
    "phases",
    "allow",
];

const RETRY_FIELDS: &[&str] = &[
    "max-attempts",
    "backoff",
    "base",
    "cap",
    "deadline",
    "p99",
    "budget",
];

const ADMISSION_FIELDS: &[&str] = &["max-in-flight"];

const RESUME_FIELDS: &[&str] = &["max-attempts", "base", "cap", "give-up-after"];

const BUDGET_FIELDS: &[&str] = &[
    "capacity",
    "transient-cost",
    "throttle-cost",
    "success-refund",
];

/// Collects errors while reading one block.
#[derive(Debug)]
pub struct Reader<'e> {
    pub errors: &'e mut Vec<ExtensionError>,
    /// Rule slugs and codes that `allow:` may name.
    pub rule_names: &'e [&'e str],
}

impl Reader<'_> {
    fn error(&mut self, pos: Pos, message: String, help: Option<String>) {
        self.errors.push(ExtensionError { pos, message, help });
    }

    fn fields<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        known: &[&str],
        level: Level,
    ) -> Vec<(&'n Key, &'n Node)> {
        let Some(entries) = node.as_map() else {
            self.error(
                node.pos,
                format!("`{what}` must be a mapping, found {}", node.kind()),
                None,
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, value) in entries {
            let name = key.name.as_str();
            if !known.contains(&name) {
                self.error(
                    key.pos,
                    format!("unknown field `{name}` in `{what}`"),
                    Some(did_you_mean(name, known).map_or_else(
                        || format!("known fields: {}", known.join(", ")),
                        |s| format!("did you mean `{s}`?"),
                    )),
                );
                continue;
            }
            if level == Level::Root && OPERATION_ONLY.contains(&name) {
                self.error(
                    key.pos,
                    format!("`{what}.{name}` does not belong at the document root"),
                    Some(format!("move `{name}` into the operation it describes")),
                );
                continue;
            }
            out.push((key, value));
        }
        out
    }

    /// Read an `x-idempotency` block.
    pub fn idempotency(&mut self, node: &Node, level: Level) -> IdempotencyExt {
        let mut ext = IdempotencyExt::default();
        for (key, value) in self.fields(node, "x-idempotency", IDEMPOTENCY_FIELDS, level) {
            let field = key.name.as_str();
            match field {
                "header" => ext.header = self.header_name(value),
                "key-max-length" => ext.key_max_length = self.count(value, field, 1, 4096),
                "scope" => ext.scope = self.keyword(value, field, Scope::parse, Scope::ALL),
                "replay-window" => ext.replay_window = self.duration(value, field),
                "reaper-after" => ext.reaper_after = self.duration(value, field),
                "retry-horizon" => ext.retry_horizon = self.duration(value, field),
                "failure-replay" => {
                    ext.failure_replay =
                        self.keyword(value, field, FailureReplay::parse, FailureReplay::ALL);
                }
                "in-flight" => {
                    ext.in_flight = self.keyword(value, field, InFlight::parse, InFlight::ALL);
                }
                "claim" => ext.claim = self.keyword(value, field, ClaimAt::parse, ClaimAt::ALL),
                "lock-timeout" => ext.lock_timeout = self.duration(value, field),
                "store-wait" => ext.store_wait = self.duration(value, field),
                "resume" => ext.resume = self.resume(value),
                "effect" => ext.effect = self.keyword(value, field, Effect::parse, Effect::ALL),
                "key" if level == Level::Root => ext.key = self.root_key(value),
                "key" => {
                    ext.key =
                        self.keyword(value, field, KeyRequirement::parse, KeyRequirement::ALL);
                }
                "key-in" => ext.key_in = self.keyword(value, field, KeyIn::parse, KeyIn::ALL),
                "unsafe-retry" => ext.unsafe_retry = self.text(value, field),
                "phases" => ext.phases = self.phases(value),
                "allow" => ext.allow = self.allow(value),
                _ => {}
            }
        }
        ext
    }

    /// Read an `x-retry` block.
    pub fn retry(&mut self, node: &Node, level: Level) -> RetryExt {
        let mut ext = RetryExt::default();
        for (key, value) in self.fields(node, "x-retry", RETRY_FIELDS, level) {
            let field = key.name.as_str();
            match field {
                "max-attempts" => ext.max_attempts = self.count(value, field, 1, 20),
                "backoff" => ext.backoff = self.backoff(value),
                "base" => ext.base = self.duration(value, field),
                "cap" => ext.cap = self.duration(value, field),
                "deadline" => ext.deadline = self.duration(value, field),
                "p99" => ext.p99 = self.duration(value, field),
                "budget" => ext.budget = self.budget(value),
                _ => {}
            }
        }
        ext
    }

    /// Read an operation's `x-pagination`: `false`, or a mapping with a
    /// `style` and the fields that style needs.
    pub fn pagination(&mut self, node: &Node) -> Option<Located<PaginationExt>> {
        if node.as_bool() == Some(false) {
            return Some(Located {
                value: PaginationExt::Off,
                pos: node.pos,
            });
        }
        if node.as_map().is_none() {
            self.error(
                node.pos,
                format!(
                    "`x-pagination` must be `false` or a mapping, found {}",
                    node.kind()
                ),
                Some("e.g. `x-pagination: { style: cursor, items: data, cursor: next_cursor, param: cursor }`".into()),
            );
            return None;
        }
        let (mut style, mut items, mut cursor, mut param, mut more, mut limit) =
            (None, None, None, None, None, None);
        for (key, value) in self.fields(node, "x-pagination", PAGINATION_FIELDS, Level::Operation) {
            let field = key.name.as_str();
            let text = || self_text(value);
            match field {
                "style" => style = self.keyword(value, field, PageStyle::parse, &PageStyle::ALL),
                "items" => items = text(),
                "cursor" => cursor = text(),
                "param" => param = text(),
                "more" => more = text(),
                "limit" => limit = text(),
                _ => {}
            }
        }
        let Some(style) = style else {
            self.error(
                node.pos,
                "`x-pagination` names no `style`".into(),
                Some("one of cursor, after-last, link, offset, page".into()),
            );
            return None;
        };
        let needs: &[(&str, bool)] = match style.value {
            PageStyle::Cursor => &[("cursor", cursor.is_some()), ("param", param.is_some())],
            PageStyle::AfterLast => &[("param", param.is_some())],
            PageStyle::Offset | PageStyle::Page => &[("param", param.is_some())],
            PageStyle::Link => &[],
        };
        for (field, given) in needs {
            if !given {
                self.error(
                    node.pos,
                    format!(
                        "`x-pagination` with `style: {}` needs `{field}`",
                        style.value
                    ),
                    None,
                );
                return None;
            }
        }
        Some(Located {
            value: PaginationExt::On {
                style: style.value,
                items,
                cursor,
                param,
                more,
                limit,
            },
            pos: node.pos,
        })
    }

    /// Read an `x-admission` block.
    pub fn admission(&mut self, node: &Node, level: Level) -> AdmissionExt {
        let mut ext = AdmissionExt::default();
        for (key, value) in self.fields(node, "x-admission", ADMISSION_FIELDS, level) {
            let field = key.name.as_str();
            if field == "max-in-flight" {
                ext.max_in_flight = self.count(value, field, 1, 1_000_000);
            }
        }
        ext
    }

    /// The root's `key:`: `required` or `optional`; `none` is what every
    /// operation gets without one, so writing it at the root says nothing.
    fn root_key(&mut self, node: &Node) -> Option<Located<KeyRequirement>> {
        const ROOT_KEYS: &[KeyRequirement] = &[KeyRequirement::Required, KeyRequirement::Optional];
        if node.as_str() == Some("none") {
            self.error(
                node.pos,
                "`x-idempotency.key: none` at the document root changes nothing".into(),
                Some(
                    "remove it; to keep an operation from taking a key it shows, set `key: none` on that operation"
                        .into(),
                ),
            );
            return None;
        }
        self.keyword(node, "key", KeyRequirement::parse, ROOT_KEYS)
    }

    fn backoff(&mut self, node: &Node) -> Option<Located<Backoff>> {
        let text = node.scalar_text().unwrap_or_default();
        if matches!(
            text.as_str(),
            "exponential" | "constant" | "equal-jitter" | "none"
        ) {
            self.error(
                node.pos,
                format!("`x-retry.backoff: {text}` is not offered"),
                Some(
                    "use `full-jitter` (the default) or `decorrelated-jitter`: without jitter, retries \
                     from many clients stay in lockstep and hit the server together"
                        .into(),
                ),
            );
            return None;
        }
        self.keyword(node, "backoff", Backoff::parse, Backoff::ALL)
    }

    fn resume(&mut self, node: &Node) -> Option<Located<Resume>> {
        let mut resume = Resume::default();
        let before = self.errors.len();
        for (key, value) in self.fields(node, "x-idempotency.resume", RESUME_FIELDS, Level::Root) {
            let field = key.name.as_str();
            match field {
                "max-attempts" => {
                    if let Some(n) = self.count(value, field, 1, 1000) {
                        resume.max_attempts = n.value;
                    }
                }
                "base" | "cap" | "give-up-after" => {
                    let Some(d) = self.duration(value, field) else {
                        continue;
                    };
                    match field {
                        "base" => resume.base = d.value,
                        "cap" => resume.cap = d.value,
                        _ => resume.give_up_after = d.value,
                    }
                }
                _ => {}
            }
        }
        if self.errors.len() == before && resume.cap < resume.base {
            self.error(
                node.pos,
                format!(
                    "`x-idempotency.resume.cap` ({}) is shorter than its `base` ({})",
                    format_duration(resume.cap),
                    format_duration(resume.base)
                ),
                Some("the cap bounds the doubled waits, so it must be at least the base".into()),
            );
        }
        (self.errors.len() == before).then_some(Located {
            value: resume,
            pos: node.pos,
        })
    }

    fn budget(&mut self, node: &Node) -> Option<Located<Budget>> {
        let mut budget = Budget::default();
        let before = self.errors.len();
        for (key, value) in self.fields(node, "x-retry.budget", BUDGET_FIELDS, Level::Root) {
            let field = key.name.as_str();
            let Some(n) = self.count(value, field, 0, 1_000_000) else {
                continue;
            };
            match field {
                "capacity" => budget.capacity = n.value,
                "transient-cost" => budget.transient_cost = n.value,
                "throttle-cost" => budget.throttle_cost = n.value,
                "success-refund" => budget.success_refund = n.value,
                _ => {}
            }
        }
        (self.errors.len() == before).then_some(Located {
            value: budget,
            pos: node.pos,
        })
    }

    fn header_name(&mut self, node: &Node) -> Option<Located<String>> {
        let name = self.text(node, "header")?;
        let valid = !name.value.is_empty()
            && name
                .value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !valid {
            self.error(
                node.pos,
                format!("`header: {}` is not a valid HTTP header name", name.value),
                Some("header names are letters, digits and `-`, e.g. `Idempotency-Key`".into()),
            );
            return None;
        }
        Some(name)
    }

    fn text(&mut self, node: &Node, field: &str) -> Option<Located<String>> {
        match node.as_str() {
            Some(s) if !s.trim().is_empty() => Some(Located {
                value: s.to_owned(),
                pos: node.pos,
            }),
            Some(_) => {
                self.error(node.pos, format!("`{field}` is empty"), None);
                None
            }
            None => {
                self.error(
                    node.pos,
                    format!("`{field}` must be a string, found {}", node.kind()),
                    None,
                );
                None
            }
        }
    }

    fn count(&mut self, node: &Node, field: &str, min: u32, max: u32) -> Option<Located<u32>> {
        let parsed = match &node.value {
            Value::Number(n) => n.parse::<u32>().ok(),
            _ => None,
        };
        match parsed {
            Some(n) if (min..=max).contains(&n) => Some(Located {
                value: n,
                pos: node.pos,
            }),
            _ => {
                self.error(
                    node.pos,
                    format!(
                        "`{field}` must be a whole number from {min} to {max}, found `{}`",
                        node.scalar_text().unwrap_or_else(|| node.kind().to_owned())
                    ),
                    None,
                );
                None
            }
        }
    }

    fn duration(&mut self, node: &Node, field: &str) -> Option<Located<Duration>> {
        let text = node.scalar_text().unwrap_or_default();
        match parse_duration(&text) {
            Some(value) if node.as_str().is_some() => Some(Located {
                value,
                pos: node.pos,
            }),
            _ => {
                let help = if matches!(node.value, Value::Number(_)) {
                    format!(
                        "add a unit, e.g. `{text}s`; durations are strings such as 500ms, 30s, 15m, 24h, 7d"
                    )
                } else {
                    "durations are a whole number and a unit: 500ms, 30s, 15m, 24h, 7d".to_owned()
                };
                self.error(
                    node.pos,
                    format!("`{field}` is not a duration: `{text}`"),
                    Some(help),
                );
                None
            }
        }
    }

    fn keyword<T: Copy + std::fmt::Display>(
        &mut self,
        node: &Node,
        field: &str,
        parse: fn(&str) -> Option<T>,
        all: &[T],
    ) -> Option<Located<T>> {
        let text = node.scalar_text().unwrap_or_default();
        if let Some(value) = node.as_str().and_then(parse) {
            return Some(Located {
                value,
                pos: node.pos,
            });
        }
        let names: Vec<String> = all.iter().map(ToString::to_string).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        self.error(
            node.pos,
            format!("`{field}: {text}` is not one of {}", refs.join(", ")),
            did_you_mean(&text, &refs).map(|s| format!("did you mean `{s}`?")),
        );
        None
    }

    fn phases(&mut self, node: &Node) -> Option<Located<Vec<String>>> {
        let Some(items) = node.as_seq() else {
            self.error(
                node.pos,
                format!(
                    "`phases` must be a list of phase names, found {}",
                    node.kind()
                ),
                Some("e.g. `phases: [charge_card, send_receipt]`".into()),
            );
            return None;
        };
        let mut names: Vec<String> = Vec::new();
        for item in items {
            match item.as_str() {
                Some(name) if is_identifier(name) => {
                    if names.iter().any(|n| n == name) {
                        self.error(item.pos, format!("phase `{name}` is listed twice"), None);
                    } else {
                        names.push(name.to_owned());
                    }
                }
                _ => self.error(
                    item.pos,
                    format!(
                        "phase names are identifiers such as `charge_card`, found `{}`",
                        item.scalar_text().unwrap_or_else(|| item.kind().to_owned())
                    ),
                    None,
                ),
            }
        }
        if names.is_empty() {
            self.error(
                node.pos,
                "`phases` is empty".into(),
                Some("remove it, or name the foreign calls in order".into()),
            );
            return None;
        }
        Some(Located {
            value: names,
            pos: node.pos,
        })
    }

    fn allow(&mut self, node: &Node) -> Vec<Waiver> {
        let Some(entries) = node.as_map() else {
            self.error(
                node.pos,
                format!(
                    "`allow` must map rule names to reasons, found {}",
                    node.kind()
                ),
                Some(
                    "e.g. `allow: { missing-retry-after: \"the gateway sets Retry-After\" }`"
                        .into(),
                ),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, value) in entries {
            if matches!(key.name.as_str(), "invalid-extension" | "IDEM007") {
                self.error(
                    key.pos,
                    "`invalid-extension` cannot be waived".into(),
                    Some(
                        "fix the extension instead: a typo here silently changes the contract"
                            .into(),
                    ),
                );
                continue;
            }
            if !self.rule_names.contains(&key.name.as_str()) {
                self.error(
                    key.pos,
                    format!("`allow` names an unknown rule `{}`", key.name),
                    did_you_mean(&key.name, self.rule_names)
                        .map(|s| format!("did you mean `{s}`?"))
                        .or_else(|| Some("`idem rules` lists the rules".into())),
                );
                continue;
            }
            match value.as_str() {
                Some(reason) if !reason.trim().is_empty() => out.push(Waiver {
                    rule: key.name.clone(),
                    reason: reason.to_owned(),
                    pos: key.pos,
                }),
                _ => self.error(
                    value.pos,
                    format!("waiving `{}` needs a reason", key.name),
                    Some(format!(
                        "write why the rule does not apply: `{}: \"…\"`",
                        key.name
                    )),
                ),
            }
        }
        out
    }
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Parse `500ms`, `30s`, `15m`, `24h`, `7d`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let millis = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => None,
    }?;
    Some(Duration::from_millis(millis))
}

/// Render a duration the way the vocabulary writes them.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000u128),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// The closest candidate to `word`, if one is close enough to be a typo.
pub fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(word, c), *c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// A field's text, when it is a non-empty string.
fn self_text(node: &Node) -> Option<String> {
    node.as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("7d"), Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_duration("30"), None);
        assert_eq!(parse_duration("1.5h"), None);
        assert_eq!(parse_duration("h"), None);
        assert_eq!(parse_duration("3w"), None);
        assert_eq!(format_duration(Duration::from_secs(86_400)), "1d");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn suggestions() {
        assert_eq!(
            did_you_mean("replay-windw", IDEMPOTENCY_FIELDS),
            Some("replay-window")
        );
        assert_eq!(did_you_mean("apend", &["append", "create"]), Some("append"));
        assert_eq!(did_you_mean("zzz", &["append", "create"]), None);
    }
}
