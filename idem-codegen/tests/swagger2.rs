#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "helpers of a test binary: a failed unwrap is a failed test"
)]
//! Swagger 2.0 documents are read into the OpenAPI 3.0 shape at load time
//! (`fixtures/swagger2/api.yaml`, with definitions and a parameter in other
//! files), every node keeping its position; the model, and so the audit and
//! every generator, sees 3.0 only.

use std::path::Path;

use idem_codegen::audit;
use idem_codegen::cli::{EXIT_ERROR, run};
use idem_codegen::load::{Document, Version};
use idem_codegen::model::{self, KeySource, RetryClass};
use idem_codegen::tree::Node;

const SPEC: &str = "../fixtures/swagger2/api.yaml";

fn load() -> Document {
    Document::load(Path::new(SPEC)).unwrap_or_else(|f| panic!("{}", f.error))
}

/// Follow mapping keys and sequence indices from `node`.
fn at<'n>(node: &'n Node, path: &[&str]) -> &'n Node {
    path.iter()
        .try_fold(node, |n, step| {
            n.get(step).or_else(|| {
                let i = step.parse::<usize>().ok()?;
                n.as_seq()?.get(i)
            })
        })
        .unwrap_or_else(|| panic!("no {path:?}"))
}

fn text<'n>(node: &'n Node, path: &[&str]) -> &'n str {
    at(node, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path:?} is not a string"))
}

#[test]
fn the_document_is_reported_as_2_0_and_shaped_as_3_0() {
    let doc = load();
    assert_eq!(doc.version, Version::V2_0);
    assert_eq!(doc.version_text, "2.0");
    let root = doc.root();
    assert_eq!(text(root, &["openapi"]), "3.0.3");
    for gone in [
        "swagger",
        "definitions",
        "parameters",
        "responses",
        "consumes",
        "produces",
    ] {
        assert!(root.get(gone).is_none(), "`{gone}` is still at the root");
    }
    assert_eq!(
        text(root, &["servers", "0", "url"]),
        "https://api.example.com/v1"
    );
    let components = at(root, &["components"]);
    assert!(
        components
            .get("schemas")
            .and_then(|s| s.get("NewEntry"))
            .is_some()
    );
    assert_eq!(
        text(components, &["schemas", "NewEntry", "allOf", "0", "$ref"]),
        "defs/schemas.yaml#/components/schemas/Entry"
    );
    let key = at(components, &["parameters", "Key"]);
    assert_eq!(text(key, &["schema", "type"]), "string");
    assert!(key.get("type").is_none());
    // The parameter keeps its place: line 30 of the 2.0 file.
    assert_eq!((key.pos.line, key.pos.column), (30, 5));
    assert!(
        components
            .get("responses")
            .and_then(|r| r.get("Conflict"))
            .is_some()
    );

    let schemes = at(components, &["securitySchemes"]);
    assert_eq!(text(schemes, &["basic", "type"]), "http");
    assert_eq!(text(schemes, &["basic", "scheme"]), "basic");
    assert_eq!(text(schemes, &["token", "in"]), "header");
    assert_eq!(
        text(
            schemes,
            &["oauth", "flows", "authorizationCode", "tokenUrl"]
        ),
        "https://example.com/token"
    );
    assert!(schemes.get("oauth").and_then(|o| o.get("flow")).is_none());
}

#[test]
fn bodies_parameters_and_responses_are_converted_in_place() {
    let doc = load();
    let root = doc.root();
    let entries = at(root, &["paths", "/entries"]);

    // A body parameter becomes the request body, under the root's consumes.
    let create = at(entries, &["post"]);
    assert_eq!(
        text(create, &["parameters", "0", "$ref"]),
        "#/components/parameters/Key"
    );
    assert_eq!(
        create
            .get("parameters")
            .and_then(Node::as_seq)
            .map(<[Node]>::len),
        Some(1)
    );
    let body = at(create, &["requestBody"]);
    assert_eq!(body.pos.line, 64, "at the body parameter");
    assert_eq!(at(body, &["required"]).as_bool(), Some(true));
    assert_eq!(
        text(body, &["content", "application/json", "schema", "$ref"]),
        "#/components/schemas/NewEntry"
    );
    assert_eq!(
        text(create, &["responses", "409", "$ref"]),
        "#/components/responses/Conflict"
    );

    // A response schema goes under the produces; header types under schema.
    let list = at(entries, &["get"]);
    let ok = at(list, &["responses", "200"]);
    assert_eq!(
        text(ok, &["content", "application/json", "schema", "type"]),
        "array"
    );
    assert_eq!(
        text(
            ok,
            &["content", "application/json", "schema", "items", "$ref"]
        ),
        "defs/schemas.yaml#/components/schemas/Entry"
    );
    assert_eq!(
        text(ok, &["headers", "X-Rate-Limit", "schema", "type"]),
        "integer"
    );
    // A parameter from another file is inlined, converted, and still
    // points into that file.
    let cursor = at(list, &["parameters", "1"]);
    assert_eq!(text(cursor, &["name"]), "cursor");
    assert_eq!(
        at(cursor, &["schema", "maxLength"])
            .scalar_text()
            .as_deref(),
        Some("64")
    );
    assert!(
        doc.sources
            .display(cursor.pos.file)
            .ends_with("defs/params.yaml")
    );
    assert_eq!(cursor.pos.line, 2);

    // Form parameters become an object schema, form-encoded…
    let transfer = at(root, &["paths", "/transfers", "post"]);
    let form = at(
        transfer,
        &[
            "requestBody",
            "content",
            "application/x-www-form-urlencoded",
            "schema",
        ],
    );
    assert_eq!(text(form, &["type"]), "object");
    assert_eq!(
        text(form, &["properties", "IdempotencyKey", "type"]),
        "string"
    );
    assert_eq!(text(form, &["required", "0"]), "Amount");
    assert!(transfer.get("consumes").is_none());
    // … or multipart with a file, which is binary.
    let upload = at(root, &["paths", "/receipts", "post"]);
    let file = at(
        upload,
        &[
            "requestBody",
            "content",
            "multipart/form-data",
            "schema",
            "properties",
            "file",
        ],
    );
    assert_eq!(
        (text(file, &["type"]), text(file, &["format"])),
        ("string", "binary")
    );
}

#[test]
fn other_files_follow() {
    let doc = load();
    let list = at(doc.root(), &["paths", "/entries", "get"]);
    let items = at(
        list,
        &[
            "responses",
            "200",
            "content",
            "application/json",
            "schema",
            "items",
        ],
    );
    let entry = doc.resolve(items).unwrap();
    assert!(
        doc.sources
            .display(entry.pos.file)
            .ends_with("defs/schemas.yaml")
    );
    assert_eq!(
        at(entry, &["properties", "memo", "nullable"]).as_bool(),
        Some(true)
    );
    assert_eq!(
        text(entry, &["properties", "parent", "$ref"]),
        "#/components/schemas/Entry"
    );
    // The rewritten self-reference resolves.
    let parent = doc.resolve(at(entry, &["properties", "parent"])).unwrap();
    assert_eq!(parent.pos, entry.pos);
}

#[test]
fn the_model_is_built_from_the_converted_tree() {
    let model =
        model::build(load(), &audit::rule_names()).unwrap_or_else(|f| panic!("{}", f.error));
    let op = |name: &str| model.operations.iter().find(|o| o.name == name).unwrap();
    let create = op("createEntry");
    assert_eq!(create.class, RetryClass::Keyed);
    assert_eq!(create.pos.line, 60);
    let body = create.request_body.as_ref().unwrap();
    assert_eq!(body.content_types, ["application/json"]);
    // The body's key field, through `allOf` and a `$ref` into another file.
    assert!(body.properties.contains(&"amount".to_owned()));
    let field = body.key_field("idempotency_key").unwrap();
    assert!(field.required);
    assert_eq!(field.max_length, Some(45));
    let header = &create.parameters[0];
    assert_eq!(
        (header.name.as_str(), header.max_length),
        ("Idempotency-Key", Some(255))
    );
    assert_eq!(header.pos.line, 30);

    let transfer = op("createTransfer");
    assert_eq!(
        transfer.key.source,
        Some(KeySource::Body {
            field: "IdempotencyKey".into()
        })
    );
    assert_eq!(op("uploadReceipt").class, RetryClass::UnsafeDocumented);
    let list = op("listEntries");
    assert_eq!(list.responses[0].headers, ["X-Rate-Limit"]);
    assert_eq!(list.parameters.len(), 2);
}

#[test]
fn findings_point_into_the_2_0_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("defs")).unwrap();
    for file in ["defs/schemas.yaml", "defs/params.yaml"] {
        std::fs::copy(
            Path::new("../fixtures/swagger2").join(file),
            dir.path().join(file),
        )
        .unwrap();
    }
    let text = std::fs::read_to_string(SPEC)
        .unwrap()
        .replace("    maxLength: 255\n", "");
    let spec = dir.path().join("api.yaml");
    std::fs::write(&spec, text).unwrap();
    let mut out = Vec::new();
    let mut err = Vec::new();
    run(
        ["idem", "audit", spec.to_str().unwrap()],
        &mut out,
        &mut err,
    );
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("key parameter `Idempotency-Key` has no `maxLength`"),
        "{out}"
    );
    assert!(out.contains("api.yaml:30:5"), "{out}");
    let mut json = Vec::new();
    run(
        ["idem", "audit", "--format", "json", spec.to_str().unwrap()],
        &mut json,
        &mut Vec::new(),
    );
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(v["version"], "2.0");
}

#[test]
fn other_versions_are_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text, expected) in [
        (
            "v12.json",
            "{\"swaggerVersion\": \"1.2\"}",
            "unsupported version: Swagger `1.2`",
        ),
        (
            "v3.json",
            "{\"swagger\": \"3.0\"}",
            "unsupported version: Swagger `3.0`",
        ),
        (
            "v4.yaml",
            "openapi: 4.0.0\n",
            "unsupported version: OpenAPI `4.0.0`",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let mut out = Vec::new();
        let mut err = Vec::new();
        let code = run(
            ["idem", "audit", path.to_str().unwrap()],
            &mut out,
            &mut err,
        );
        let err = String::from_utf8(err).unwrap();
        assert_eq!(code, EXIT_ERROR, "{name}");
        assert!(err.contains(expected), "{name}: {err}");
        assert!(err.contains(&format!("{name}:1:")), "{name}: {err}");
    }
}
