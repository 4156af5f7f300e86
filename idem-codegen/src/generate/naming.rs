//! Names: spec spellings turned into Rust identifiers, deterministically.
//!
//! One place decides every identifier the generators emit. A name is
//! *sanitized* (split into ASCII words; a non-ASCII letter becomes a
//! `uXXXX` word, so identifiers stay ASCII and no confusable-character lint
//! can fire), *re-cased* with `heck`, guarded against keywords and leading
//! digits, and made *unique* within its scope by a [`Namer`], which appends
//! `2`, `3`, … in the order names are asked for. The spec's own spelling is
//! kept beside it for `#[serde(rename)]`.

use std::collections::HashSet;

use heck::{ToShoutySnakeCase, ToSnakeCase, ToUpperCamelCase};

/// Strict and reserved keywords of Rust 2024.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut",
    "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try",
];

/// Keywords that cannot be raw identifiers.
const NOT_RAW: &[&str] = &["crate", "self", "Self", "super", "_"];

/// The words of `raw`: ASCII letters and digits; everything else separates
/// words, except non-ASCII letters, which become `uXXXX` words.
pub fn words(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if c.is_alphanumeric() {
            out.push_str(&format!("_u{:04x}_", u32::from(c)));
        } else {
            out.push('_');
        }
    }
    out
}

/// `snake_case`, for fields, methods and modules. Empty input gives `fallback`.
pub fn snake(raw: &str, fallback: &str) -> String {
    cased(raw, fallback, |w| w.to_snake_case(), "_")
}

/// `UpperCamelCase`, for types and variants. Empty input gives `fallback`.
pub fn camel(raw: &str, fallback: &str) -> String {
    cased(raw, fallback, |w| w.to_upper_camel_case(), "V")
}

/// `SHOUTY_SNAKE_CASE`, for constants.
pub fn shouty(raw: &str, fallback: &str) -> String {
    cased(raw, fallback, |w| w.to_shouty_snake_case(), "_")
}

fn cased(raw: &str, fallback: &str, case: fn(&str) -> String, digit_prefix: &str) -> String {
    let name = case(&words(raw));
    guard(
        if name.is_empty() {
            fallback.to_owned()
        } else {
            name
        },
        digit_prefix,
    )
}

/// A leading digit gets `prefix`; a keyword becomes a raw identifier, or
/// gets a trailing `_` where a raw identifier is not allowed.
fn guard(name: String, digit_prefix: &str) -> String {
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        return format!("{digit_prefix}{name}");
    }
    if NOT_RAW.contains(&name.as_str()) {
        return format!("{name}_");
    }
    if KEYWORDS.contains(&name.as_str()) {
        return format!("r#{name}");
    }
    name
}

/// `{prefix}_{name}` for a helper named after a method (`decode_…`,
/// `read_…`): the method's raw-identifier marker and the underscore a
/// leading digit earned are dropped, so `_123_start` gives
/// `decode_123_start`, never a doubled underscore that `non_snake_case`
/// rejects.
pub fn prefixed(prefix: &str, name: &str) -> proc_macro2::Ident {
    let bare = name.trim_start_matches("r#").trim_start_matches('_');
    proc_macro2::Ident::new(&format!("{prefix}_{bare}"), proc_macro2::Span::call_site())
}

/// Hands out unique names within one scope (a module, a struct's fields,
/// an enum's variants).
#[derive(Debug, Default, Clone)]
pub struct Namer {
    used: HashSet<String>,
}

impl Namer {
    /// A namer that will never hand out any of `reserved`.
    pub fn reserving(reserved: &[&str]) -> Self {
        Namer {
            used: reserved.iter().map(|r| unraw(r).to_owned()).collect(),
        }
    }

    /// Whether `name` is still free.
    pub fn is_free(&self, name: &str) -> bool {
        !self.used.contains(unraw(name))
    }

    /// `base`, or `base2`, `base3`, … if taken. Raw identifiers compare by
    /// their text, so `r#type` and `type_` never collide silently.
    pub fn unique(&mut self, base: &str) -> String {
        if self.used.insert(unraw(base).to_owned()) {
            return base.to_owned();
        }
        let stem = unraw(base);
        (2u32..)
            .map(|n| format!("{stem}{n}"))
            .find(|candidate| self.used.insert(candidate.clone()))
            .unwrap_or_else(|| stem.to_owned())
    }
}

fn unraw(name: &str) -> &str {
    name.strip_prefix("r#").unwrap_or(name)
}

/// `true` if `name` parses as one Rust identifier.
pub fn is_ident(name: &str) -> bool {
    syn::parse_str::<syn::Ident>(name).is_ok()
        || name
            .strip_prefix("r#")
            .is_some_and(|n| syn::parse_str::<syn::Ident>(n).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_spec_spellings() {
        let cases: &[(&str, &str, &str)] = &[
            // raw, snake, camel
            ("get-user", "get_user", "GetUser"),
            ("get_user", "get_user", "GetUser"),
            ("getUser", "get_user", "GetUser"),
            ("GetUser", "get_user", "GetUser"),
            ("user.id", "user_id", "UserId"),
            ("HTTPServer", "http_server", "HttpServer"),
            ("type", "r#type", "Type"),
            ("match", "r#match", "Match"),
            ("fn", "r#fn", "Fn"),
            ("self", "self_", "Self_"),
            ("Self", "self_", "Self_"),
            ("crate", "crate_", "Crate"),
            ("super", "super_", "Super"),
            ("2fa", "_2fa", "V2fa"),
            ("3d_secure", "_3d_secure", "V3dSecure"),
            ("", "value", "Empty"),
            ("-", "value", "Empty"),
            ("café", "caf_u00e9", "CafU00e9"),
            ("名前", "u540d_u524d", "U540dU524d"),
            ("a b", "a_b", "AB"),
            ("$ref", "r#ref", "Ref"),
            ("+1", "_1", "V1"),
            ("x-rate-limit", "x_rate_limit", "XRateLimit"),
            ("async", "r#async", "Async"),
            ("gen", "r#gen", "Gen"),
        ];
        for (raw, snake_expected, camel_expected) in cases {
            assert_eq!(snake(raw, "value"), *snake_expected, "snake({raw:?})");
            assert_eq!(camel(raw, "Empty"), *camel_expected, "camel({raw:?})");
            assert!(is_ident(&snake(raw, "value")), "{raw:?}");
            assert!(is_ident(&camel(raw, "Empty")), "{raw:?}");
        }
        assert_eq!(shouty("listCharges", "OP"), "LIST_CHARGES");
    }

    #[test]
    fn collisions_get_stable_suffixes() {
        let mut namer = Namer::reserving(&["Client"]);
        assert_eq!(namer.unique(&camel("client", "T")), "Client2");
        assert_eq!(namer.unique(&snake("get-user", "f")), "get_user");
        assert_eq!(namer.unique(&snake("get_user", "f")), "get_user2");
        assert_eq!(namer.unique(&snake("getUser", "f")), "get_user3");
        assert_eq!(namer.unique("r#type"), "r#type");
        assert_eq!(namer.unique("r#type"), "type2");
        let mut again = Namer::reserving(&["Client"]);
        assert_eq!(again.unique("Client"), "Client2");
    }
}
