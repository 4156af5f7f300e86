#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Hostile and broken input: every case ends in a clear error with its
//! location (exit 2) or a result — never a panic, a hang or unbounded memory.

use std::path::Path;

use idem_codegen::cli::{EXIT_ERROR, run};

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

fn audit(spec: &Path) -> Output {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = run(
        ["idem", "audit", spec.to_str().unwrap()],
        &mut out,
        &mut err,
    );
    Output {
        code,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, text).unwrap();
    path
}

const HEAD: &str = "openapi: 3.0.3\ninfo: { title: t, version: '1' }\n";

#[test]
fn broken_yaml_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write(
        dir.path(),
        "broken.yaml",
        &format!("{HEAD}paths:\n  /a:\n    get: [1, 2\n  /b: {{}}\n"),
    );
    let o = audit(&spec);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.starts_with("error: "), "{}", o.stderr);
    assert!(o.stderr.contains("broken.yaml:6:"), "{}", o.stderr);
}

#[test]
fn missing_ref_file_is_named_at_the_ref() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write(
        dir.path(),
        "api.yaml",
        &format!(
            "{HEAD}paths:\n  /a:\n    post:\n      parameters:\n        - $ref: 'params/missing.yaml'\n      responses: {{}}\n"
        ),
    );
    let o = audit(&spec);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("params/missing.yaml"), "{}", o.stderr);
    assert!(o.stderr.contains("cannot be read"), "{}", o.stderr);
    assert!(o.stderr.contains("api.yaml:7:17"), "{}", o.stderr);
}

#[test]
fn diagnostics_point_into_the_external_file() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "params/key.yaml",
        "name: Idempotency-Key\nin: header\nrequired: true\nschema:\n  type: string\n",
    );
    let spec = write(
        dir.path(),
        "api.yaml",
        &format!(
            "{HEAD}paths:\n  /a:\n    post:\n      parameters:\n        - $ref: './params/key.yaml'\n      responses: {{}}\n"
        ),
    );
    let o = audit(&spec);
    assert!(o.stdout.contains("params/key.yaml:1:1"), "{}", o.stdout);
    assert!(
        o.stdout
            .contains("key parameter `Idempotency-Key` has no `maxLength`")
    );
}

#[test]
fn ref_cycles_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write(
        dir.path(),
        "cycle.yaml",
        &format!(
            "{HEAD}paths:\n  /a:\n    post:\n      parameters:\n        - $ref: '#/components/parameters/A'\n      responses: {{}}\n\
             components:\n  parameters:\n    A: {{ $ref: '#/components/parameters/B' }}\n    B: {{ $ref: '#/components/parameters/A' }}\n"
        ),
    );
    let o = audit(&spec);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("`$ref` cycle"), "{}", o.stderr);
    // Cycles across files, too.
    write(dir.path(), "x.yaml", "$ref: './y.yaml'\n");
    write(dir.path(), "y.yaml", "$ref: './x.yaml'\n");
    let spec = write(
        dir.path(),
        "cross.yaml",
        &format!("{HEAD}paths:\n  /a:\n    $ref: './x.yaml'\n"),
    );
    let o = audit(&spec);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("`$ref` cycle"), "{}", o.stderr);
}

#[test]
fn recursive_schemas_are_fine() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write(
        dir.path(),
        "tree.yaml",
        &format!(
            "{HEAD}paths:\n  /nodes:\n    put:\n      requestBody:\n        content:\n          application/json:\n            schema: {{ $ref: '#/components/schemas/Node' }}\n      responses: {{}}\n\
             components:\n  schemas:\n    Node:\n      allOf:\n        - $ref: '#/components/schemas/Node'\n      properties:\n        children: {{ type: array, items: {{ $ref: '#/components/schemas/Node' }} }}\n"
        ),
    );
    let o = audit(&spec);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
}

#[test]
fn alias_bomb_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut text =
        format!("{HEAD}x-bomb:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!(
            "  a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    text.push_str("paths: {}\n");
    let spec = write(dir.path(), "bomb.yaml", &text);
    let o = audit(&spec);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("alias bomb"), "{}", o.stderr);
    assert!(o.stderr.contains("bomb.yaml:"), "{}", o.stderr);
}

#[test]
fn deep_nesting_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let flow = format!(
        "{HEAD}x-deep: {}{}\npaths: {{}}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let o = audit(&write(dir.path(), "flow.yaml", &flow));
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("flow.yaml:3:"), "{}", o.stderr);
    let block = format!("{HEAD}x-deep:\n{}x\npaths: {{}}\n", "- ".repeat(100_000));
    let o = audit(&write(dir.path(), "block.yaml", &block));
    assert_eq!(o.code, EXIT_ERROR);
    assert!(
        o.stderr.contains("nesting deeper than 256 levels"),
        "{}",
        o.stderr
    );
    let json = format!(
        "{{\"openapi\": \"3.1.0\", \"x\": {}{}}}",
        "{\"a\":".repeat(100_000),
        "}".repeat(100_000)
    );
    let o = audit(&write(dir.path(), "deep.json", &json));
    assert_eq!(o.code, EXIT_ERROR);
}

#[test]
fn odd_documents_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("empty.yaml", "", "the file is empty"),
        ("list.yaml", "- a\n- b\n", "not an OpenAPI document"),
        ("noversion.yaml", "info: {}\n", "has no `openapi` field"),
        (
            "swagger.json",
            "{\"swagger\": \"1.2\"}",
            "unsupported version: Swagger `1.2`",
        ),
        (
            "v4.yaml",
            "openapi: 4.0.0\n",
            "unsupported version: OpenAPI `4.0.0`",
        ),
        ("tabs.yaml", "openapi: 3.0.0\npaths:\n\t/a: {}\n", "error: "),
        (
            "remote.yaml",
            "openapi: 3.0.0\npaths:\n  /a:\n    $ref: 'https://example.com/a.yaml'\n",
            "remote references are not fetched",
        ),
        (
            "pointer.yaml",
            "openapi: 3.0.0\npaths:\n  /a:\n    $ref: '#/components/pathItems/nope'\n",
            "does not resolve",
        ),
    ];
    for (name, text, expected) in cases {
        let o = audit(&write(dir.path(), name, text));
        assert_eq!(o.code, EXIT_ERROR, "{name}: {}{}", o.stdout, o.stderr);
        assert!(o.stderr.contains(expected), "{name}: {}", o.stderr);
    }
    let bytes = dir.path().join("latin1.yaml");
    std::fs::write(&bytes, b"openapi: 3.0.0\ninfo: {title: \xe9}\n").unwrap();
    let o = audit(&bytes);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("not UTF-8"), "{}", o.stderr);
    // At the bad byte's line and column, with the line shown.
    assert!(o.stderr.contains("latin1.yaml:2:15"), "{}", o.stderr);
    assert!(
        o.stderr.contains("invalid byte 0xE9 at offset 29"),
        "{}",
        o.stderr
    );
    // In a file reached through `$ref`, at that file's byte.
    std::fs::write(
        dir.path().join("part.yaml"),
        b"name: key\ndescription: caf\xe9\n",
    )
    .unwrap();
    let o = audit(&write(
        dir.path(),
        "refs-latin1.yaml",
        "openapi: 3.0.0
paths:
  /a:
    post:
      parameters:
        - $ref: 'part.yaml'
      responses: {}
",
    ));
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("part.yaml:2:17"), "{}", o.stderr);
    let o = audit(dir.path());
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("is a directory"));
}

#[test]
fn vocabulary_mistakes_are_findings_not_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write(
        dir.path(),
        "vocab.yaml",
        &format!(
            "{HEAD}x-idempotency:\n  replay-windw: 7d\n  lock-timeout: 60\n  scope: [account]\n  allow: {{ no-such-rule: x, missing-retry-after: '' }}\n\
             x-retry: 3\nx-admission: {{ max-in-flite: 10 }}\npaths:\n  /a:\n    get:\n      x-admission: {{ max-in-flight: 0 }}\n      responses: {{ '200': {{ description: ok }} }}\n\
             \x20 /b:\n    get:\n      x-pagination: {{ style: curser, param: cursor }}\n      responses: {{ '200': {{ description: ok }} }}\n\
             \x20 /c:\n    get:\n      x-pagination: {{ style: cursor, param: cursor }}\n      responses: {{ '200': {{ description: ok }} }}\n\
             \x20 /d:\n    get:\n      x-pagination: yes\n      responses: {{ '200': {{ description: ok }} }}\n"
        ),
    );
    let o = audit(&spec);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    for expected in [
        "unknown field `replay-windw` in `x-idempotency`",
        "did you mean `replay-window`?",
        "`lock-timeout` is not a duration: `60`",
        "add a unit, e.g. `60s`",
        "`scope: ` is not one of account, credential, global",
        "`allow` names an unknown rule `no-such-rule`",
        "waiving `missing-retry-after` needs a reason",
        "`x-retry` must be a mapping, found a number",
        "unknown field `max-in-flite` in `x-admission`",
        "did you mean `max-in-flight`?",
        "`max-in-flight`",
        "`style: curser` is not one of cursor, after-last, link, offset",
        "`x-pagination` with `style: cursor` needs `cursor`",
        "`x-pagination` must be `false` or a mapping",
    ] {
        assert!(
            o.stdout.contains(expected),
            "missing {expected:?} in\n{}",
            o.stdout
        );
    }
}

#[test]
fn a_large_document_loads() {
    // About 50 MB: many operations, each with a long description.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::with_capacity(52 << 20);
    text.push_str(HEAD);
    text.push_str("paths:\n");
    let description = "word ".repeat(400);
    let mut i = 0;
    while text.len() < 50 << 20 {
        text.push_str(&format!(
            "  /r{i}:\n    get:\n      description: {description}\n      responses: {{ '200': {{ description: ok }} }}\n    post:\n      description: {description}\n      responses: {{ '201': {{ description: ok }} }}\n"
        ));
        i += 1;
    }
    let spec = write(dir.path(), "big.yaml", &text);
    let o = audit(&spec);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let last = o.stdout.lines().last().unwrap();
    assert!(
        last.starts_with(&format!("summary: {} operations", i * 2)),
        "{last}"
    );
}
