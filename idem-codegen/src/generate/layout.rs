//! The generated code's modules, and the imports that let each use short
//! names.
//!
//! The emitters write every path in full (`::std::result::Result`,
//! `::idem_runtime::rt::client::ApiClient`), so that what they emit means
//! the same wherever it lands. Here, once each module's code is formatted,
//! each path is shortened to the name a person would write (`Result`,
//! `ApiClient`) and imported once at the top of the module, unless that
//! name is taken: by an item the code defines anywhere (a schema named
//! `Result` or `Request`), or by another path already shortened to it. A
//! taken name stays written in full, so the code means what it meant.
//!
//! Only code is touched: string literals, comments and `use` lines are
//! left as they are, and so is the inside of a nested module (`prelude`),
//! which does not see its parent's imports.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::GenerateError;
use super::types::MACROS;

/// One module of the generated code.
pub(crate) struct Module {
    /// `types`, `client` or `server`.
    pub(crate) name: &'static str,
    /// Its doc comment, one line.
    pub(crate) doc: &'static str,
    /// Its code, formatted, with paths in full.
    pub(crate) code: String,
}

/// The names std's prelude brings into every module, each with the one
/// path it stands for.
const PRELUDE: &[(&str, &str)] = &[
    ("Result", "std::result::Result"),
    ("Ok", "std::result::Result::Ok"),
    ("Err", "std::result::Result::Err"),
    ("Option", "std::option::Option"),
    ("Some", "std::option::Option::Some"),
    ("None", "std::option::Option::None"),
    ("String", "std::string::String"),
    ("ToString", "std::string::ToString"),
    ("Vec", "std::vec::Vec"),
    ("Box", "std::boxed::Box"),
    ("Send", "std::marker::Send"),
    ("Sync", "std::marker::Sync"),
    ("Sized", "std::marker::Sized"),
    ("Default", "std::default::Default"),
    ("From", "std::convert::From"),
    ("Into", "std::convert::Into"),
    ("Clone", "std::clone::Clone"),
    ("Iterator", "std::iter::Iterator"),
    ("IntoIterator", "std::iter::IntoIterator"),
    ("PartialEq", "std::cmp::PartialEq"),
    ("AsRef", "std::convert::AsRef"),
    ("AsMut", "std::convert::AsMut"),
    ("TryFrom", "std::convert::TryFrom"),
    ("TryInto", "std::convert::TryInto"),
    ("Fn", "std::ops::Fn"),
    ("FnMut", "std::ops::FnMut"),
    ("FnOnce", "std::ops::FnOnce"),
    ("Drop", "std::ops::Drop"),
    ("Copy", "std::marker::Copy"),
    ("Unpin", "std::marker::Unpin"),
    ("Eq", "std::cmp::Eq"),
    ("Ord", "std::cmp::Ord"),
    ("PartialOrd", "std::cmp::PartialOrd"),
    ("ToOwned", "std::borrow::ToOwned"),
    ("FromIterator", "std::iter::FromIterator"),
    ("Extend", "std::iter::Extend"),
];

/// The crates whose paths are shortened.
const ROOTS: &[&str] = &["std", "core", "idem_runtime"];

/// `modules` laid out as a module body: each module's items re-exported at
/// the root (`pub use types::*;`), then the modules, each with its imports
/// and its code indented. A module that uses the types imports them all.
///
/// Each module's code is shortened, formatted again (a shorter path fits
/// on the line it broke), then handed to `finish` (the runtime's macros
/// wrapped, blank lines between items).
///
/// `gated`: items sit behind the features of resource groups, so an import
/// may serve only groups that are off.
pub(crate) fn layout(
    modules: Vec<Module>,
    gated: bool,
    finish: impl Fn(String) -> String,
) -> Result<String, GenerateError> {
    let mut defined = HashSet::new();
    for module in &modules {
        definitions(&module.code, &mut defined);
    }
    let mut type_names = HashSet::new();
    if let Some(types) = modules.iter().find(|m| m.name == "types") {
        definitions(&types.code, &mut type_names);
    }
    let modules: Vec<Module> = modules
        .into_iter()
        .filter(|m| !m.code.trim().is_empty())
        .collect();
    let mut out = String::new();
    for module in &modules {
        if gated {
            out.push_str("#[allow(unused_imports, reason = \"every group may be off\")]\n");
        }
        out.push_str(&format!("pub use {}::*;\n", module.name));
    }
    for module in modules {
        let (mut imports, code) = shorten(&module.code, &defined);
        drop(module.code);
        for (marker, name) in MACROS {
            if code.contains(&format!("#[{marker}]")) {
                imports.insert(format!("idem_runtime::rt::{name}"));
            }
        }
        let code = finish(reformat(&code)?);
        out.push_str(&format!(
            "\n/// {}\npub mod {} {{\n",
            module.doc, module.name
        ));
        if gated && !imports.is_empty() {
            out.push_str(
                "    #![allow(unused_imports, reason = \"each import serves the resource groups that use it, which may be off\")]\n\n",
            );
        }
        let mut groups = use_lines(&imports);
        if module.name != "types" && names_any(&code, &type_names) {
            groups.push(vec!["use super::types::*;".to_owned()]);
        }
        for group in &groups {
            for line in group {
                for part in line.lines() {
                    out.push_str("    ");
                    out.push_str(part);
                    out.push('\n');
                }
            }
            out.push('\n');
        }
        for line in code.lines() {
            // `use …::Trait as _;` inside a function, for a trait the module
            // now imports.
            if let Some(path) = line
                .trim()
                .strip_prefix("use ::")
                .and_then(|rest| rest.strip_suffix(" as _;"))
                && imports.contains(path)
            {
                continue;
            }
            if !line.is_empty() {
                out.push_str("    ");
                out.push_str(line);
            }
            out.push('\n');
        }
        out.push_str("}\n");
    }
    Ok(out)
}

/// `code` formatted again, a few top-level items at a time: an item ends
/// at a line of code that is `}`, or ends with `;`, at the first column.
fn reformat(code: &str) -> Result<String, GenerateError> {
    let mut out = String::with_capacity(code.len());
    let mut chunk = String::new();
    let flush = |chunk: &mut String, out: &mut String| -> Result<(), GenerateError> {
        if chunk.trim().is_empty() {
            chunk.clear();
            return Ok(());
        }
        let file = syn::parse_file(chunk).map_err(|e| GenerateError::Unparsable(e.to_string()))?;
        out.push_str(&prettyplease::unparse(&file));
        chunk.clear();
        Ok(())
    };
    for line in code.split_inclusive('\n') {
        chunk.push_str(line);
        // A doc comment or an attribute may end in `;` or `}` too.
        let ends = !line.starts_with(char::is_whitespace)
            && !line.starts_with("//")
            && !line.starts_with('#')
            && (line.trim_end() == "}" || line.trim_end().ends_with(';'));
        if ends && chunk.len() > 32 * 1024 {
            flush(&mut chunk, &mut out)?;
        }
    }
    flush(&mut chunk, &mut out)?;
    Ok(out)
}

/// Whether an identifier of `code`'s code (not its strings or comments) is
/// one of `names`.
fn names_any(code: &str, names: &HashSet<String>) -> bool {
    let mut found = false;
    scan(code, |piece| {
        if let Piece::Code(text) = piece {
            found = found || identifiers(text).any(|i| names.contains(i));
        }
    });
    found
}

/// Adds to `out` every name `code` defines: the identifier after `struct`,
/// `enum`, `trait`, `type`, `const`, `static`, `fn`, `mod`, `union` or
/// `macro_rules!`.
fn definitions(code: &str, out: &mut HashSet<String>) {
    const KEYWORDS: &[&str] = &[
        "struct", "enum", "trait", "type", "const", "static", "fn", "mod", "union",
    ];
    scan(code, |piece| {
        if let Piece::Code(text) = piece {
            let mut previous = "";
            for word in identifiers(text) {
                if KEYWORDS.contains(&previous) {
                    out.insert(word.trim_start_matches("r#").to_owned());
                }
                previous = word;
            }
        }
    });
}

/// The identifiers of a stretch of code, in order.
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '#'))
        .filter(|w| w.starts_with(|c: char| c.is_alphabetic() || c == '_'))
}

/// A stretch of formatted code: code proper, or a string literal or comment
/// kept verbatim.
enum Piece<'a> {
    Code(&'a str),
    Verbatim(&'a str),
}

/// Splits `code` into code and verbatim stretches (string and character
/// literals, comments), in order; concatenated, they are `code`.
fn scan<'a>(code: &'a str, mut each: impl FnMut(Piece<'a>)) {
    let bytes = code.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let end = match bytes[i] {
            b'"' => Some(string_end(bytes, i + 1)),
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                Some(code[i..].find('\n').map_or(bytes.len(), |n| i + n))
            }
            b'r' if !ident_byte(bytes.get(i.wrapping_sub(1)).copied())
                && matches!(bytes.get(i + 1), Some(b'"' | b'#')) =>
            {
                raw_string_end(bytes, i + 1)
            }
            b'b' if !ident_byte(bytes.get(i.wrapping_sub(1)).copied())
                && bytes.get(i + 1) == Some(&b'"') =>
            {
                Some(string_end(bytes, i + 2))
            }
            b'\'' => char_end(bytes, i),
            _ => None,
        };
        match end {
            Some(end) => {
                if start < i {
                    each(Piece::Code(&code[start..i]));
                }
                each(Piece::Verbatim(&code[i..end]));
                i = end;
                start = end;
            }
            None => i += 1,
        }
    }
    if start < bytes.len() {
        each(Piece::Code(&code[start..]));
    }
}

fn ident_byte(b: Option<u8>) -> bool {
    b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The end (exclusive) of a string literal whose contents start at `from`.
fn string_end(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The end of a raw string whose `#`s or quote start at `from`, if it is one.
fn raw_string_end(bytes: &[u8], from: usize) -> Option<usize> {
    let hashes = bytes[from..].iter().take_while(|b| **b == b'#').count();
    if bytes.get(from + hashes) != Some(&b'"') {
        return None;
    }
    let mut i = from + hashes + 1;
    while i < bytes.len() {
        if bytes[i] == b'"' && bytes[i + 1..].iter().take(hashes).all(|b| *b == b'#') {
            let end = i + 1 + hashes;
            if end <= bytes.len() {
                return Some(end);
            }
        }
        i += 1;
    }
    Some(bytes.len())
}

/// The end of a character literal at `at` (`'a'`, `'\n'`), or `None` for a
/// lifetime (`'a`).
fn char_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at + 1)? {
        b'\\' => {
            let close = bytes[at + 2..].iter().position(|b| *b == b'\'')?;
            Some(at + 2 + close + 1)
        }
        _ => {
            // One character, possibly several bytes, then the quote.
            let rest = std::str::from_utf8(&bytes[at + 1..]).ok()?;
            let c = rest.chars().next()?;
            (bytes.get(at + 1 + c.len_utf8()) == Some(&b'\'')).then(|| at + 2 + c.len_utf8())
        }
    }
}

/// `code` with its full paths shortened, and the `use` lines that bring the
/// short names in. `defined`: every name the generated code defines.
pub(crate) fn shorten(code: &str, defined: &HashSet<String>) -> (BTreeSet<String>, String) {
    let mut claimed: HashMap<String, String> = PRELUDE
        .iter()
        .map(|(name, path)| ((*name).to_owned(), (*path).to_owned()))
        .collect();
    let mut imports: BTreeSet<String> = BTreeSet::new();
    let mut out = String::with_capacity(code.len());
    // The indentation of a nested module being skipped.
    let mut nested: Option<usize> = None;
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(at) = nested {
            out.push_str(line);
            if indent == at && trimmed.starts_with('}') {
                nested = None;
            }
            continue;
        }
        let word = trimmed.strip_prefix("pub ").unwrap_or(trimmed);
        if word.starts_with("mod ") && trimmed.trim_end().ends_with('{') {
            nested = Some(indent);
            out.push_str(line);
            continue;
        }
        if word.starts_with("use ") {
            out.push_str(line);
            continue;
        }
        scan(line, |piece| match piece {
            Piece::Verbatim(text) => out.push_str(text),
            Piece::Code(text) => {
                shorten_code(text, defined, &mut claimed, &mut imports, &mut out);
            }
        });
    }
    (imports, out)
}

/// Rewrites the full paths of one stretch of code into `out`.
fn shorten_code(
    text: &str,
    defined: &HashSet<String>,
    claimed: &mut HashMap<String, String>,
    imports: &mut BTreeSet<String>,
    out: &mut String,
) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let global = bytes[i] == b':'
            && bytes.get(i + 1) == Some(&b':')
            && !(i > 0 && (ident_byte(Some(bytes[i - 1])) || bytes[i - 1] == b':'));
        if !global {
            let next = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + next]);
            i += next;
            continue;
        }
        // `::a::b::C`: its segments, up to the first that is not a name.
        let mut segments: Vec<&str> = Vec::new();
        let mut end = i;
        while text[end..].starts_with("::") {
            let from = end + 2;
            let len = text[from..]
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            if len == 0 {
                break;
            }
            segments.push(&text[from..from + len]);
            end = from + len;
        }
        let macro_call = text[end..].starts_with('!');
        let mut written = false;
        if ROOTS.contains(&segments.first().copied().unwrap_or_default()) {
            // The short form, or else the one that keeps its module
            // (`reqwest::Client` where `Client` is taken).
            let forms = short_form(&segments, macro_call)
                .into_iter()
                .chain(module_form(&segments));
            for (unit, import, rest) in forms {
                let free =
                    !defined.contains(&unit) && claimed.get(&unit).is_none_or(|p| *p == import);
                if !free {
                    continue;
                }
                if !PRELUDE.iter().any(|(n, p)| *n == unit && *p == import) {
                    imports.insert(import.clone());
                }
                claimed.insert(unit.clone(), import);
                out.push_str(&unit);
                for segment in rest {
                    out.push_str("::");
                    out.push_str(segment);
                }
                written = true;
                break;
            }
        }
        if !written {
            out.push_str(&text[i..end]);
        }
        i = end;
    }
}

/// The short form of a full path: the name to import, the path it is
/// imported from, and what follows it. A type, trait or constant (the first
/// capitalised segment) is imported itself (`ApiClient::new`); a prelude
/// variant is written alone (`Some`); a macro is imported itself; a
/// function by its module (`routing::get`).
fn short_form<'s>(
    segments: &[&'s str],
    macro_call: bool,
) -> Option<(String, String, Vec<&'s str>)> {
    if segments.len() < 2 {
        return None;
    }
    let joined = |upto: usize| {
        let mut path = String::new();
        for (n, s) in segments[..=upto].iter().enumerate() {
            if n > 0 {
                path.push_str("::");
            }
            path.push_str(if n == 0 && *s == "core" { "std" } else { s });
        }
        path
    };
    // `Option::Some`, `Result::Ok`: the prelude's variants.
    if segments.len() == 4 {
        let path = joined(3);
        if PRELUDE.iter().any(|(n, p)| *n == segments[3] && *p == path) {
            return Some((segments[3].to_owned(), path, Vec::new()));
        }
    }
    if let Some(at) =
        (1..segments.len()).find(|&n| segments[n].starts_with(|c: char| c.is_ascii_uppercase()))
    {
        return Some((
            segments[at].to_owned(),
            joined(at),
            segments[at + 1..].to_vec(),
        ));
    }
    let last = segments.len() - 1;
    if macro_call {
        return Some((segments[last].to_owned(), joined(last), Vec::new()));
    }
    // A function: imported by its module, which is not the crate itself.
    (last >= 2).then(|| {
        (
            segments[last - 1].to_owned(),
            joined(last - 1),
            vec![segments[last]],
        )
    })
}

/// The form of a path that keeps the module of its first capitalised
/// segment (`reqwest::Client`), when that module is not the crate's root.
fn module_form<'s>(segments: &[&'s str]) -> Option<(String, String, Vec<&'s str>)> {
    let at =
        (2..segments.len()).find(|&n| segments[n].starts_with(|c: char| c.is_ascii_uppercase()))?;
    let module = segments[at - 1];
    // `result::Result` reads worse than the full path.
    if module == "rt"
        || module.starts_with(|c: char| c.is_ascii_uppercase())
        || module.eq_ignore_ascii_case(segments[at])
    {
        return None;
    }
    Some((
        module.to_owned(),
        segments[..at].join("::"),
        segments[at..].to_vec(),
    ))
}

/// The `use` lines of `imports`, one per parent path, in groups: std, then
/// the runtime. A line longer than rustfmt's width is broken as rustfmt
/// breaks it.
fn use_lines(imports: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut by_parent: BTreeMap<(bool, String), Vec<String>> = BTreeMap::new();
    for path in imports {
        let (parent, name) = path.rsplit_once("::").unwrap_or(("", path));
        by_parent
            .entry((!parent.starts_with("std"), parent.to_owned()))
            .or_default()
            .push(name.to_owned());
    }
    let mut groups: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
    for ((external, parent), mut names) in by_parent {
        // rustfmt's order: lowercase (modules, functions, macros) first.
        let lower = |s: &str| s.starts_with(|c: char| c.is_ascii_lowercase());
        names.sort_by(|a, b| lower(b).cmp(&lower(a)).then_with(|| a.cmp(b)));
        let line = match names.as_slice() {
            [one] => format!("use {parent}::{one};"),
            _ => format!("use {parent}::{{{}}};", names.join(", ")),
        };
        let line = if line.len() + 4 <= 100 || names.len() == 1 {
            line
        } else {
            let mut broken = format!("use {parent}::{{\n");
            let mut row = String::new();
            for name in &names {
                if !row.is_empty() && 8 + row.len() + 1 + name.len() + 1 > 100 {
                    broken.push_str(&format!("    {}\n", row.trim_end()));
                    row.clear();
                }
                row.push_str(name);
                row.push_str(", ");
            }
            broken.push_str(&format!("    {}\n}};", row.trim_end()));
            broken
        };
        groups[usize::from(external)].push(line);
    }
    groups.retain(|g| !g.is_empty());
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(code: &str, defined: &[&str]) -> (Vec<String>, String) {
        let defined = defined.iter().map(|s| (*s).to_owned()).collect();
        let (imports, code) = shorten(code, &defined);
        (use_lines(&imports).concat(), code)
    }

    #[test]
    fn paths_become_names_imported_once() {
        let (uses, code) = short(
            "fn f(a: ::std::sync::Arc<::idem_runtime::rt::client::ApiClient>) -> ::std::result::Result<(), ::std::string::String> {\n    let x = ::idem_runtime::rt::client::ApiClient::new(::idem_runtime::rt::client::segment(&a));\n    ::std::result::Result::Ok(())\n}\n",
            &["f"],
        );
        assert_eq!(
            uses,
            [
                "use std::sync::Arc;",
                "use idem_runtime::rt::client;",
                "use idem_runtime::rt::client::ApiClient;",
            ]
        );
        assert_eq!(
            code,
            "fn f(a: Arc<ApiClient>) -> Result<(), String> {\n    let x = ApiClient::new(client::segment(&a));\n    Ok(())\n}\n"
        );
    }

    #[test]
    fn a_taken_name_stays_in_full() {
        // A schema named `Result`, and a second `Request` from elsewhere.
        let (uses, code) = short(
            "fn f() -> ::std::result::Result<Result, ::idem_runtime::rt::client::Request> { let _: ::idem_runtime::rt::server::axum::extract::Request; }\n",
            &["Result", "f"],
        );
        assert_eq!(
            uses,
            [
                "use idem_runtime::rt::client::Request;",
                "use idem_runtime::rt::server::axum::extract;"
            ]
        );
        assert_eq!(
            code,
            "fn f() -> ::std::result::Result<Result, Request> { let _: extract::Request; }\n"
        );
    }

    #[test]
    fn strings_comments_uses_and_nested_modules_are_left_alone() {
        let code = "/// See ::std::sync::Arc.\n#[serde(crate = \"::idem_runtime::rt::serde\")]\nuse ::std::fmt::Write as _;\npub mod prelude {\n    pub use ::idem_runtime::rt::client::ApiError;\n    const A: ::std::sync::Arc<u8> = 1;\n}\nconst C: char = '\"'; static S: &str = \"::std::x\";\n";
        let (uses, out) = short(code, &[]);
        assert!(uses.is_empty(), "{uses:?}");
        assert_eq!(out, code);
    }

    #[test]
    fn macros_and_prelude_variants() {
        let (uses, code) = short(
            "::idem_runtime::rt::object! { pub struct A { pub b: ::std::option::Option<u8> } }\nfn g() { let _ = ::std::option::Option::Some(1); ::idem_runtime::rt::server::axum::routing::get(h); }\n",
            &["A", "g"],
        );
        assert_eq!(
            uses,
            [
                "use idem_runtime::rt::object;",
                "use idem_runtime::rt::server::axum::routing;"
            ]
        );
        assert_eq!(
            code,
            "object! { pub struct A { pub b: Option<u8> } }\nfn g() { let _ = Some(1); routing::get(h); }\n"
        );
    }

    #[test]
    fn a_doc_line_that_ends_like_an_item_does_not_split_it() {
        let mut code = String::new();
        for n in 0..2000 {
            code.push_str(&format!(
                "/// Sets `{{x}}`;\n/// {{\n/// }}\npub struct A{n};\n"
            ));
        }
        let formatted = reformat(&code).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(formatted.matches("pub struct").count(), 2000);
    }

    #[test]
    fn definitions_are_found_in_code_only() {
        let mut found = HashSet::new();
        definitions(
            "/// struct Doc\npub struct A;\nenum B {}\nfn c() { let s = \"struct D\"; }\nobject! { pub struct E {} }\n",
            &mut found,
        );
        let mut found: Vec<_> = found.into_iter().collect();
        found.sort();
        assert_eq!(found, ["A", "B", "E", "c"]);
    }
}
