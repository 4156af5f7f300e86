#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The generated client of every fixture, snapshotted (the `idem-e2e` crate
//! compiles the same code with warnings denied and runs it), plus what
//! generation promises for any input: deterministic output, the
//! `@generated` header, and no panic on the corpus.

use std::path::Path;

use idem_codegen::generate::{Options, crate_root, generate};
use idem_codegen::load::Document;
use idem_codegen::model::{self, Model};

mod corpus_support;
use corpus_support::corpus;

fn model(path: &Path) -> Model {
    let document = Document::load(path)
        .unwrap_or_else(|f| panic!("{}: cannot load: {}", path.display(), f.error));
    model::build(document, &idem_codegen::audit::rule_names())
        .unwrap_or_else(|f| panic!("{}: cannot model: {}", path.display(), f.error))
}

fn client(path: &Path) -> String {
    let model = model(path);
    let options = Options {
        client: true,
        server: false,
        feature_groups: false,
    };
    crate_root(&generate(&model, &options).unwrap(), &model.title)
}

fn server(path: &Path) -> String {
    let model = model(path);
    let options = Options {
        client: false,
        server: true,
        feature_groups: false,
    };
    crate_root(&generate(&model, &options).unwrap(), &model.title)
}

#[test]
fn fixture_clients_match_their_snapshots() {
    for name in ["shop", "payments-clean", "cratebase", "hostile-names"] {
        let code = client(&Path::new("../fixtures").join(format!("{name}.yaml")));
        insta::assert_snapshot!(format!("client__{name}"), code);
    }
}

/// A whole-API crate gated by its resource groups: each group's code behind
/// its feature, each type behind the groups that reach it (`Money`, which
/// every group reaches, is not gated; `Unused` is behind `full`).
#[test]
fn resource_groups_gate_the_whole_client() {
    let model = model(Path::new("../fixtures/tagged.yaml"));
    let options = Options {
        client: true,
        server: false,
        feature_groups: true,
    };
    let generated = generate(&model, &options).unwrap();
    assert_eq!(generated.cargo_features, ["catalog", "customers", "orders"]);
    insta::assert_snapshot!(
        "client__tagged_feature_groups",
        crate_root(&generated, &model.title)
    );
    // With the server, every type is named by its `Api` trait: not gated.
    let both = generate(
        &model,
        &Options {
            client: true,
            server: true,
            feature_groups: true,
        },
    )
    .unwrap();
    assert!(both.cargo_features.is_empty());
    assert!(!both.items.contains("#[cfg(feature"));
}

/// Part of an API: the operations of one tag, and only the schemas they
/// reach (`Customer`, `Product` and `Unused` are left out).
#[test]
fn a_tag_filter_prunes_what_is_generated() {
    let mut model = model(Path::new("../fixtures/tagged.yaml"));
    model::Selection::tags(["orders"])
        .narrow(&mut model)
        .unwrap();
    let options = Options {
        client: true,
        server: true,
        feature_groups: false,
    };
    let code = crate_root(&generate(&model, &options).unwrap(), &model.title);
    for absent in [
        "struct Customer",
        "struct Product",
        "struct Unused",
        "get_customer",
    ] {
        assert!(!code.contains(absent), "{absent}");
    }
    for present in [
        "struct Order ",
        "struct Money",
        "enum OrderStatus",
        "struct Problem",
    ] {
        assert!(code.contains(present), "{present}");
    }
    insta::assert_snapshot!("client_and_server__tagged_orders", code);

    // A name the spec does not have is refused with the closest it has.
    let mut model = self::model(Path::new("../fixtures/tagged.yaml"));
    let error = model::Selection::tags(["order"])
        .narrow(&mut model)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "no tag `order` in the spec; did you mean `orders`?"
    );
    let error = model::Selection::operations(["getCustomr", "/prodcts"])
        .narrow(&mut model)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "no operation `getCustomr` in the spec; did you mean `getCustomer`?"
    );
    let error = model::Selection::operations(["/prodcts"])
        .narrow(&mut model)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "no path starts with `/prodcts`; did you mean `/products`?"
    );
    // A path prefix and an operationId choose together.
    model::Selection::operations(["/products", "getOrder"])
        .narrow(&mut model)
        .unwrap();
    let ids: Vec<_> = model
        .operations
        .iter()
        .filter_map(|op| op.operation_id.as_deref())
        .collect();
    assert_eq!(ids, ["getOrder", "listProducts"]);
}

#[test]
fn repeated_inline_shapes_are_one_type() {
    // `contact` and `backup_contact` of `NewOrder` are the same inline
    // object, with the same inline enum: one struct and one enum, the first
    // by name, and an alias for the other of each.
    let code = client(Path::new("../fixtures/constraints.yaml"));
    assert!(
        code.contains("pub struct NewOrderBackupContact {"),
        "{code}"
    );
    assert!(code.contains("pub enum NewOrderBackupContactChannel {"));
    assert!(code.contains("pub type NewOrderContact = NewOrderBackupContact;"));
    assert!(code.contains("pub type NewOrderContactChannel = NewOrderBackupContactChannel;"));
    assert!(!code.contains("pub struct NewOrderContact "));
    assert!(!code.contains("pub enum NewOrderContactChannel "));
}

#[test]
fn error_enums_alike_in_statuses_are_never_numbered() {
    // Two pairs of operations answer 404 alike within the pair and in other
    // words across: the first pair's enum is named after its statuses, the
    // second after its first operation, and neither name is numbered.
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("api.yaml");
    let op = |id: &str, words: &str| {
        format!(
            "      operationId: {id}\n      responses:\n        '200':\n          description: ok\n        \
             '404':\n          description: {words}\n"
        )
    };
    let text = format!(
        "openapi: 3.0.3\ninfo:\n  title: t\n  version: '1'\npaths:\n  /orders/{{id}}:\n    \
         parameters:\n      - {{name: id, in: path, required: true, schema: {{type: string}}}}\n    \
         get:\n{}    delete:\n{}  /products/{{id}}:\n    parameters:\n      - {{name: id, in: \
         path, required: true, schema: {{type: string}}}}\n    get:\n{}    delete:\n{}",
        op("getOrder", "No such order"),
        op("deleteOrder", "No such order"),
        op("getProduct", "No such product"),
        op("deleteProduct", "No such product"),
    );
    std::fs::write(&spec, text).unwrap();
    let code = client(&spec);
    assert!(code.contains("pub enum NotFoundError {"), "{code}");
    assert!(
        code.contains("pub type DeleteOrderError = NotFoundError;"),
        "{code}"
    );
    assert!(code.contains("pub enum GetProductError {"), "{code}");
    assert!(
        code.contains("pub type DeleteProductError = GetProductError;"),
        "{code}"
    );
    assert!(!code.contains("NotFoundError2"), "{code}");
}

#[test]
fn fixture_servers_match_their_snapshots() {
    for name in [
        "shop",
        "payments",
        "payments-clean",
        "cratebase",
        "hostile-names",
    ] {
        let code = server(&Path::new("../fixtures").join(format!("{name}.yaml")));
        insta::assert_snapshot!(format!("server__{name}"), code);
    }
}

/// The minimal cases of what real specs broke: client and server of each
/// (`idem-e2e` compiles the same code with warnings denied).
#[test]
fn directory_fixtures_match_their_snapshots() {
    let mut files: Vec<_> = std::fs::read_dir("../fixtures/directory")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for file in files {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let model = model(&file);
        let options = Options {
            client: true,
            server: true,
            feature_groups: false,
        };
        let code = crate_root(&generate(&model, &options).unwrap(), &model.title);
        insta::assert_snapshot!(format!("directory__{name}"), code);
    }
}

#[test]
fn generation_is_deterministic_and_marked_generated() {
    let path = Path::new("../fixtures/hostile-names.yaml");
    let first = client(path);
    assert_eq!(first, client(path));
    assert!(first.starts_with("// @generated by idem"));
    assert!(first.contains("#![allow(dead_code, reason = "));
}

#[test]
fn hostile_text_stays_inside_doc_strings() {
    let code = client(Path::new("../fixtures/hostile-names.yaml"));
    // The description's fence is marked `text`, so rustdoc never runs it.
    assert!(code.contains("```text"), "fences are re-marked");
    assert!(!code.contains("```rust"));
    // Keywords and collisions come out as valid, distinct identifiers.
    for ident in [
        "pub r#type:",
        "pub self_:",
        "pub r#match:",
        "pub _1st:",
        "pub struct ClientSchema",
        "pub fn new_api(",
    ] {
        assert!(code.contains(ident), "missing {ident}");
    }
    // Recursion through a direct field is boxed; through a list it is not.
    // The spec names a schema `Option`: std's stays written in full.
    assert!(code.contains("pub parent: ::std::option::Option<Box<Tree>>"));
    assert!(code.contains("pub children: ::std::option::Option<Vec<Tree>>"));
    // A self-referring alias becomes a newtype.
    assert!(code.contains("pub struct Nested(pub Vec<Nested>);"));
    // What cannot be typed says where it is.
    assert!(
        code.contains(
            "Untyped: `not` cannot be expressed as a type (../fixtures/hostile-names.yaml:"
        )
    );
}

#[test]
fn every_corpus_document_generates_without_panicking() {
    let Some(specs) = corpus() else { return };
    let Ok(manifest) = std::fs::read_to_string(specs.join("MANIFEST.tsv")) else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped every_corpus_document_generates_without_panicking: no corpus at {}",
            specs.display()
        );
        return;
    };
    // The small documents: the full sweep with type-checking is the
    // `compile_corpus` example.
    for line in manifest.lines().skip(1) {
        let columns: Vec<&str> = line.split('\t').collect();
        let (Some(path), Some(size)) = (columns.first(), columns.get(9)) else {
            continue;
        };
        if size.parse::<u64>().unwrap_or(u64::MAX) > 400_000 {
            continue;
        }
        let Ok(document) = Document::load(&specs.join(path)) else {
            continue;
        };
        let Ok(model) = model::build(document, &idem_codegen::audit::rule_names()) else {
            continue;
        };
        let options = Options {
            client: true,
            server: true,
            feature_groups: false,
        };
        let generated = generate(&model, &options).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(generated.lines > 0, "{path}");
    }
}

/// A `pattern` that is not ECMA-262 is reported once, at its place in the
/// spec, and left unchecked; one that is becomes a check. 3.0's boolean
/// `exclusiveMinimum` and 3.1's numeric one both become an exclusive bound.
/// (Checks are generated for what an operation's request reaches.)
#[test]
fn patterns_and_bounds_are_read_as_their_version_means_them() {
    let dir = tempfile::tempdir().unwrap();
    let spec = |version: &str, exclusive: &str| {
        format!(
            "openapi: {version}\ninfo: {{ title: P, version: '1' }}\ncomponents:\n  schemas:\n    Thing:\n      type: object\n      properties:\n        flagged: {{ type: string, pattern: '(?i)^abc$' }}\n        plain: {{ type: string, pattern: '^[a-z]+\\d$' }}\n        again: {{ type: string, pattern: '(?i)^abc$' }}\n        price: {{ type: number, {exclusive} }}\npaths:\n  /things:\n    put:\n      operationId: putThing\n      requestBody:\n        content:\n          application/json:\n            schema: {{ $ref: '#/components/schemas/Thing' }}\n      responses:\n        '204': {{ description: Stored. }}\n"
        )
    };
    let cases = [
        ("3.0.3", "minimum: 0, exclusiveMinimum: true"),
        ("3.1.0", "exclusiveMinimum: 0"),
    ];
    for (version, exclusive) in cases {
        let path = dir.path().join(format!("{version}.yaml"));
        std::fs::write(&path, spec(version, exclusive)).unwrap();
        let generated = generate(
            &model(&path),
            &Options {
                client: true,
                server: false,
                feature_groups: false,
            },
        )
        .unwrap();
        assert_eq!(generated.notes.len(), 2, "{version}: {:?}", generated.notes);
        assert!(
            generated.notes[0].ends_with(
                "8:43: the pattern `(?i)^abc$` is not an ECMA-262 regular expression; values are not checked against it"
            ),
            "{version}: {:?}",
            generated.notes
        );
        assert!(
            generated
                .items
                .contains(r#"v.pattern(&self.plain, "^[a-z]+\\d$")"#),
            "{version}: {}",
            generated.items
        );
        assert!(!generated.items.contains("(?i)^abc$\")"), "{version}");
        assert!(
            generated
                .items
                .contains("v.exclusive_minimum(self.price, 0.0)"),
            "{version}: {}",
            generated.items
        );
    }
}
