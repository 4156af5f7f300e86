#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! What the audit reads from a spec's words, measured against operations of
//! real specs labelled by hand (`tests/inference/`, whose README says how the
//! labels were made).
//!
//! `cargo test -p idem-codegen --test inference -- --nocapture` prints the
//! figures and every miss. The shared corpus is `../shared/specs`
//! (skipped, saying so, when absent); the key set reads APIs.guru's
//! directory from `IDEM_DIRECTORY_DIR` (its `api/` folder) and is skipped
//! without it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use idem_codegen::audit;
use idem_codegen::load::Document;
use idem_codegen::model::{self, Method, Model, Operation, RetryClass};
use idem_codegen::vocab::KeyRequirement;

mod corpus_support;
use corpus_support::corpus;

#[derive(serde::Deserialize)]
struct Label {
    doc: String,
    method: String,
    path: String,
    effect: Option<String>,
    key: Option<String>,
    why: String,
}

fn labels(file: &str) -> Vec<Label> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/inference")
        .join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn load(root: &Path, doc: &str) -> Model {
    let document = Document::load(&root.join(doc)).unwrap_or_else(|f| panic!("{doc}: {}", f.error));
    model::build(document, &audit::rule_names()).unwrap_or_else(|f| panic!("{doc}: {}", f.error))
}

fn find<'m>(model: &'m Model, label: &Label) -> Option<&'m Operation> {
    model
        .operations
        .iter()
        .find(|o| o.method.as_str() == label.method && o.path == label.path)
}

/// Counts of one judgement, with the operations it missed.
#[derive(Default)]
struct Tally {
    hit: usize,
    of: usize,
    misses: Vec<String>,
}

impl Tally {
    fn add(&mut self, hit: bool, what: impl FnOnce() -> String) {
        self.of += 1;
        if hit {
            self.hit += 1;
        } else {
            self.misses.push(what());
        }
    }

    fn rate(&self) -> f64 {
        if self.of == 0 {
            1.0
        } else {
            self.hit as f64 / self.of as f64
        }
    }

    fn line(&self, name: &str) -> String {
        format!(
            "{name:<52} {:>4} / {:<4} {:>6.1}%",
            self.hit,
            self.of,
            100.0 * self.rate()
        )
    }
}

fn describe(label: &Label, op: &Operation) -> String {
    let evidence = op
        .inferred_effect
        .as_ref()
        .map(|i| {
            format!(
                " [inferred {} from {}: \"{}\"]",
                i.value.as_str(),
                i.evidence.field,
                i.evidence.words
            )
        })
        .unwrap_or_default();
    format!(
        "{} {} {} ({}: {}){evidence}",
        label.doc,
        label.method,
        label.path,
        label.effect.as_deref().unwrap_or("-"),
        label.why
    )
}

/// Whether the audit reports `op` as an unkeyed unsafe write.
fn is_error(op: &Operation) -> bool {
    op.class == RetryClass::Unsafe && op.undeclared_read().is_none()
}

#[test]
fn effects_read_from_words_match_the_labelled_set() {
    let Some(root) = corpus() else { return };
    let labels = labels("labels.jsonl");
    let mut models: BTreeMap<String, Model> = BTreeMap::new();
    let mut caught = Tally::default(); // non-idempotent PUT/DELETE caught
    let mut quiet = Tally::default(); // idempotent PUT/DELETE left alone
    let mut reads = Tally::default(); // read-only POSTs no longer errors
    let mut writes = Tally::default(); // writing POSTs still errors or keyed
    let mut raised = 0usize; // inferred non-idempotent, whatever the label
    let mut raised_right = 0usize;
    let mut read_inferred = 0usize;
    let mut read_right = 0usize;
    let mut missing = Vec::new();
    for label in &labels {
        let model = models
            .entry(label.doc.clone())
            .or_insert_with(|| load(&root, &label.doc));
        let Some(op) = find(model, label) else {
            missing.push(format!("{} {} {}", label.doc, label.method, label.path));
            continue;
        };
        let inferred_repeat = op
            .inferred_effect
            .as_ref()
            .is_some_and(|i| !i.value.is_idempotent());
        let effect = label.effect.as_deref().unwrap_or("undecided");
        match (op.method, effect) {
            (Method::Put | Method::Delete, "non-idempotent") => {
                caught.add(!op.is_idempotent(), || describe(label, op));
            }
            (Method::Put | Method::Delete, "idempotent") => {
                quiet.add(!inferred_repeat, || describe(label, op));
            }
            (Method::Post, "read-only") => {
                reads.add(!is_error(op), || describe(label, op));
            }
            (Method::Post, "write") => {
                writes.add(
                    is_error(op)
                        || op.key.requirement != KeyRequirement::None
                        || op.class == RetryClass::UnsafeDocumented,
                    || describe(label, op),
                );
            }
            _ => {}
        }
        if matches!(op.method, Method::Put | Method::Delete) && inferred_repeat {
            raised += 1;
            raised_right += usize::from(effect == "non-idempotent");
        }
        if op.undeclared_read().is_some() {
            read_inferred += 1;
            read_right += usize::from(effect == "read-only");
        }
    }
    println!("labelled operations: {}", labels.len());
    println!(
        "{}",
        caught.line("non-idempotent PUT/DELETE caught (recall)")
    );
    println!("{}", quiet.line("idempotent PUT/DELETE left safe"));
    println!(
        "{}",
        reads.line("read-only POSTs no longer errors (recall)")
    );
    println!("{}", writes.line("writing POSTs still an error or keyed"));
    println!(
        "precision of PUT/DELETE raised:                       {raised_right:>4} / {raised:<4}"
    );
    println!(
        "precision of POSTs read as queries:                   {read_right:>4} / {read_inferred:<4}"
    );
    for (name, tally) in [
        ("missed non-idempotent PUT/DELETE", &caught),
        ("idempotent PUT/DELETE raised", &quiet),
        ("read-only POST still an error", &reads),
        ("writing POST read as a query", &writes),
    ] {
        for miss in &tally.misses {
            println!("{name}: {miss}");
        }
    }
    assert!(
        missing.is_empty(),
        "labelled operations not in the model: {missing:#?}"
    );
    assert!(caught.rate() >= 0.90, "{}", caught.line("caught"));
    assert!(1.0 - quiet.rate() <= 0.05, "{}", quiet.line("left safe"));
    assert!(reads.rate() >= 0.80, "{}", reads.line("reads"));
    assert!(writes.misses.is_empty(), "{:#?}", writes.misses);
}

/// The key set: operations of AWS, Google and Azure specs whose inputs'
/// descriptions mention ids, tokens, retries or tracing, each labelled with
/// the input that is its key (or none).
#[test]
fn keys_read_from_descriptions_match_the_labelled_set() {
    let Some(root) = std::env::var_os("IDEM_DIRECTORY_DIR").map(PathBuf::from) else {
        eprintln!("skipped: IDEM_DIRECTORY_DIR is not set (APIs.guru's `api/` folder)");
        return;
    };
    let labels = labels("key-labels.jsonl");
    let mut models: BTreeMap<String, Model> = BTreeMap::new();
    let (mut true_pos, mut false_pos, mut false_neg, mut true_neg) = (0, 0, 0, 0);
    let mut wrong = Vec::new();
    for label in &labels {
        let model = models
            .entry(label.doc.clone())
            .or_insert_with(|| load(&root, &label.doc));
        let Some(op) = find(model, label) else {
            panic!(
                "{} {} {} not in the model",
                label.doc, label.method, label.path
            );
        };
        let found = op
            .key
            .source
            .as_ref()
            .filter(|_| op.key.requirement != KeyRequirement::None)
            .map(|s| s.name().to_owned());
        match (&label.key, &found) {
            (Some(want), Some(got)) if want.eq_ignore_ascii_case(got) => true_pos += 1,
            (None, None) => true_neg += 1,
            (Some(_), None) => {
                false_neg += 1;
                wrong.push(format!(
                    "missed: {} {} {} ({})",
                    label.doc, label.method, label.path, label.why
                ));
            }
            (want, Some(got)) => {
                false_pos += 1;
                if want.is_some() {
                    false_neg += 1;
                }
                wrong.push(format!(
                    "took {got}: {} {} {} ({})",
                    label.doc, label.method, label.path, label.why
                ));
            }
        }
    }
    let precision = f64::from(true_pos) / f64::from((true_pos + false_pos).max(1));
    let recall = f64::from(true_pos) / f64::from((true_pos + false_neg).max(1));
    println!(
        "keys: {true_pos} found, {false_pos} wrongly taken, {false_neg} missed, {true_neg} rightly none; precision {:.1}%, recall {:.1}%",
        100.0 * precision,
        100.0 * recall
    );
    for w in &wrong {
        println!("{w}");
    }
    assert!(precision >= 0.95 && recall >= 0.90, "{wrong:#?}");
}

fn audit_as(format: &str, spec: &str) -> String {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = idem_codegen::cli::run(
        ["idem", "audit", "--format", format, spec],
        &mut out,
        &mut err,
    );
    assert_eq!(
        code,
        idem_codegen::cli::EXIT_FINDINGS,
        "{}",
        String::from_utf8_lossy(&err)
    );
    String::from_utf8(out).unwrap()
}

/// The hotel API in prose: the PUT that adds and the DELETE that refunds
/// are errors in every format, with the words and where they stand.
#[test]
fn evidence_reaches_every_format() {
    let spec = "../fixtures/hotel.yaml";
    let json: serde_json::Value = serde_json::from_str(&audit_as("json", spec)).unwrap();
    let op = |path: &str, method: &str| {
        json["operations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["path"] == path && o["method"] == method)
            .unwrap()
            .clone()
    };
    let points = op("/reservations/{id}/loyalty-points", "PUT");
    assert_eq!(points["class"], "unsafe");
    assert_eq!(points["effect"], "append");
    assert_eq!(points["effect_source"], "inferred");
    assert_eq!(
        points["effect_evidence"]["words"],
        "adds `points` to the guest's balance"
    );
    assert_eq!(
        (
            points["effect_evidence"]["line"].as_u64(),
            points["effect_evidence"]["column"].as_u64()
        ),
        (Some(93), Some(19))
    );
    let cancel = op("/reservations/{id}", "DELETE");
    assert_eq!(
        (cancel["class"].as_str(), cancel["effect"].as_str()),
        (Some("unsafe"), Some("external"))
    );
    let search = op("/reservations/search", "POST");
    assert_eq!(
        (
            search["class"].as_str(),
            search["effect"].as_str(),
            search["effect_source"].as_str()
        ),
        (Some("unsafe"), Some("read"), Some("inferred"))
    );
    assert_eq!(op("/reservations/{id}", "PUT")["effect_source"], "method");
    let diagnostic = json["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["rule"] == "unkeyed-unsafe-write" && d["method"] == "PUT")
        .unwrap();
    assert_eq!(diagnostic["evidence"]["field"], "description");
    assert!(
        diagnostic["message"]
            .as_str()
            .unwrap()
            .contains("\"adds `points` to the guest's balance\"")
    );

    let sarif: serde_json::Value = serde_json::from_str(&audit_as("sarif", spec)).unwrap();
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    let refund = results
        .iter()
        .find(|r| {
            r["message"]["text"]
                .as_str()
                .unwrap()
                .contains("refunds the deposit")
        })
        .unwrap();
    let related = &refund["relatedLocations"][0];
    assert_eq!(related["physicalLocation"]["region"]["startLine"], 82);
    assert_eq!(related["physicalLocation"]["region"]["startColumn"], 37);

    let human = audit_as("human", spec);
    assert!(
        human.contains("the words stand in its description at ../fixtures/hotel.yaml:82:37"),
        "{human}"
    );
}
