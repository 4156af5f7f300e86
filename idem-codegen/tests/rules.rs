#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "helpers of a test binary: a failed unwrap is a failed test"
)]
//! The rules, tested the way ruff and clippy test theirs: a fixture per rule
//! (`fixtures/rules/<slug>.yaml`) with cases that must fire and near-misses
//! that must not, a snapshot of each rule's rendered diagnostics, meta-tests
//! over the rule table, and the rule pages in `docs/rules/`, generated from
//! the rules and checked for staleness.
//!
//! The tests run with the crate directory as the working directory, so
//! fixtures are loaded by a relative path and the snapshots show it as is.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use idem_codegen::audit::{self, RULES, Report, Rule};
use idem_codegen::load::Document;
use idem_codegen::model::{self, Method, Model};
use idem_codegen::output::{self, Format};

/// The command that regenerates `docs/rules/`.
const BLESS: &str = "IDEM_BLESS=1 cargo test -p idem-codegen --test rules";

fn fixture_path(slug: &str) -> PathBuf {
    Path::new("../fixtures/rules").join(format!("{slug}.yaml"))
}

fn snapshot_path(slug: &str) -> PathBuf {
    Path::new("tests/snapshots").join(format!("rules__{slug}.snap"))
}

/// Load, model and audit one rule's fixture through the public API.
fn audit_fixture(slug: &str) -> (Model, Report) {
    let path = fixture_path(slug);
    let document = Document::load(&path)
        .unwrap_or_else(|f| panic!("{}: cannot load: {}", path.display(), f.error));
    let model = model::build(document, &audit::rule_names())
        .unwrap_or_else(|f| panic!("{}: cannot model: {}", path.display(), f.error));
    let report = audit::audit(&model);
    (model, report)
}

fn rule(slug: &str) -> &'static Rule {
    Rule::find(slug).unwrap_or_else(|| panic!("no rule `{slug}`"))
}

/// Audit `slug`'s fixture, keep that rule's findings, check they sit exactly
/// on `expected` (line, code) pairs, and snapshot them as `idem audit` prints
/// them without colour.
///
/// The pairs are checked apart from the snapshot so that a case that stops
/// firing, or a near-miss that starts, fails even when snapshots are
/// accepted without reading them.
fn check_fixture(slug: &str, expected: &[(u32, &str)]) {
    let rule = rule(slug);
    let (model, mut report) = audit_fixture(slug);
    report.diagnostics.retain(|d| d.code == rule.code);
    audit::count(&mut report.summary, &report.diagnostics);

    let mut found: Vec<(u32, &str)> = report
        .diagnostics
        .iter()
        .map(|d| (d.pos.line, d.code))
        .collect();
    found.sort_unstable();
    let mut expected = expected.to_vec();
    expected.sort_unstable();
    assert_eq!(
        found,
        expected,
        "{}: {} findings are not on the lines the fixture's POSITIVE cases mark",
        fixture_path(slug).display(),
        rule.code
    );

    let text = output::report(&model, &report, Format::Human, false);
    insta::assert_snapshot!(slug, text);
}

macro_rules! rule_fixtures {
    ($($test:ident: $slug:literal => [$(($line:literal, $code:literal)),* $(,)?];)*) => {
        $(
            #[test]
            fn $test() {
                check_fixture($slug, &[$(($line, $code)),*]);
            }
        )*

        /// Every rule with a fixture test above.
        const TESTED: &[&str] = &[$($slug),*];
    };
}

rule_fixtures! {
    unkeyed_unsafe_write: "unkeyed-unsafe-write" => [
        (16, "IDEM001"), (29, "IDEM001"), (47, "IDEM001"), (57, "IDEM001"),
        (72, "IDEM001"), (89, "IDEM001"), (155, "IDEM001"), (182, "IDEM001"),
        (241, "IDEM001"), (250, "IDEM001"), (258, "IDEM001"), (264, "IDEM001"),
    ];
    global_key_scope: "global-key-scope" => [(14, "IDEM002"), (53, "IDEM002")];
    replay_window_shorter_than_retry_horizon: "replay-window-shorter-than-retry-horizon" => [
        (14, "IDEM003"), (44, "IDEM003"), (67, "IDEM003"),
    ];
    reaper_before_replay_window: "reaper-before-replay-window" => [
        (13, "IDEM004"), (42, "IDEM004"), (65, "IDEM004"),
    ];
    external_effect_without_phases: "external-effect-without-phases" => [
        (19, "IDEM005"), (33, "IDEM005"),
    ];
    exactly_once_claim: "exactly-once-claim" => [
        (13, "IDEM006"), (17, "IDEM006"), (30, "IDEM006"), (52, "IDEM006"), (56, "IDEM006"),
    ];
    invalid_extension: "invalid-extension" => [
        (21, "IDEM007"), (23, "IDEM007"), (25, "IDEM007"), (30, "IDEM007"), (32, "IDEM007"),
        (40, "IDEM007"), (44, "IDEM007"), (53, "IDEM007"), (61, "IDEM007"), (74, "IDEM007"),
        (76, "IDEM007"), (78, "IDEM007"), (80, "IDEM007"), (94, "IDEM007"), (96, "IDEM007"),
        (99, "IDEM007"), (111, "IDEM007"), (122, "IDEM007"), (135, "IDEM007"), (148, "IDEM007"),
        (151, "IDEM007"), (153, "IDEM007"), (156, "IDEM007"),
    ];
    missing_conflict_responses: "missing-conflict-responses" => [
        (21, "IDEM008"), (32, "IDEM008"), (43, "IDEM008"), (51, "IDEM008"),
        (116, "IDEM008"), (123, "IDEM008"),
    ];
    undecided_failure_replay: "undecided-failure-replay" => [(18, "IDEM009"), (32, "IDEM009")];
    key_parameter_shape: "key-parameter-shape" => [
        (79, "IDEM010"), (89, "IDEM010"), (100, "IDEM010"), (100, "IDEM010"), (112, "IDEM010"),
        (128, "IDEM010"), (151, "IDEM010"), (165, "IDEM010"), (178, "IDEM010"), (189, "IDEM010"),
        (198, "IDEM010"), (216, "IDEM010"), (245, "IDEM010"), (254, "IDEM010"), (272, "IDEM010"),
        (312, "IDEM010"),
    ];
    missing_retry_after: "missing-retry-after" => [(17, "IDEM011"), (19, "IDEM011"), (51, "IDEM011")];
    phases_without_key: "phases-without-key" => [
        (19, "IDEM012"), (31, "IDEM012"), (39, "IDEM012"), (52, "IDEM012"),
    ];
    undeclared_protocol_refusals: "undeclared-protocol-refusals" => [(24, "IDEM013"), (35, "IDEM013")];
    undeclared_read_only: "undeclared-read-only" => [(13, "IDEM016"), (19, "IDEM016"), (26, "IDEM016")];
    unidentified_key_scope: "unidentified-key-scope" => [
        (16, "IDEM014"), (25, "IDEM014"), (34, "IDEM014"),
    ];
    claim_at_commit_outside_transaction: "claim-at-commit-outside-transaction" => [
        (18, "IDEM015"), (28, "IDEM015"), (38, "IDEM015"),
    ];
    undeclared_path_parameter: "undeclared-path-parameter" => [(11, "IDEM017"), (17, "IDEM017")];
}

#[test]
fn every_rule_has_a_fixture_and_a_snapshot_test() {
    for rule in RULES {
        assert!(
            TESTED.contains(&rule.slug),
            "{} has no fixture test in tests/rules.rs",
            rule.slug
        );
        let path = fixture_path(rule.slug);
        assert!(
            path.is_file(),
            "{} has no fixture: create {}",
            rule.slug,
            path.display()
        );
        let snapshot = snapshot_path(rule.slug);
        assert!(
            snapshot.is_file(),
            "{} has no snapshot: {} is missing",
            rule.slug,
            snapshot.display()
        );
        let (_, report) = audit_fixture(rule.slug);
        assert!(
            report.diagnostics.iter().any(|d| d.code == rule.code),
            "{}'s fixture never triggers it",
            rule.slug
        );
    }
    for slug in TESTED {
        assert!(
            Rule::find(slug).is_some(),
            "tests/rules.rs tests `{slug}`, which is not a rule"
        );
    }
    let mut orphans = Vec::new();
    for entry in std::fs::read_dir("../fixtures/rules").expect("fixtures/rules is readable") {
        let name = entry
            .expect("directory entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let slug = name.strip_suffix(".yaml").unwrap_or(&name);
        if Rule::find(slug).is_none() {
            orphans.push(name);
        }
    }
    assert!(
        orphans.is_empty(),
        "fixtures/rules holds files for no rule: {orphans:?}"
    );
}

/// A typo in a fixture's vocabulary would silently change what it tests.
#[test]
fn fixtures_use_valid_vocabulary() {
    for rule in RULES.iter().filter(|r| r.slug != "invalid-extension") {
        let (_, report) = audit_fixture(rule.slug);
        let invalid: Vec<String> = report
            .diagnostics
            .iter()
            .filter(|d| d.rule == "invalid-extension")
            .map(|d| format!("line {}: {}", d.pos.line, d.message))
            .collect();
        assert!(
            invalid.is_empty(),
            "{}'s fixture has invalid vocabulary: {invalid:#?}",
            rule.slug
        );
    }
}

#[test]
fn codes_are_unique_well_formed_and_ascending() {
    for pair in RULES.windows(2) {
        assert!(
            pair[0].code < pair[1].code,
            "codes out of order or repeated: {} then {}",
            pair[0].code,
            pair[1].code
        );
    }
    for rule in RULES {
        let digits = rule.code.strip_prefix("IDEM").unwrap_or("");
        assert!(
            digits.len() == 3 && digits.bytes().all(|b| b.is_ascii_digit()),
            "`{}` is not IDEM and three digits",
            rule.code
        );
    }
}

#[test]
fn slugs_are_unique_and_kebab_case() {
    let mut seen = BTreeSet::new();
    for rule in RULES {
        assert!(seen.insert(rule.slug), "slug `{}` is used twice", rule.slug);
        let kebab = !rule.slug.is_empty()
            && rule.slug.split('-').all(|word| {
                !word.is_empty()
                    && word
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            });
        assert!(kebab, "slug `{}` is not kebab-case", rule.slug);
    }
}

#[test]
fn docs_have_every_section() {
    let sections = [
        "## What it does",
        "## Why is this bad?",
        "## Example",
        "Use instead:",
    ];
    for rule in RULES {
        let mut from = 0;
        for section in sections {
            let at = rule.docs[from..].find(section).unwrap_or_else(|| {
                panic!(
                    "{}'s docs lack `{section}` (or have it out of order)",
                    rule.slug
                )
            });
            from += at + section.len();
        }
        assert!(!rule.summary.is_empty(), "{} has no summary", rule.slug);
    }
}

/// Lowercase first (an HTTP method or a `code` span may lead), no trailing
/// period: the diagnostic style rustc, clippy and ruff share.
fn style_problem(text: &str) -> Option<&'static str> {
    let first_word = text.split(' ').next().unwrap_or("");
    let method = Method::ALL.iter().any(|(m, _)| m.as_str() == first_word);
    if text.starts_with(|c: char| c.is_uppercase()) && !method {
        return Some("starts with an uppercase letter");
    }
    if text.trim_end().ends_with('.') {
        return Some("ends with a period");
    }
    None
}

#[test]
fn messages_are_lowercase_without_trailing_period() {
    let mut problems = Vec::new();
    for rule in RULES {
        if let Some(problem) = style_problem(rule.summary) {
            problems.push(format!("{} summary {problem}: {}", rule.code, rule.summary));
        }
        let (_, report) = audit_fixture(rule.slug);
        for d in &report.diagnostics {
            if let Some(problem) = style_problem(&d.message) {
                problems.push(format!("{} message {problem}: {}", d.code, d.message));
            }
            if let Some(problem) = d.help.as_deref().and_then(style_problem) {
                problems.push(format!("{} help {problem}: {:?}", d.code, d.help));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn style_check_accepts_methods_and_code_spans() {
    assert_eq!(style_problem("POST /v2/refunds is not idempotent"), None);
    assert_eq!(style_problem("`scope: global` makes keys collide"), None);
    assert!(style_problem("Keys collide").is_some());
    assert!(style_problem("keys collide.").is_some());
}

/// One rule's page in `docs/rules/`.
fn rule_page(rule: &Rule) -> String {
    format!(
        "<!-- @generated from idem-codegen/src/audit/rules/{}.rs by `{BLESS}`; edit the rule, not this page -->\n\n{}",
        rule.slug.replace('-', "_"),
        idem_codegen::cli::explain(rule)
    )
}

/// `docs/rules/README.md`: the index of rule pages.
fn rules_index() -> String {
    let mut out = format!(
        "<!-- @generated by `{BLESS}`; edit the rules, not this page -->\n\n\
         # Rules\n\n\
         `idem audit` checks every rule below; `idem rules` lists them and `idem explain RULE`\n\
         prints the page linked here. Codes are stable and never reused. A rule may be waived\n\
         for one operation or the whole document with `x-idempotency.allow`, giving the reason;\n\
         `invalid-extension` cannot be waived.\n\n\
         | Code | Rule | Severity | Summary |\n\
         | --- | --- | --- | --- |\n"
    );
    for rule in RULES {
        out.push_str(&format!(
            "| {} | [`{}`]({}.md) | {} | {} |\n",
            rule.code,
            rule.slug,
            rule.slug,
            rule.severity.as_str(),
            rule.summary.replace('|', "\\|")
        ));
    }
    out
}

#[test]
fn rule_pages_are_current() {
    let dir = Path::new("../docs/rules");
    let mut pages: Vec<(PathBuf, String)> = RULES
        .iter()
        .map(|r| (dir.join(format!("{}.md", r.slug)), rule_page(r)))
        .collect();
    pages.push((dir.join("README.md"), rules_index()));

    if std::env::var_os("IDEM_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(dir).expect("create docs/rules");
        for (path, text) in &pages {
            if std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()) {
                std::fs::write(path, text)
                    .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            }
        }
    }

    let mut stale = Vec::new();
    for (path, text) in &pages {
        if std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    let expected: BTreeSet<PathBuf> = pages.iter().map(|(p, _)| p.clone()).collect();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if !expected.contains(&path) {
            stale.push(format!(
                "{} (no rule has this page; delete it)",
                path.display()
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "rule pages are stale: {stale:#?}\nrun `{BLESS}` to regenerate them"
    );
}

/// The keyed operation the key rules' pages end with passes every rule: a
/// reader who copies it gets no finding.
#[test]
fn the_complete_keyed_operation_on_the_key_rules_pages_audits_clean() {
    const HEADING: &str = "## A complete keyed operation";
    let mut pages = 0;
    for rule in RULES.iter().filter(|r| r.docs.contains(HEADING)) {
        pages += 1;
        let section = &rule.docs[rule.docs.find(HEADING).unwrap()..];
        let yaml = section
            .split("```yaml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .unwrap_or_else(|| panic!("{}: no yaml block under {HEADING}", rule.code));
        let spec = format!(
            "openapi: 3.0.3\ninfo: {{ title: Example, version: \"1\" }}\n\
             x-idempotency: {{ failure-replay: verbatim }}\n\
             security: [{{ bearerAuth: [] }}]\n{yaml}\
             components:\n  securitySchemes:\n    bearerAuth: {{ type: http, scheme: bearer }}\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("example.yaml");
        std::fs::write(&path, &spec).unwrap();
        let document =
            Document::load(&path).unwrap_or_else(|f| panic!("{}: {}", rule.code, f.error));
        let model = model::build(document, &audit::rule_names())
            .unwrap_or_else(|f| panic!("{}: {}", rule.code, f.error));
        assert_eq!(model.operations.len(), 1, "{}", rule.code);
        assert_eq!(
            model.operations[0].class,
            model::RetryClass::Keyed,
            "{}",
            rule.code
        );
        let report = audit::audit(&model);
        assert!(
            report.diagnostics.is_empty(),
            "{}'s complete keyed operation has findings:\n{}",
            rule.code,
            output::report(&model, &report, Format::Human, false)
        );
    }
    for code in ["IDEM001", "IDEM008", "IDEM010", "IDEM013"] {
        assert!(
            Rule::find(code).unwrap().docs.contains(HEADING),
            "{code}'s page shows no complete keyed operation"
        );
    }
    assert_eq!(pages, 4);
}
