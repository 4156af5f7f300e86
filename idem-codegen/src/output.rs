//! Front ends for diagnostics: rustc-style text, JSON, SARIF 2.1.0 and GitHub
//! workflow commands. All four carry the same facts.

use std::path::{Path, PathBuf};

use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};
use serde_json::{Value as Json, json};

use crate::audit::{Diagnostic, RULES, Report, Severity, Summary};
use crate::load::LoadError;
use crate::model::{KeyOrigin, KeySource, Method, Model, Operation};
use crate::source::{FileId, Pos, SourceMap};
use crate::vocab::{Effect, KeyRequirement};

/// Output formats of `idem audit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Format {
    Human,
    Json,
    Sarif,
    Github,
}

/// Render a report in `format`. `color` applies to `human` only.
pub fn report(model: &Model, report: &Report, format: Format, color: bool) -> String {
    match format {
        Format::Human => human(model, report, color),
        Format::Json => pretty(&json_report(model, report)),
        Format::Sarif => pretty(&sarif(model, report)),
        Format::Github => github(model, report),
    }
}

fn pretty(value: &Json) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

fn renderer(color: bool) -> Renderer {
    if color {
        Renderer::styled()
    } else {
        Renderer::plain()
    }
}

/// Characters shown before a diagnostic's column on a line too long to show.
const EXCERPT_BEFORE: usize = 40;
/// Characters shown from the column on.
const EXCERPT_AFTER: usize = 80;

/// The byte range of the token starting at byte `start` of `line`.
fn token_span(line: &str, start: usize) -> std::ops::Range<usize> {
    let start = start.min(line.len());
    let rest = &line[start..];
    let quoted = rest.starts_with(['"', '\'']);
    let len = if rest.starts_with(['{', '[']) {
        flow_len(rest)
    } else if quoted {
        let q = rest.as_bytes()[0];
        rest[1..].find(q as char).map_or(rest.len(), |i| i + 2)
    } else {
        rest.find(|c: char| c.is_whitespace() || c == ':' || c == ',')
            .unwrap_or(rest.len())
    };
    start..start + len.max(1).min(rest.len())
}

/// What one rustc-style message says, before it is rendered.
#[derive(Debug)]
pub struct Message<'a> {
    pub level: Level<'a>,
    pub id: Option<&'a str>,
    pub title: &'a str,
    pub pos: Option<Pos>,
    /// Label under the underlined token.
    pub label: &'a str,
    /// `help:` lines.
    pub notes: &'a [String],
}

/// Length of the flow collection `{…}` / `[…]` that starts `text`, or the
/// rest of the line when it does not close on it.
fn flow_len(text: &str) -> usize {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// One rustc-style message with its snippet.
pub fn snippet_message(sources: &SourceMap, message: Message<'_>, color: bool) -> String {
    let Message {
        level,
        id,
        title,
        pos,
        label,
        notes,
    } = message;
    let mut head = level.clone().primary_title(title);
    if let Some(id) = id {
        head = head.id(id);
    }
    let file = pos.and_then(|p| sources.get(p.file));
    // A bounded window of the line: a minified document is one line of
    // megabytes, and rendering all of it per finding would cost findings
    // times its length.
    let excerpt = pos
        .zip(file)
        .and_then(|(p, f)| f.excerpt(p.line, p.column, EXCERPT_BEFORE, EXCERPT_AFTER));
    let mut group: Group<'_> = match (pos, file, &excerpt) {
        (Some(p), Some(f), Some(excerpt)) => {
            let span = token_span(&excerpt.text, excerpt.offset);
            let snippet = Snippet::source(excerpt.text.as_ref())
                .line_start(p.line as usize)
                .annotation(AnnotationKind::Primary.span(span).label(label));
            if excerpt.clipped {
                // The window's columns are not the line's: the location
                // line is written below, from the position itself.
                head.element(snippet)
            } else {
                head.element(snippet.path(f.display.as_str()))
            }
        }
        _ => Group::with_title(head),
    };
    for note in notes {
        group = group.element(Level::HELP.message(note.as_str()));
    }
    let mut out = renderer(color).render(&[group]);
    if let (Some(p), Some(f), Some(excerpt)) = (pos, file, &excerpt)
        && excerpt.clipped
        && let Some(end) = out.find('\n')
    {
        // As the renderer writes it: indented by the gutter's width.
        let gutter = p.line.to_string().len();
        let arrow = if color {
            "\x1b[1m\x1b[94m-->\x1b[0m"
        } else {
            "-->"
        };
        let location = format!(
            "\n{:gutter$}{arrow} {}:{}:{}",
            "", f.display, p.line, p.column
        );
        out.insert_str(end, &location);
    }
    out.push('\n');
    out
}

/// One finding, rustc-style.
fn diagnostic_human(model: &Model, d: &Diagnostic, color: bool) -> String {
    let level = match d.severity {
        Severity::Error => Level::ERROR,
        Severity::Warning => Level::WARNING,
    };
    let mut notes: Vec<String> = d.help.iter().cloned().collect();
    if let Some(e) = &d.evidence {
        let sources = &model.document.sources;
        notes.push(format!(
            "the words stand in its {} at {}:{}:{}",
            e.field,
            sources.display(e.pos.file),
            e.pos.line,
            e.pos.column
        ));
    }
    snippet_message(
        &model.document.sources,
        Message {
            level,
            id: Some(d.code),
            title: &d.message,
            pos: Some(d.pos),
            label: d.rule,
            notes: &notes,
        },
        color,
    )
}

fn human(model: &Model, report: &Report, color: bool) -> String {
    let mut out = String::new();
    for d in &report.diagnostics {
        out.push_str(&diagnostic_human(model, d, color));
        out.push('\n');
    }
    if !report.known.is_empty() {
        out.push_str(&format!(
            "{} known finding(s) from the baseline not shown\n",
            report.known.len()
        ));
    }
    if report.diagnostics.len() > DIGEST_HINT_AFTER {
        out.push_str(&format!(
            "{} findings: `idem audit --summary` counts them per rule and operation\n",
            report.diagnostics.len()
        ));
    }
    out.push_str(&summary_line(&report.summary));
    out
}

/// Findings `generate` shows in full before it counts the rest.
const BRIEF_FINDINGS: usize = 5;

/// What `generate` says of the audit before it refuses or goes on: the
/// first few findings in full, then the count per rule and operation (the
/// `--summary` digest), so a spec with thousands of findings is reported
/// in a screen.
pub fn findings_brief(model: &Model, report: &Report, color: bool) -> String {
    if report.diagnostics.len() <= BRIEF_FINDINGS {
        return human(model, report, color);
    }
    let mut out = String::new();
    for d in report.diagnostics.iter().take(BRIEF_FINDINGS) {
        out.push_str(&diagnostic_human(model, d, color));
        out.push('\n');
    }
    out.push_str(&format!(
        "… and {} more finding(s); `idem audit` lists them all\n",
        report.diagnostics.len() - BRIEF_FINDINGS
    ));
    out.push_str(&digest(report));
    out
}

/// Past this many findings, the human report points at `--summary`.
const DIGEST_HINT_AFTER: usize = 20;

/// Operations listed by `--summary`.
const DIGEST_TOP: usize = 10;

/// `idem audit --summary`: findings counted per rule, the operations with
/// the most findings, and the summary line; what a 300-finding first run
/// needs to be read.
pub fn digest(report: &Report) -> String {
    use std::collections::BTreeMap;
    let mut out = String::new();
    let mut per_rule: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &report.diagnostics {
        *per_rule.entry(d.code).or_default() += 1;
    }
    if per_rule.is_empty() {
        out.push_str("no findings\n");
    } else {
        out.push_str("findings per rule:\n");
        let width = RULES.iter().map(|r| r.slug.len()).max().unwrap_or(0);
        for rule in RULES {
            if let Some(n) = per_rule.get(rule.code) {
                out.push_str(&format!(
                    "  {:>5}  {} {:<width$}  {}\n",
                    n,
                    rule.code,
                    rule.slug,
                    rule.severity.as_str()
                ));
            }
        }
    }
    /// Findings, the operation id, and the rules that found them.
    type Tally<'r> = (usize, Option<&'r str>, Vec<&'static str>);
    let mut per_op: BTreeMap<(&str, Method), Tally<'_>> = BTreeMap::new();
    let mut document_level = 0usize;
    for d in &report.diagnostics {
        match &d.operation {
            Some(o) => {
                let entry = per_op.entry((o.path.as_str(), o.method)).or_insert((
                    0,
                    o.operation_id.as_deref(),
                    Vec::new(),
                ));
                entry.0 += 1;
                if !entry.2.contains(&d.code) {
                    entry.2.push(d.code);
                }
            }
            None => document_level += 1,
        }
    }
    let mut ranked: Vec<_> = per_op.into_iter().collect();
    for (_, (_, _, codes)) in &mut ranked {
        codes.sort_unstable();
    }
    // Most findings first; ties in path order, as the BTreeMap gave them.
    ranked.sort_by_key(|(_, (n, _, _))| std::cmp::Reverse(*n));
    if !ranked.is_empty() {
        out.push_str(&format!(
            "operations with the most findings ({} of {} with any):\n",
            ranked.len().min(DIGEST_TOP),
            ranked.len()
        ));
        for ((path, method), (n, id, codes)) in ranked.iter().take(DIGEST_TOP) {
            let id = id.map(|i| format!(" ({i})")).unwrap_or_default();
            out.push_str(&format!(
                "  {n:>5}  {method} {path}{id}: {}\n",
                codes.join(", ")
            ));
        }
    }
    if document_level > 0 {
        out.push_str(&format!(
            "  {document_level:>5}  about the document as a whole\n"
        ));
    }
    if !report.known.is_empty() {
        out.push_str(&format!(
            "{} known finding(s) from the baseline not counted\n",
            report.known.len()
        ));
    }
    out.push_str(&summary_line(&report.summary));
    out
}

/// The closing line of a human report.
pub fn summary_line(s: &Summary) -> String {
    let mut extra = String::new();
    if s.waived > 0 {
        extra.push_str(&format!(", {} waived", s.waived));
    }
    if s.baselined > 0 {
        extra.push_str(&format!(", {} baselined", s.baselined));
    }
    format!(
        "summary: {} operations, {} state-changing, {} keyed, {} documented-unsafe; {} {}, {} {}{extra}\n",
        s.operations,
        s.state_changing,
        s.keyed,
        s.documented_unsafe,
        s.errors,
        plural(s.errors, "error"),
        s.warnings,
        plural(s.warnings, "warning"),
    )
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}

/// The effect shown for an operation: declared, or what its method implies
/// (an undeclared POST creates; an undeclared PATCH promises nothing).
fn effect_name(op: &Operation) -> Option<Effect> {
    op.shown_effect().or(match op.method {
        Method::Post => Some(Effect::Create),
        _ => None,
    })
}

fn key_name(op: &Operation) -> KeyRequirement {
    op.key.requirement
}

/// An inferred fact's evidence, as JSON and SARIF show it.
fn evidence_json(sources: &SourceMap, e: &crate::model::Evidence) -> Json {
    json!({
        "words": e.words,
        "field": e.field,
        "file": sources.display(e.pos.file),
        "line": e.pos.line,
        "column": e.pos.column,
    })
}

fn diagnostic_json(sources: &SourceMap, d: &Diagnostic) -> Json {
    let op = d.operation.as_ref();
    json!({
        "rule": d.rule,
        "code": d.code,
        "severity": d.severity,
        "method": op.map(|o| o.method.as_str()),
        "path": op.map(|o| o.path.as_str()),
        "operation_id": op.and_then(|o| o.operation_id.as_deref()),
        "file": sources.display(d.pos.file),
        "line": d.pos.line,
        "column": d.pos.column,
        "message": d.message,
        "help": d.help,
        "evidence": d.evidence.as_ref().map(|e| evidence_json(sources, e)),
    })
}

/// The report as JSON, in the shape `docs/audit.md` documents (`--format json`).
pub fn json_report(model: &Model, report: &Report) -> Json {
    let sources = &model.document.sources;
    let operations: Vec<Json> = model
        .operations
        .iter()
        .map(|op| {
            json!({
                "method": op.method.as_str(),
                "path": op.path,
                "operation_id": op.operation_id,
                "class": op.class.as_str(),
                "key": key_name(op),
                "key_source": op.key.origin.map(KeyOrigin::as_str),
                "key_in": op.key.source.as_ref().map(KeySource::location),
                "key_name": op.key.source.as_ref().map(KeySource::name),
                "key_evidence": op.key.evidence.as_ref().map(|e| evidence_json(sources, e)),
                "effect": effect_name(op),
                "effect_source": op.effect_source().as_str(),
                "effect_evidence": op
                    .inferred_effect
                    .as_ref()
                    .filter(|_| op.declared_effect.is_none())
                    .map(|i| evidence_json(sources, &i.evidence)),
            })
        })
        .collect();
    let webhooks: Vec<Json> = model
        .webhooks
        .iter()
        .map(|w| json!({ "name": w.name, "method": w.method.as_str(), "operation_id": w.operation_id }))
        .collect();
    json!({
        "spec": sources.display(model.document.root().pos.file),
        // As written: `2.0` for a Swagger document, read as OpenAPI 3.0.
        "version": model.document.version_text,
        "operations": operations,
        "webhooks": webhooks,
        "diagnostics": report.diagnostics.iter().map(|d| diagnostic_json(sources, d)).collect::<Vec<_>>(),
        "known": report.known.iter().map(|d| diagnostic_json(sources, d)).collect::<Vec<_>>(),
        "summary": report.summary,
    })
}

/// SARIF 2.1.0, as GitHub code scanning accepts it, with URIs relative to
/// the repository root ([`sarif_root`]).
pub fn sarif(model: &Model, report: &Report) -> Json {
    sarif_with_root(model, report, &sarif_root())
}

/// Where SARIF URIs are relative to: the git top level above the working
/// directory (the folder holding `.git`, a directory or a worktree's file),
/// or the working directory itself when there is none. Code scanning places
/// a result by its path from the repository root, whatever path the spec
/// was given by.
pub fn sarif_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .map_or_else(|| cwd.clone(), Path::to_path_buf)
}

/// SARIF with URIs relative to `root` (absolute): a file under it gets a
/// relative `uri` with `uriBaseId: %SRCROOT%`, which `originalUriBaseIds`
/// maps to `root`; a file outside it gets an absolute `file://` URI and no
/// base.
pub fn sarif_with_root(model: &Model, report: &Report, root: &Path) -> Json {
    let sources = &model.document.sources;
    let rules: Vec<Json> = RULES
        .iter()
        .map(|r| {
            json!({
                "id": r.code,
                "name": r.slug,
                "shortDescription": { "text": r.summary },
                "fullDescription": { "text": r.summary },
                "help": { "text": r.docs, "markdown": r.docs },
                "defaultConfiguration": { "level": r.severity.as_str() },
                "properties": { "tags": ["idempotency", "retries"] },
            })
        })
        .collect();
    let results: Vec<Json> = report
        .diagnostics
        .iter()
        .map(|d| {
            let index = RULES.iter().position(|r| r.code == d.code).unwrap_or(0);
            let mut text = d.message.clone();
            if let Some(help) = &d.help {
                text.push_str("\nhelp: ");
                text.push_str(help);
            }
            let identity = match &d.operation {
                Some(o) => format!("{}:{} {}", d.code, o.method, o.path),
                None => format!("{}:{}", d.code, d.message),
            };
            let mut result = json!({
                "ruleId": d.code,
                "ruleIndex": index,
                "level": d.severity.as_str(),
                "message": { "text": text },
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": sarif_artifact(sources, d.pos.file, root),
                        "region": { "startLine": d.pos.line.max(1), "startColumn": d.pos.column.max(1) },
                    }
                }],
                "partialFingerprints": { "idemFinding/v1": identity },
            });
            if let Some(e) = &d.evidence {
                // The words that decided the finding, where they stand.
                result["relatedLocations"] = json!([{
                    "id": 1,
                    "physicalLocation": {
                        "artifactLocation": sarif_artifact(sources, e.pos.file, root),
                        "region": { "startLine": e.pos.line.max(1), "startColumn": e.pos.column.max(1) },
                    },
                    "message": { "text": format!("evidence in its {}: \"{}\"", e.field, e.words) },
                }]);
            }
            result
        })
        .collect();
    sarif_log("idem", rules, results, root)
}

/// A SARIF 2.1.0 log of one run of `tool` (`idem`, `idem probe`): its
/// rules, its results, and URIs relative to `root`.
pub(crate) fn sarif_log(tool: &str, rules: Vec<Json>, results: Vec<Json>, root: &Path) -> Json {
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": tool,
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": env!("CARGO_PKG_REPOSITORY"),
                "rules": rules,
            }},
            "results": results,
            "columnKind": "unicodeCodePoints",
            "originalUriBaseIds": {
                SRCROOT: { "uri": format!("{}/", file_uri(root).trim_end_matches('/')) },
            },
        }],
    })
}

/// The base id SARIF URIs are relative to: the repository root.
const SRCROOT: &str = "%SRCROOT%";

/// Where a SARIF result's file is: relative to `root` when under it.
pub(crate) fn sarif_artifact(sources: &SourceMap, file: FileId, root: &Path) -> Json {
    let Some(path) = sources.get(file).map(|f| f.path.as_path()) else {
        return json!({ "uri": uri_path(Path::new(sources.display(file))) });
    };
    let absolute = absolute(path);
    let relative = absolute
        .strip_prefix(root)
        .ok()
        .map(Path::to_path_buf)
        .or_else(|| {
            // Through symlinks (a checkout under a linked folder), by real paths.
            let real = std::fs::canonicalize(&absolute).ok()?;
            let real_root = std::fs::canonicalize(root).ok()?;
            real.strip_prefix(real_root).ok().map(Path::to_path_buf)
        });
    match relative {
        Some(rel) => json!({ "uri": uri_path(&rel), "uriBaseId": SRCROOT }),
        None => json!({ "uri": file_uri(&absolute) }),
    }
}

/// `path` made absolute against the working directory and lexically
/// normalised (`a/./b/../c` → `a/c`).
fn absolute(path: &Path) -> PathBuf {
    use std::path::Component;
    let joined = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// A relative path as a URI reference: `/`-separated, percent-encoded.
fn uri_path(path: &Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        let keep = b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&b);
        if keep {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An absolute path as a `file://` URI (`C:\x` → `file:///C:/x`).
fn file_uri(path: &Path) -> String {
    let encoded = uri_path(path);
    if encoded.starts_with('/') {
        format!("file://{encoded}")
    } else {
        format!("file:///{encoded}")
    }
}

/// GitHub Actions workflow commands: one annotation per finding.
pub fn github(model: &Model, report: &Report) -> String {
    let sources = &model.document.sources;
    let mut out = String::new();
    for d in &report.diagnostics {
        let mut message = d.message.clone();
        if let Some(help) = &d.help {
            message.push_str("\nhelp: ");
            message.push_str(help);
        }
        out.push_str(&format!(
            "::{} file={},line={},col={},title={}::{}\n",
            d.severity.as_str(),
            escape_property(sources.display(d.pos.file)),
            d.pos.line,
            d.pos.column,
            escape_property(&format!("{} {}", d.code, d.rule)),
            escape_data(&message),
        ));
    }
    let s = &report.summary;
    out.push_str(&format!(
        "::notice title=idem audit::{}",
        escape_data(summary_line(s).trim_end())
    ));
    out.push('\n');
    out
}

fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// A load failure, rustc-style, for exit code 2.
pub fn load_error(sources: &SourceMap, error: &LoadError, color: bool) -> String {
    snippet_message(
        sources,
        Message {
            level: Level::ERROR,
            id: None,
            title: &error.to_string(),
            pos: error.pos(),
            label: "here",
            notes: &[],
        },
        color,
    )
}

/// A load warning (an overlay target that selects nothing, …) with its snippet.
pub fn load_warning(sources: &SourceMap, warning: &crate::load::Warning, color: bool) -> String {
    snippet_message(
        sources,
        Message {
            level: Level::WARNING,
            id: None,
            title: &warning.message,
            pos: Some(warning.pos),
            label: "here",
            notes: &[],
        },
        color,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_spans() {
        assert_eq!(token_span("    post:", 4), 4..8);
        assert_eq!(token_span("  scope: global", 9), 9..15);
        assert_eq!(token_span("  x: \"a b\"", 5), 5..10);
        assert_eq!(token_span("", 0), 0..0);
        assert_eq!(token_span("  - { name: id, in: path }", 4), 4..26);
        assert_eq!(token_span("  x: [a, 'b]', c] # note", 5), 5..17);
        assert_eq!(token_span("  x: {a: [", 5), 5..10);
    }

    #[test]
    fn sarif_uris() {
        assert_eq!(
            uri_path(Path::new("specs/my api.yaml")),
            "specs/my%20api.yaml"
        );
        assert_eq!(uri_path(Path::new("a/b#c%.yaml")), "a/b%23c%25.yaml");
        assert_eq!(uri_path(Path::new("caf\u{e9}.yaml")), "caf%C3%A9.yaml");
        assert_eq!(
            file_uri(Path::new("/tmp/x y.yaml")),
            "file:///tmp/x%20y.yaml"
        );
        assert_eq!(absolute(Path::new("/a/./b/../c")), Path::new("/a/c"));
    }

    #[test]
    fn workflow_command_escaping() {
        assert_eq!(escape_data("a%b\nc"), "a%25b%0Ac");
        assert_eq!(escape_property("a:b,c"), "a%3Ab%2Cc");
    }
}
