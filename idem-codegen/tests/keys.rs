#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "helpers of a test binary: a failed unwrap is a failed test"
)]
//! How an operation comes to take a key: declared with `key:`, inherited
//! from the document root's `key:`, or inferred from what the spec already
//! shows (a key header, a key-named body field); and how that is reported.

use std::path::Path;

use idem_codegen::audit;
use idem_codegen::cli::run;
use idem_codegen::load::Document;
use idem_codegen::model::{self, KeyOrigin, KeySource, Model, RetryClass};
use idem_codegen::vocab::KeyRequirement;

const HEAD: &str = "openapi: 3.0.3\ninfo: { title: t, version: '1' }\n";

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn model_of(path: &Path) -> Model {
    let document = Document::load(path).unwrap_or_else(|f| panic!("{}", f.error));
    model::build(document, &audit::rule_names()).unwrap_or_else(|f| panic!("{}", f.error))
}

fn json_of(path: &Path) -> serde_json::Value {
    let mut out = Vec::new();
    let mut err = Vec::new();
    run(
        ["idem", "audit", "--format", "json", path.to_str().unwrap()],
        &mut out,
        &mut err,
    );
    serde_json::from_slice(&out).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&err)
        )
    })
}

fn operation<'v>(v: &'v serde_json::Value, id: &str) -> &'v serde_json::Value {
    v["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["operation_id"] == id)
        .unwrap_or_else(|| panic!("no operation {id}"))
}

#[test]
fn keys_the_spec_shows_are_inferred_and_reported_as_such() {
    let v = json_of(Path::new("../fixtures/rules/unkeyed-unsafe-write.yaml"));
    for (id, key_in, name, key) in [
        (
            "createInferredPayout",
            "body",
            "idempotency_key",
            "optional",
        ),
        ("createMessage", "body", "IdempotencyKey", "optional"),
        ("createOrder", "body", "idempotencyKey", "required"),
        (
            "createPaypalOrder",
            "header",
            "PayPal-Request-Id",
            "optional",
        ),
        ("createCharge", "header", "Idempotency-Key", "required"),
    ] {
        let op = operation(&v, id);
        assert_eq!(op["class"], "keyed", "{id}");
        assert_eq!(op["key"], key, "{id}");
        assert_eq!(op["key_source"], "inferred", "{id}");
        assert_eq!(op["key_in"], key_in, "{id}");
        assert_eq!(op["key_name"], name, "{id}");
    }
    // Declared with `key-in: body`; and a trace id is no key.
    let batch = operation(&v, "createPayoutBatch");
    assert_eq!(batch["key_source"], "inferred");
    let traced = operation(&v, "createTraced");
    assert_eq!(traced["class"], "unsafe");
    assert!(traced["key_source"].is_null() && traced["key_in"].is_null());
    // `key: none` overrides the field.
    let payout = operation(&v, "createPayout");
    assert_eq!(
        (payout["class"].as_str(), payout["key"].as_str()),
        (Some("unsafe"), Some("none"))
    );

    let v = json_of(Path::new("../fixtures/rules/key-parameter-shape.yaml"));
    let declared = operation(&v, "createNote");
    assert_eq!(declared["key_source"], "declared");
}

#[test]
fn an_inferred_body_key_is_a_body_key_in_the_model() {
    let model = model_of(Path::new("../fixtures/rules/unkeyed-unsafe-write.yaml"));
    let op = model
        .operations
        .iter()
        .find(|o| o.name == "createMessage")
        .unwrap();
    assert_eq!(
        op.key.source,
        Some(KeySource::Body {
            field: "IdempotencyKey".into()
        })
    );
    assert_eq!(op.key.origin, Some(KeyOrigin::Inferred));
    let body = op.request_body.as_ref().unwrap();
    assert_eq!(body.content_types, ["application/x-www-form-urlencoded"]);
    assert_eq!(
        body.key_field("IdempotencyKey").unwrap().max_length,
        Some(64)
    );
}

const ROOT_KEY: &str = r#"x-idempotency:
  key: optional
  failure-replay: verbatim
paths:
  /charges:
    post:
      operationId: createCharge
      responses: { '201': { description: ok } }
  /charges/{id}:
    put:
      operationId: replaceCharge
      responses: { '200': { description: ok } }
    patch:
      operationId: patchCharge
      responses: { '200': { description: ok } }
  /charges/search:
    post:
      operationId: searchCharges
      x-idempotency: { effect: read }
      responses: { '200': { description: ok } }
  /refunds:
    post:
      operationId: createRefund
      x-idempotency: { key: none }
      responses: { '201': { description: ok } }
  /transfers:
    post:
      operationId: createTransfer
      parameters:
        - { name: Idempotency-Key, in: header, required: true, schema: { type: string, maxLength: 255 } }
      responses: { '201': { description: ok } }
  /payouts:
    post:
      operationId: createPayout
      x-idempotency: { key: required }
      parameters:
        - { name: Idempotency-Key, in: header, required: true, schema: { type: string, maxLength: 255 } }
      responses: { '201': { description: ok } }
"#;

#[test]
fn a_root_key_covers_every_operation_not_idempotent_by_its_effect() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write(dir.path(), "root.yaml", &format!("{HEAD}{ROOT_KEY}"));
    let model = model_of(&spec);
    let op = |name: &str| model.operations.iter().find(|o| o.name == name).unwrap();

    let charge = op("createCharge");
    assert_eq!(charge.class, RetryClass::Keyed);
    assert_eq!(charge.key.requirement, KeyRequirement::Optional);
    assert_eq!(charge.key.origin, Some(KeyOrigin::RootDefault));
    assert_eq!(
        charge.key.source,
        Some(KeySource::Header {
            name: "Idempotency-Key".into(),
            parameter: None
        })
    );
    assert_eq!(
        charge.key.declared.unwrap().pos.line,
        4,
        "at the root's `key:`"
    );
    assert_eq!(op("patchCharge").class, RetryClass::Keyed);
    // Idempotent by their effect: the root's key does not reach them.
    assert_eq!(op("replaceCharge").class, RetryClass::Safe);
    assert_eq!(op("replaceCharge").key.requirement, KeyRequirement::None);
    assert_eq!(op("searchCharges").class, RetryClass::Safe);
    // Overridden per operation.
    assert_eq!(op("createRefund").class, RetryClass::Unsafe);
    assert_eq!(op("createPayout").key.requirement, KeyRequirement::Required);
    assert_eq!(op("createPayout").key.origin, Some(KeyOrigin::Declared));

    let v = json_of(&spec);
    assert_eq!(operation(&v, "createCharge")["key_source"], "declared");
    assert_eq!(operation(&v, "createCharge")["key_name"], "Idempotency-Key");
    let messages: Vec<(u64, &str)> = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["line"].as_u64().unwrap(), d["message"].as_str().unwrap()))
        .collect();
    // No "does not declare the header" per operation: the root declares it.
    assert!(
        !messages.iter().any(|(_, m)| m.contains("does not declare")),
        "{messages:#?}"
    );
    // The root's `optional` disagrees with one operation's required header:
    // said at the parameter.
    assert!(
        messages.contains(&(
            32,
            "the document's `key: optional` but key parameter `Idempotency-Key` is required"
        )),
        "{messages:#?}"
    );
    assert_eq!(
        v["summary"]["errors"], 1,
        "only createRefund: {messages:#?}"
    );
}

#[test]
fn a_root_key_is_validated_like_the_rest_of_the_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    for (value, expected, help) in [
        (
            "none",
            "`x-idempotency.key: none` at the document root changes nothing",
            "set `key: none` on that operation",
        ),
        (
            "requird",
            "`key: requird` is not one of required, optional",
            "did you mean `required`?",
        ),
    ] {
        let spec = write(
            dir.path(),
            "bad.yaml",
            &format!("{HEAD}x-idempotency:\n  key: {value}\npaths: {{}}\n"),
        );
        let v = json_of(&spec);
        let d = &v["diagnostics"][0];
        assert_eq!(d["rule"], "invalid-extension", "{v:#}");
        assert_eq!(d["message"], expected);
        assert!(d["help"].as_str().unwrap().contains(help), "{d:#}");
        assert_eq!(
            (d["line"].as_u64(), d["column"].as_u64()),
            (Some(4), Some(8))
        );
    }
}

#[test]
fn an_operation_taking_its_extension_from_a_merged_anchor_is_keyed() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write(
        dir.path(),
        "merge.yaml",
        &format!(
            "{HEAD}x-idempotency: {{ failure-replay: verbatim }}\n\
             x-keyed: &keyed\n  x-idempotency: {{ key: required }}\n  parameters:\n    - {{ name: Idempotency-Key, in: header, required: true, schema: {{ type: string, maxLength: 255 }} }}\n\
             paths:\n  /orders:\n    post:\n      <<: *keyed\n      operationId: createOrder\n      responses: {{ '201': {{ description: ok }} }}\n\
             \x20   patch:\n      <<: *keyed\n      x-idempotency: {{ key: none, unsafe-retry: \"Each call appends.\" }}\n      operationId: patchOrder\n      responses: {{ '200': {{ description: ok }} }}\n"
        ),
    );
    let model = model_of(&spec);
    let create = model
        .operations
        .iter()
        .find(|o| o.name == "createOrder")
        .unwrap();
    assert_eq!(create.class, RetryClass::Keyed);
    assert_eq!(create.key.origin, Some(KeyOrigin::Declared));
    // The merged `key:` keeps its position in the anchor.
    assert_eq!(create.key.declared.unwrap().pos.line, 5);
    // An explicit `x-idempotency` beats the merged one.
    let patch = model
        .operations
        .iter()
        .find(|o| o.name == "patchOrder")
        .unwrap();
    assert_eq!(patch.class, RetryClass::UnsafeDocumented);
}

#[test]
fn a_key_documented_shorter_than_the_limit_is_held_to_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write(
        dir.path(),
        "loans.yaml",
        "openapi: 3.0.3\ninfo: { title: Loans, version: '1' }\npaths:\n  /loans:\n    post:\n      \
         operationId: createLoan\n      parameters:\n        - { name: Idempotency-Key, in: header, \
         schema: { type: string, maxLength: 64 } }\n      responses: { '201': { description: ok } }\n  \
         /holds:\n    post:\n      operationId: createHold\n      parameters:\n        - { name: \
         Idempotency-Key, in: header, schema: { type: string, maxLength: 1000 } }\n      \
         responses: { '201': { description: ok } }\n",
    );
    let model = model_of(&spec);
    let limit = |name: &str| {
        model
            .operations
            .iter()
            .find(|o| o.name == name)
            .unwrap()
            .settings
            .key_max_length
    };
    // The spec's 64 is what the server, client and docs page hold to; a
    // longer one than the server accepts stays the server's 255 (and the
    // audit says so).
    assert_eq!(limit("createLoan"), 64);
    assert_eq!(limit("createHold"), 255);
}
