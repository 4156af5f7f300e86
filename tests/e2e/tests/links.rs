//! Every relative link in the README and under `docs/` resolves: the file or
//! directory exists, and an `#anchor` into a Markdown page names one of its
//! headings (as GitHub spells heading anchors).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown pages the check covers.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    let mut dirs = vec![root().join("docs")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The page's text outside fenced code blocks and inline code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        // Inline code: drop what lies between backtick pairs.
        let mut code = false;
        for c in line.chars() {
            if c == '`' {
                code = !code;
            } else if !code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// `[text](target)` targets.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find([')', ' ', '\n']).unwrap_or(rest.len());
        out.push(rest[..end].to_owned());
        rest = &rest[end..];
    }
    out
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped (but `-`
/// and `_`), spaces as `-`; a repeated heading gets `-1`, `-2`, ….
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        }
        if fence || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 0;
        while seen.contains(&candidate) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
        seen.insert(candidate);
    }
    seen
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap_or_default();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap_or(Path::new(".")).join(file)
            };
            let name = page
                .strip_prefix(root())
                .unwrap_or(&page)
                .display()
                .to_string();
            if !target.exists() {
                broken.push(format!("{name}: {link}: no such file"));
                continue;
            }
            if !anchor.is_empty() && target.extension().is_some_and(|e| e == "md") {
                let target_text = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{name}: {link}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: the scan is broken"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_spelled_as_github_spells_them() {
    let page = "# The server runtime: `idem_runtime::server`\n## Scope: keys belong to a caller\n## Tests\n## Tests\n```\n# not a heading\n```\n";
    let found = anchors(page);
    for expected in [
        "the-server-runtime-idem_runtimeserver",
        "scope-keys-belong-to-a-caller",
        "tests",
        "tests-1",
    ] {
        assert!(found.contains(expected), "{expected}: {found:?}");
    }
    assert!(!found.contains("not-a-heading"));
    assert_eq!(
        links("see [a](a.md#x) and `[b](b.md)`, [c](https://x.y)\n```\n[d](d.md)\n```\n"),
        ["a.md#x", "https://x.y"]
    );
}
