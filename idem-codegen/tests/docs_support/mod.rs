//! Shared by the docs page tests: fixtures rendered through the public API,
//! and the few HTML facts the tests check, read without an HTML parser (the
//! pages are generated, so their attribute syntax is known).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use idem_codegen::audit;
use idem_codegen::docs::{self, DocsPages};
use idem_codegen::load::Document;
use idem_codegen::model::{self, Model};

pub fn fixture_path(name: &str) -> PathBuf {
    Path::new("../fixtures").join(name)
}

pub fn model_of(path: &Path) -> Model {
    let document = Document::load(path)
        .unwrap_or_else(|f| panic!("{}: cannot load: {}", path.display(), f.error));
    model::build(document, &audit::rule_names())
        .unwrap_or_else(|f| panic!("{}: cannot model: {}", path.display(), f.error))
}

pub fn pages(name: &str) -> DocsPages {
    let path = fixture_path(name);
    docs::render(&model_of(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every value of `attribute="…"` in `html`, in order.
pub fn attribute_values(html: &str, attribute: &str) -> Vec<String> {
    let needle = format!(" {attribute}=\"");
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find(&needle) {
        let value = &rest[at + needle.len()..];
        let end = value.find('"').unwrap_or(value.len());
        out.push(value[..end].to_owned());
        rest = &value[end..];
    }
    out
}

/// The fragment of every internal link (`href="#…"`).
pub fn internal_links(html: &str) -> Vec<String> {
    attribute_values(html, "href")
        .into_iter()
        .filter_map(|h| h.strip_prefix('#').map(str::to_owned))
        .collect()
}

/// The attribute names of every start tag in `html`, tag by tag: a small
/// tokenizer that skips quoted values, so text that merely looks like an
/// attribute (`id="x-onerror-1"`, escaped markup) is not mistaken for one.
pub fn attribute_names(html: &str) -> Vec<String> {
    let b = html.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'<' || !b.get(i + 1).is_some_and(u8::is_ascii_alphabetic) {
            i += 1;
            continue;
        }
        i += 1;
        while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'>' && b[i] != b'/' {
            i += 1;
        }
        loop {
            while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b'/') {
                i += 1;
            }
            if i >= b.len() || b[i] == b'>' {
                break;
            }
            let start = i;
            while i < b.len() && !b[i].is_ascii_whitespace() && !matches!(b[i], b'=' | b'>' | b'/')
            {
                i += 1;
            }
            out.push(html[start..i].to_ascii_lowercase());
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if b.get(i) == Some(&b'=') {
                i += 1;
                while i < b.len() && b[i].is_ascii_whitespace() {
                    i += 1;
                }
                match b.get(i) {
                    Some(&q) if q == b'"' || q == b'\'' => {
                        i += 1;
                        while i < b.len() && b[i] != q {
                            i += 1;
                        }
                        i += 1;
                    }
                    _ => {
                        while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'>' {
                            i += 1;
                        }
                    }
                }
            }
        }
    }
    out
}

/// Event-handler attributes (`onclick`, `onerror` …) on any element.
pub fn event_handlers(html: &str) -> Vec<String> {
    attribute_names(html)
        .into_iter()
        .filter(|name| name.starts_with("on"))
        .collect()
}

/// `text` as askama's HTML escaper writes it.
pub fn html_escaped(text: &str) -> String {
    text.replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// The checks every HTML page passes: no script, no handler, unique ids,
/// every internal link resolving.
pub fn assert_inert_and_linked(html: &str, what: &str) {
    let lower = html.to_ascii_lowercase();
    assert!(!lower.contains("<script"), "{what}: a script element");
    assert!(!lower.contains("<iframe"), "{what}: an iframe");
    for url in attribute_values(html, "href")
        .into_iter()
        .chain(attribute_values(html, "src"))
    {
        let url = url.trim().to_ascii_lowercase();
        assert!(
            url.starts_with('#') || url.starts_with("https://") || url.starts_with("data:"),
            "{what}: a link to {url}"
        );
    }
    assert_eq!(
        event_handlers(html),
        Vec::<String>::new(),
        "{what}: event handlers"
    );
    let ids = attribute_values(html, "id");
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{what}: duplicate ids");
    for link in internal_links(html) {
        assert!(unique.contains(&link), "{what}: #{link} names no element");
    }
}
