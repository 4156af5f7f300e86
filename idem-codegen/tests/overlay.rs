#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! OpenAPI Overlay 1.0 at load time: each action kind, where the facts it
//! adds point, what Swagger 2.0 targets see, and every bad overlay refused
//! at its `file:line:column` with exit 2.

use std::path::{Path, PathBuf};

use idem_codegen::cli::{EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS};

mod cli_support;
use cli_support::idem;
use idem_codegen::load::{Document, LoadError};
use idem_codegen::tree::{Limits, Node};

fn fixture(name: &str) -> PathBuf {
    Path::new("../fixtures").join(name)
}

fn overlaid(spec: &Path, overlays: &[PathBuf]) -> Document {
    Document::load_overlaid(spec, overlays, &Limits::default())
        .unwrap_or_else(|f| panic!("{}", f.error))
}

/// An overlay written to a file of its own, for the error cases.
fn overlay_file(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn load_error(overlay: &Path) -> (LoadError, String, u32, u32) {
    let failure = Document::load_overlaid(
        &fixture("cratebase.yaml"),
        &[overlay.to_path_buf()],
        &Limits::default(),
    )
    .expect_err("the overlay is refused");
    let pos = failure.error.pos().expect("the error has a position");
    let file = failure.sources.display(pos.file).to_owned();
    (failure.error, file, pos.line, pos.column)
}

fn op<'a>(document: &'a Document, path: &str, method: &str) -> Option<&'a Node> {
    document.root().get("paths")?.get(path)?.get(method)
}

#[test]
fn update_merges_remove_deletes_and_filters_select() {
    let document = overlaid(
        &fixture("cratebase.yaml"),
        &[fixture("overlays/cratebase.yaml")],
    );
    assert!(document.warnings.is_empty(), "{:?}", document.warnings);

    // Update of a mapping: a new property is added with its position in
    // the overlay file.
    let refund = op(&document, "/v2/refunds", "post").unwrap();
    let parameters = refund.get("parameters").unwrap().as_seq().unwrap();
    assert_eq!(parameters.len(), 1);
    let shown = document.sources.display(parameters[0].pos.file);
    assert!(shown.ends_with("overlays/cratebase.yaml"), "{shown}");
    assert_eq!(parameters[0].pos.line, 11);
    // A nested mapping is merged, not replaced: `201` stays beside `409`.
    let responses = refund.get("responses").unwrap();
    assert!(responses.get("201").is_some() && responses.get("409").is_some());
    // The `$ref` written in the overlay resolves in the spec.
    let resolved = document.resolve(&parameters[0]).unwrap();
    assert_eq!(
        resolved.get("name").and_then(Node::as_str),
        Some("Idempotency-Key")
    );

    // Remove.
    assert!(
        document
            .root()
            .get("paths")
            .unwrap()
            .get("/v2/orders/{id}/notes")
            .is_none()
    );

    // A filter selects by content; the update merges into the extension
    // that is already there.
    let redeem = op(&document, "/v2/credits/{id}", "delete").unwrap();
    let extension = redeem.get("x-idempotency").unwrap();
    assert_eq!(
        extension.get("effect").and_then(Node::as_str),
        Some("decrement")
    );
    assert!(extension.get("unsafe-retry").is_some());
}

#[test]
fn the_audit_sees_the_overlaid_document() {
    let before = idem(&["audit", "--format", "json", "../fixtures/cratebase.yaml"]);
    assert_eq!(before.code, EXIT_FINDINGS);
    let after = idem(&[
        "audit",
        "--format",
        "json",
        "../fixtures/cratebase.yaml",
        "--overlay",
        "../fixtures/overlays/cratebase.yaml",
    ]);
    assert_eq!(after.code, EXIT_CLEAN, "{}{}", after.stdout, after.stderr);
    let count = |text: &str| {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        (
            v["summary"]["errors"].as_u64().unwrap(),
            v["operations"].as_array().unwrap().len(),
        )
    };
    assert_eq!(count(&before.stdout), (3, 5));
    // The notes endpoint is gone; the refunds and credits errors are fixed.
    assert_eq!(count(&after.stdout), (0, 4));
}

#[test]
fn a_finding_from_an_update_points_into_the_overlay() {
    let o = idem(&[
        "audit",
        "--format",
        "json",
        "../fixtures/cratebase.yaml",
        "--overlay",
        "../fixtures/overlays/scope-global.yaml",
    ]);
    assert_eq!(o.code, EXIT_FINDINGS);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let diags = v["diagnostics"].as_array().unwrap();
    let global = diags
        .iter()
        .find(|d| d["rule"] == "global-key-scope")
        .unwrap();
    assert_eq!(global["file"], "../fixtures/overlays/scope-global.yaml");
    assert_eq!(
        (global["line"].as_u64(), global["column"].as_u64()),
        (Some(6), Some(14))
    );
    // Findings about what the spec says still point into the spec.
    let unkeyed = diags
        .iter()
        .find(|d| d["rule"] == "unkeyed-unsafe-write")
        .unwrap();
    assert_eq!(unkeyed["file"], "../fixtures/cratebase.yaml");
}

#[test]
fn overlays_apply_in_order_and_see_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let first = overlay_file(
        &dir,
        "first.yaml",
        "overlay: 1.0.0\ninfo: { title: t, version: '1' }\nactions:\n  - target: $.paths['/v2/refunds'].post\n    update: { x-marker: { n: 1 } }\n",
    );
    let second = overlay_file(
        &dir,
        "second.yaml",
        "overlay: 1.0.1\ninfo: { title: t, version: '1' }\nactions:\n  - target: $.paths[*][?@['x-marker'].n == 1]\n    update: { x-marker: { seen: true } }\n",
    );
    let document = overlaid(&fixture("cratebase.yaml"), &[first, second]);
    let marker = op(&document, "/v2/refunds", "post")
        .unwrap()
        .get("x-marker")
        .unwrap();
    assert!(marker.get("n").is_some());
    assert_eq!(marker.get("seen").and_then(Node::as_bool), Some(true));
}

#[test]
fn update_of_a_sequence_appends_and_remove_takes_every_match() {
    let dir = tempfile::tempdir().unwrap();
    let overlay = overlay_file(
        &dir,
        "o.yaml",
        r#"overlay: 1.0.0
info: { title: t, version: "1" }
actions:
  - target: $.paths['/v2/orders'].post.parameters
    update: { name: X-Trace, in: header, schema: { type: string } }
  - target: $.paths['/v2/orders'].post.parameters
    update: { name: X-Other, in: header, schema: { type: string } }
  - target: $.paths['/v2/orders'].post.parameters[?@.in == 'header' && @.name != 'X-Other']
    remove: true
"#,
    );
    let document = overlaid(&fixture("cratebase.yaml"), &[overlay]);
    let parameters = op(&document, "/v2/orders", "post")
        .unwrap()
        .get("parameters")
        .unwrap()
        .as_seq()
        .unwrap();
    // The `$ref`'d key parameter is not a header until resolved, so it stays;
    // of the two appended, the filter removes X-Trace only.
    let names: Vec<String> = parameters
        .iter()
        .map(|p| {
            p.get("name")
                .and_then(Node::as_str)
                .map_or_else(|| "$ref".to_owned(), str::to_owned)
        })
        .collect();
    assert_eq!(names, ["$ref", "X-Other"]);
}

#[test]
fn swagger2_targets_see_the_document_as_written() {
    let o = idem(&[
        "audit",
        "--format",
        "json",
        "../fixtures/swagger2/api.yaml",
        "--overlay",
        "../fixtures/overlays/swagger2.yaml",
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let receipts = v["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["path"] == "/receipts")
        .unwrap();
    // `#/parameters/Key` exists only in the 2.0 shape, and it made the
    // operation keyed.
    assert_eq!(receipts["class"], "keyed");
    // The 3.0 shape (`components`) is not what targets see.
    assert!(
        o.stderr.contains(
            "warning: overlay target `$.components.schemas` selects nothing in the document"
        ),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("fixtures/overlays/swagger2.yaml:10:13"));
}

#[test]
fn a_target_that_selects_nothing_is_a_warning_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let overlay = overlay_file(
        &dir,
        "drift.yaml",
        "overlay: 1.0.0\ninfo: { title: t, version: '1' }\nactions:\n  - target: $.paths['/v1/gone'].post\n    update: { x-idempotency: { key: optional } }\n",
    );
    let document = overlaid(&fixture("cratebase.yaml"), std::slice::from_ref(&overlay));
    assert_eq!(document.warnings.len(), 1);
    let w = &document.warnings[0];
    assert_eq!((w.pos.line, w.pos.column), (4, 13));
    assert!(w.message.contains("selects nothing"), "{}", w.message);

    // On the command line it is printed, and the run goes on.
    let o = idem(&[
        "audit",
        "../fixtures/payments-clean.yaml",
        "--overlay",
        overlay.to_str().unwrap(),
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    assert!(o.stderr.contains("drift.yaml:4:13"), "{}", o.stderr);
}

#[test]
fn bad_overlays_are_refused_at_their_position() {
    let dir = tempfile::tempdir().unwrap();
    let header = "overlay: 1.0.0\ninfo: { title: t, version: '1' }\nactions:\n";
    let cases: &[(&str, String, (u32, u32), &str)] = &[
        (
            "version.yaml",
            "overlay: 2.0.0\ninfo: { title: t, version: '1' }\nactions: []\n".into(),
            (1, 10),
            "unsupported overlay version `2.0.0`",
        ),
        (
            "not-overlay.yaml",
            "openapi: 3.1.0\ninfo: { title: t, version: '1' }\n".into(),
            (1, 1),
            "it has no `overlay` field",
        ),
        (
            "jsonpath.yaml",
            format!("{header}  - target: \"$.paths[?@.x ==]\"\n    remove: true\n"),
            (4, 27),
            "is not a valid JSONPath query",
        ),
        (
            "update-type.yaml",
            format!("{header}  - target: $.paths\n    update: [1, 2]\n"),
            (5, 13),
            "its `update` must be a mapping, not a sequence",
        ),
        (
            "scalar-target.yaml",
            format!("{header}  - target: $.info.title\n    update: {{ a: 1 }}\n"),
            (4, 13),
            "Overlay 1.0 updates mappings and sequences only",
        ),
        (
            "no-target.yaml",
            format!("{header}  - update: {{ a: 1 }}\n"),
            (4, 5),
            "needs a `target`",
        ),
        (
            "remove-root.yaml",
            format!("{header}  - target: $\n    remove: true\n"),
            (4, 13),
            "cannot remove the document's root",
        ),
        (
            "typo.yaml",
            format!("{header}  - target: $.paths\n    updates: {{ a: 1 }}\n"),
            (5, 5),
            "unknown action field `updates`",
        ),
        (
            "remove-flag.yaml",
            format!("{header}  - target: $.paths\n    remove: yes please\n"),
            (5, 13),
            "`remove` is true or false, not a string",
        ),
        (
            "empty-actions.yaml",
            "overlay: 1.0.0\ninfo: { title: t, version: '1' }\nactions: []\n".into(),
            (3, 10),
            "not an empty list",
        ),
        (
            "no-info.yaml",
            "overlay: 1.0.0\nactions:\n  - { target: $, remove: true }\n".into(),
            (1, 1),
            "needs `info`",
        ),
        (
            "broken.yaml",
            format!("{header}  - target: [unclosed\n"),
            (5, 1),
            "",
        ),
    ];
    for (name, text, (line, column), expected) in cases {
        let path = overlay_file(&dir, name, text);
        let (error, file, l, c) = load_error(&path);
        assert!(file.ends_with(name), "{name}: error in {file}");
        assert!(error.to_string().contains(expected), "{name}: {error}");
        assert_eq!((l, c), (*line, *column), "{name}: {error}");

        // The command line says `file:line:column` and exits 2.
        let o = idem(&[
            "audit",
            "../fixtures/cratebase.yaml",
            "--overlay",
            path.to_str().unwrap(),
        ]);
        assert_eq!(o.code, EXIT_ERROR, "{name}");
        assert!(
            o.stderr.contains(&format!("{name}:{line}:{column}")),
            "{name}: {}",
            o.stderr
        );
    }

    // A missing overlay file is a read error naming it.
    let o = idem(&[
        "audit",
        "../fixtures/cratebase.yaml",
        "--overlay",
        "../fixtures/overlays/none.yaml",
    ]);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("none.yaml"), "{}", o.stderr);
}

#[test]
fn generate_and_docs_take_overlays_too() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("crate");
    let o = idem(&[
        "generate",
        "../fixtures/cratebase.yaml",
        "--overlay",
        "../fixtures/overlays/cratebase.yaml",
        "--client",
        "--out",
        out.to_str().unwrap(),
    ]);
    // Without the overlay the audit's errors stop generation.
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    let lib = std::fs::read_to_string(out.join("src/lib.rs")).unwrap();
    assert!(
        !lib.contains("add_order_note"),
        "the removed endpoint is gone"
    );

    let docs = dir.path().join("docs");
    let o = idem(&[
        "docs",
        "../fixtures/cratebase.yaml",
        "--overlay",
        "../fixtures/overlays/cratebase.yaml",
        "--out",
        docs.to_str().unwrap(),
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    let page = std::fs::read_to_string(docs.join("idempotency.md")).unwrap();
    assert!(page.contains("/v2/refunds"));
    assert!(!page.contains("/v2/orders/{id}/notes"));
}

#[test]
fn build_config_applies_overlays() {
    let dir = tempfile::tempdir().unwrap();
    let refused = idem_codegen::build::Config::new()
        .out_dir(dir.path())
        .compile("../fixtures/cratebase.yaml");
    assert!(
        matches!(
            refused,
            Err(idem_codegen::build::BuildError::Findings { errors: 3, .. })
        ),
        "{refused:?}"
    );
    idem_codegen::build::Config::new()
        .out_dir(dir.path())
        .overlay("../fixtures/overlays/cratebase.yaml")
        .overlay("../fixtures/overlays/drift.yaml")
        .compile("../fixtures/cratebase.yaml")
        .unwrap();
    let code = std::fs::read_to_string(dir.path().join("idem_api.rs")).unwrap();
    assert!(code.contains("POST /v2/refunds"));
    assert!(!code.contains("/v2/orders/{id}/notes"));
}

#[test]
fn probe_plans_the_overlaid_document() {
    let args = |overlay: bool| {
        let mut args = vec![
            "probe",
            "../fixtures/cratebase.yaml",
            "--base-url",
            "http://127.0.0.1:9",
            "--dry-run",
        ];
        if overlay {
            args.extend(["--overlay", "../fixtures/overlays/cratebase.yaml"]);
        }
        idem(&args)
    };
    let plain = args(false);
    assert!(!plain.stdout.contains("createRefund (POST /v2/refunds)"));
    let overlaid = args(true);
    assert_eq!(overlaid.code, EXIT_CLEAN, "{}", overlaid.stderr);
    // The overlay gave refunds a key: the probe now checks it.
    assert!(
        overlaid
            .stdout
            .contains("createRefund (POST /v2/refunds): 47 requests"),
        "{}",
        overlaid.stdout
    );
}

/// `x-pagination` from an overlay: paging turned off where the spec's shape
/// says it pages, and named where it does not.
#[test]
fn an_overlay_names_or_disables_how_a_list_pages() {
    let dir = tempfile::tempdir().unwrap();
    let overlay = overlay_file(
        &dir,
        "paging.yaml",
        "overlay: 1.0.0\ninfo: { title: paging, version: '1' }\nactions:\n\
         \x20 - target: $.paths['/customers'].get\n    update:\n      x-pagination: false\n\
         \x20 - target: $.paths['/repos'].get\n    update:\n      x-pagination: { style: offset, param: page }\n",
    );
    let out = dir.path().join("client");
    let o = idem(&[
        "generate",
        "../fixtures/streams.yaml",
        "--overlay",
        overlay.to_str().unwrap(),
        "--client",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}{}", o.stdout, o.stderr);
    let code = std::fs::read_to_string(out.join("src/lib.rs")).unwrap();
    assert!(
        !code.contains(".paged::<Customer>"),
        "paging is off for /customers"
    );
    assert!(code.contains(".paged::<Event>"), "the others still page");
    assert!(
        code.contains("How `GET /repos` pages: `page` advances by each page's item count."),
        "the overlay's style replaces the Link header's"
    );
}
