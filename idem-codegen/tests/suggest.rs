#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! `idem suggest`: the overlay it writes applies cleanly, and with it the
//! audit reports nothing the overlay addresses, on the fixtures and on
//! every root document of `../shared/specs` (skipped, saying so, when the
//! corpus is absent). What an overlay cannot reach (an operation defined in
//! another file) is listed in the overlay, and only that is left.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use idem_codegen::audit;
use idem_codegen::load::Document;
use idem_codegen::model::{self, Model};
use idem_codegen::suggest::suggest;
use idem_codegen::tree::Limits;

mod corpus_support;
use corpus_support::corpus;

/// The rules a suggestion addresses.
const ADDRESSED: &[&str] = &[
    "unkeyed-unsafe-write",
    "undeclared-read-only",
    "missing-retry-after",
    "missing-conflict-responses",
    "undecided-failure-replay",
];

fn load(spec: &Path, overlays: &[PathBuf]) -> Model {
    let document = Document::load_overlaid(spec, overlays, &Limits::default())
        .unwrap_or_else(|f| panic!("{}: {}", spec.display(), f.error));
    model::build(document, &audit::rule_names())
        .unwrap_or_else(|f| panic!("{}: {}", spec.display(), f.error))
}

/// Suggest for `spec`, apply it, and return what the addressed rules still
/// report outside what the suggestion says it could not reach.
fn left_after_suggesting(spec: &Path, dir: &Path) -> (usize, Vec<String>) {
    let before = load(spec, &[]);
    let suggestion = suggest(&before);
    let overlay = dir.join(format!(
        "{}.overlay.yaml",
        spec.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&overlay, &suggestion.text).unwrap();
    let after = load(spec, std::slice::from_ref(&overlay));
    assert!(
        after.document.warnings.is_empty(),
        "{}: the overlay does not apply cleanly: {:?}\n{}",
        spec.display(),
        after.document.warnings,
        suggestion.text
    );
    let unreachable: BTreeSet<String> = suggestion
        .unreachable
        .iter()
        .filter_map(|u| u.split(" — ").next().map(str::to_owned))
        .collect();
    let report = audit::audit(&after);
    let left = report
        .diagnostics
        .iter()
        .filter(|d| ADDRESSED.contains(&d.rule))
        .filter(|d| {
            d.operation
                .as_ref()
                .is_none_or(|o| !unreachable.contains(&format!("{} {}", o.method, o.path)))
        })
        .map(|d| format!("{}: {}", d.rule, d.message))
        .collect();
    (suggestion.actions, left)
}

#[test]
fn the_hotel_is_clean_but_for_what_needs_a_person() {
    let dir = tempfile::tempdir().unwrap();
    let spec = Path::new("../fixtures/hotel.yaml");
    let (actions, left) = left_after_suggesting(spec, dir.path());
    assert!(left.is_empty(), "{left:#?}");
    assert_eq!(actions, 6);
    let text = suggest(&load(spec, &[])).text;
    // Each inferred fact is declared under the words that decided it.
    assert!(
        text.contains("its description says \"adds `points` to the guest's balance\" (../fixtures/hotel.yaml:93:19): effect `append`"),
        "{text}"
    );
    assert!(
        text.contains("x-idempotency: { effect: append, key: required }"),
        "{text}"
    );
    assert!(text.contains("x-idempotency: { effect: read }"), "{text}");
    // The refund calls another system: that needs phases, a person's call.
    let after = load(spec, &[dir.path().join("hotel.yaml.overlay.yaml")]);
    let report = audit::audit(&after);
    assert!(
        report
            .diagnostics
            .iter()
            .any(|d| d.rule == "external-effect-without-phases"),
        "{:#?}",
        report.diagnostics
    );
}

#[test]
fn described_keys_are_declared() {
    let spec = Path::new("../fixtures/described-keys.yaml");
    let text = suggest(&load(spec, &[])).text;
    assert!(
        text.contains("x-idempotency: { key: optional, key-in: body }"),
        "{text}"
    );
    assert!(
        text.contains("x-idempotency: { key: optional, key-in: query }"),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let (_, left) = left_after_suggesting(spec, dir.path());
    assert!(left.is_empty(), "{left:#?}");
}

#[test]
fn an_existing_conflict_keeps_its_words_as_a_sentence() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("loans.yaml");
    std::fs::write(
        &spec,
        "openapi: 3.0.3\ninfo: { title: Loans, version: '1' }\npaths:\n  /loans:\n    post:\n      \
         operationId: createLoan\n      parameters:\n        - { name: Idempotency-Key, in: header, \
         schema: { type: string, maxLength: 64 } }\n      responses:\n        '201': { description: \
         Created }\n        '409': { description: Copy is not available }\n",
    )
    .unwrap();
    let text = suggest(&load(&spec, &[])).text;
    assert!(
        text.contains("Copy is not available. `idempotency_key_in_use`"),
        "{text}"
    );
}

#[test]
fn every_corpus_document_is_clean_after_its_suggestion() {
    let Some(specs) = corpus() else { return };
    let manifest = std::fs::read_to_string(specs.join("MANIFEST.tsv")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in manifest.lines().skip(1) {
        let rel = line.split('\t').next().unwrap();
        let spec = specs.join(rel);
        let sub = dir.path().join(checked.to_string());
        std::fs::create_dir_all(&sub).unwrap();
        let (_, left) = left_after_suggesting(&spec, &sub);
        if !left.is_empty() {
            failures.push(format!("{rel}: {} left, first: {}", left.len(), left[0]));
        }
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} documents");
    assert!(failures.is_empty(), "{failures:#?}");
}
