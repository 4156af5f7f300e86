#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The `idem` command line, driven in-process through `cli::run` (the same
//! code the binary runs) and once as a real process.

use std::path::{Path, PathBuf};

use idem_codegen::cli::{EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS};

mod cli_support;
use cli_support::idem;

fn fixture(name: &str) -> String {
    format!("../fixtures/{name}")
}

#[test]
fn human_report_points_into_the_file() {
    let o = idem(&["audit", &fixture("cratebase.yaml")]);
    assert_eq!(o.code, EXIT_FINDINGS, "{}", o.stderr);
    assert!(
        o.stdout
            .contains("error[IDEM001]: PUT /v2/orders/{id}/notes declares effect `append`")
    );
    assert!(
        o.stdout.contains("--> ../fixtures/cratebase.yaml:32:5"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("--> ../fixtures/cratebase.yaml:42:5"));
    assert!(o.stdout.contains("--> ../fixtures/cratebase.yaml:51:5"));
    assert!(o.stdout.contains("= help: "));
    assert!(
        !o.stdout.contains("\u{1b}["),
        "no colour when not on a terminal"
    );
    assert!(o.stdout.ends_with(
        "summary: 5 operations, 4 state-changing, 1 keyed, 0 documented-unsafe; 3 errors, 5 warnings\n"
    ));
}

/// A minified document is one line: each finding shows a window of it
/// around the finding, with the line's own column in the location, and
/// `generate` shows a few findings in full and counts the rest.
#[test]
fn findings_on_a_minified_document_show_a_window_of_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let filler = "x".repeat(5_000);
    let mut paths = Vec::new();
    for i in 0..8 {
        paths.push(format!(
            r#""/v1/items{i}":{{"post":{{"description":"{filler}","operationId":"create{i}","responses":{{"201":{{"description":"ok"}}}}}}}}"#
        ));
    }
    let text = format!(
        r#"{{"openapi":"3.0.3","info":{{"title":"Minified","version":"1"}},"paths":{{{}}}}}"#,
        paths.join(",")
    );
    let spec = dir.path().join("minified.json");
    std::fs::write(&spec, &text).unwrap();
    let spec = spec.to_str().unwrap();
    let o = idem(&["audit", spec, "--color", "never"]);
    assert_eq!(o.code, EXIT_FINDINGS, "{}", o.stderr);
    assert!(
        o.stdout.lines().all(|l| l.chars().count() < 300),
        "{}",
        o.stdout
    );
    // The first `post` is at this column of line 1.
    let column = text.find(r#""post""#).unwrap() + 1;
    assert!(
        o.stdout.contains(&format!("minified.json:1:{column}\n")),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains(r#"1 | …"#), "{}", o.stdout);
    assert!(
        o.stdout.contains(r#"{"post":{"description":"xxx"#),
        "{}",
        o.stdout
    );
    let out = dir.path().join("out");
    let o = idem(&["generate", spec, "--out", out.to_str().unwrap()]);
    assert_eq!(o.code, EXIT_FINDINGS);
    assert_eq!(
        o.stderr.matches("error[IDEM001]").count(),
        5,
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("… and 3 more finding(s)"), "{}", o.stderr);
    assert!(
        o.stderr.contains("8  IDEM001 unkeyed-unsafe-write"),
        "{}",
        o.stderr
    );
}

#[test]
fn json_report_has_the_documented_shape() {
    let o = idem(&["audit", "--format", "json", &fixture("cratebase.yaml")]);
    assert_eq!(o.code, EXIT_FINDINGS);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["spec"], "../fixtures/cratebase.yaml");
    let ops = v["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 5);
    let refund = ops.iter().find(|o| o["path"] == "/v2/refunds").unwrap();
    assert_eq!(refund["method"], "POST");
    assert_eq!(refund["operation_id"], "createRefund");
    assert_eq!(refund["class"], "unsafe");
    assert_eq!(refund["key"], "none");
    assert_eq!(refund["effect"], "create");
    let create = ops
        .iter()
        .find(|o| o["operation_id"] == "createOrder")
        .unwrap();
    assert_eq!(create["class"], "keyed");
    assert_eq!(create["key"], "required");
    let notes = ops
        .iter()
        .find(|o| o["operation_id"] == "addOrderNote")
        .unwrap();
    assert_eq!(
        (notes["class"].as_str(), notes["effect"].as_str()),
        (Some("unsafe"), Some("append"))
    );

    let diags = v["diagnostics"].as_array().unwrap();
    let d = diags.iter().find(|d| d["path"] == "/v2/refunds").unwrap();
    assert_eq!(d["rule"], "unkeyed-unsafe-write");
    assert_eq!(d["severity"], "error");
    assert_eq!(d["method"], "POST");
    assert_eq!(d["operation_id"], "createRefund");
    assert_eq!(d["file"], "../fixtures/cratebase.yaml");
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(51), Some(5))
    );
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .starts_with("POST /v2/refunds")
    );
    let s = &v["summary"];
    assert_eq!(
        (
            s["operations"].as_u64(),
            s["state_changing"].as_u64(),
            s["errors"].as_u64(),
            s["warnings"].as_u64()
        ),
        (Some(5), Some(4), Some(3), Some(5))
    );
}

#[test]
fn sarif_report_is_code_scanning_shaped() {
    let o = idem(&["audit", "--format", "sarif", &fixture("cratebase.yaml")]);
    assert_eq!(o.code, EXIT_FINDINGS);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["version"], "2.1.0");
    let run = &v["runs"][0];
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), idem_codegen::audit::RULES.len());
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 8);
    for r in results {
        let index = r["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(rules[index]["id"], r["ruleId"]);
        assert!(matches!(r["level"].as_str(), Some("error" | "warning")));
        let loc = &r["locations"][0]["physicalLocation"];
        // Relative to the repository root, never `../…` or absolute.
        if idem_codegen::output::sarif_root().join(".git").exists() {
            assert_eq!(loc["artifactLocation"]["uri"], "fixtures/cratebase.yaml");
            assert_eq!(loc["artifactLocation"]["uriBaseId"], "%SRCROOT%");
        }
        assert!(loc["region"]["startLine"].as_u64().unwrap() >= 1);
        assert!(r["partialFingerprints"].is_object());
    }
}

#[test]
fn sarif_uris_are_relative_to_the_root_whatever_path_the_spec_is_given_by() {
    use idem_codegen::{audit, load::Document, model, output};
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("api specs/v1")).unwrap();
    let inside = root.join("api specs/v1/open api.yaml");
    std::fs::copy(fixture("cratebase.yaml"), &inside).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let elsewhere = std::fs::canonicalize(outside.path())
        .unwrap()
        .join("cratebase.yaml");
    std::fs::copy(fixture("cratebase.yaml"), &elsewhere).unwrap();

    let sarif_of = |spec: &Path| {
        let document = Document::load(spec).unwrap_or_else(|f| panic!("{}", f.error));
        let model = model::build(document, &audit::rule_names()).unwrap();
        let report = audit::audit(&model);
        output::sarif_with_root(&model, &report, &root)
    };
    // Given by an absolute path, as workflows do with $GITHUB_WORKSPACE.
    let v = sarif_of(&inside);
    let run = &v["runs"][0];
    assert_eq!(
        run["originalUriBaseIds"]["%SRCROOT%"]["uri"],
        format!("file://{}/", root.display()).replace(' ', "%20")
    );
    let location = &run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"];
    assert_eq!(location["uri"], "api%20specs/v1/open%20api.yaml");
    assert_eq!(location["uriBaseId"], "%SRCROOT%");
    // Given with `..` in it: the same URI.
    let winding = root.join("api specs/../api specs/v1/./open api.yaml");
    let v = sarif_of(&winding);
    assert_eq!(
        v["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
        "api%20specs/v1/open%20api.yaml"
    );
    // Outside the root: an absolute file URI and no base.
    let v = sarif_of(&elsewhere);
    let location =
        &v["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"];
    assert_eq!(location["uri"], format!("file://{}", elsewhere.display()));
    assert!(location.get("uriBaseId").is_none());
}

#[test]
fn github_annotations() {
    let o = idem(&["audit", "--format", "github", &fixture("cratebase.yaml")]);
    assert_eq!(o.code, EXIT_FINDINGS);
    let first = o
        .stdout
        .lines()
        .find(|l| l.contains("/v2/refunds"))
        .unwrap();
    assert!(
        first.starts_with("::error file=../fixtures/cratebase.yaml,line=51,col=5,title=IDEM001 unkeyed-unsafe-write::POST /v2/refunds"),
        "{first}"
    );
    assert!(
        first.contains("%0Ahelp: "),
        "multi-line messages are escaped: {first}"
    );
    assert_eq!(
        o.stdout
            .lines()
            .filter(|l| l.starts_with("::warning "))
            .count(),
        5
    );
    assert!(
        o.stdout
            .lines()
            .last()
            .unwrap()
            .starts_with("::notice title=idem audit::summary: 5 operations")
    );
}

#[test]
fn summary_counts_findings_per_rule_and_operation() {
    let o = idem(&["audit", "--summary", &fixture("cratebase.yaml")]);
    assert_eq!(o.code, EXIT_FINDINGS, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], "findings per rule:");
    assert!(
        lines.iter().any(|l| l
            .trim_start()
            .starts_with("3  IDEM001 unkeyed-unsafe-write")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("operations with the most findings ("),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("POST /v2/refunds (createRefund): IDEM001"),
        "{}",
        o.stdout
    );
    assert!(
        !o.stdout.contains("-->"),
        "no individual findings: {}",
        o.stdout
    );
    assert!(o.stdout.ends_with(
        "summary: 5 operations, 4 state-changing, 1 keyed, 0 documented-unsafe; 3 errors, 5 warnings\n"
    ));
    let o = idem(&["audit", "--summary", &fixture("payments-clean.yaml")]);
    assert_eq!(o.code, EXIT_CLEAN);
    assert!(o.stdout.starts_with("no findings\n"), "{}", o.stdout);
    // The machine formats carry every finding; `--summary` does not apply.
    let o = idem(&[
        "audit",
        "--summary",
        "--format",
        "json",
        &fixture("cratebase.yaml"),
    ]);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(
        o.stderr.contains("`--summary` shapes the human report"),
        "{}",
        o.stderr
    );
}

#[test]
fn exit_codes_follow_the_threshold() {
    let clean = fixture("payments-clean.yaml");
    assert_eq!(idem(&["audit", &clean]).code, EXIT_CLEAN);
    assert_eq!(
        idem(&["audit", "--deny", "warnings", &clean]).code,
        EXIT_CLEAN
    );
    // Warnings only: clean by default, failing with --deny warnings.
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("warn.yaml");
    let text = std::fs::read_to_string(&clean)
        .unwrap()
        .replace("  failure-replay: verbatim\n", "");
    std::fs::write(&spec, text).unwrap();
    let spec = spec.to_str().unwrap();
    let o = idem(&["audit", spec]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stdout);
    assert!(o.stdout.contains("warning[IDEM009]"));
    assert_eq!(
        idem(&["audit", "--deny", "warnings", spec]).code,
        EXIT_FINDINGS
    );
}

#[test]
fn wrong_calls_exit_2() {
    assert_eq!(idem(&["audit"]).code, EXIT_ERROR);
    assert_eq!(
        idem(&["audit", "--format", "xml", &fixture("cratebase.yaml")]).code,
        EXIT_ERROR
    );
    assert_eq!(
        idem(&["audit", "--deny", "everything", &fixture("cratebase.yaml")]).code,
        EXIT_ERROR
    );
    let both = idem(&[
        "audit",
        "--baseline",
        "a",
        "--write-baseline",
        "b",
        &fixture("cratebase.yaml"),
    ]);
    assert_eq!(both.code, EXIT_ERROR);
    let missing = idem(&["audit", "no/such/spec.yaml"]);
    assert_eq!(missing.code, EXIT_ERROR);
    assert!(
        missing.stderr.contains("cannot read `no/such/spec.yaml`"),
        "{}",
        missing.stderr
    );
    assert_eq!(idem(&["frobnicate"]).code, EXIT_ERROR);
}

#[test]
fn baseline_hides_known_findings_and_fails_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let baseline = dir.path().join("idem-baseline.json");
    let b = baseline.to_str().unwrap();
    let spec = fixture("cratebase.yaml");
    let w = idem(&["audit", "--write-baseline", b, &spec]);
    assert_eq!(w.code, EXIT_CLEAN, "{}", w.stderr);
    assert!(w.stderr.contains("recorded 8 finding(s)"));
    let o = idem(&["audit", "--baseline", b, &spec]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stdout);
    assert!(
        o.stdout
            .contains("8 known finding(s) from the baseline not shown")
    );
    assert!(o.stdout.contains("0 errors, 0 warnings, 8 baselined"));

    // A new unsafe write fails even though the old ones are known; editing
    // the file (shifting every line) does not resurrect recorded findings.
    let changed = dir.path().join("changed.yaml");
    let text = std::fs::read_to_string(&spec).unwrap().replace(
        "paths:\n",
        "paths:\n  /v2/gift-cards:\n    post:\n      responses:\n        \"201\": { description: Created }\n",
    );
    std::fs::write(&changed, text).unwrap();
    let o = idem(&[
        "audit",
        "--format",
        "json",
        "--baseline",
        b,
        changed.to_str().unwrap(),
    ]);
    assert_eq!(o.code, EXIT_FINDINGS);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let fresh = v["diagnostics"].as_array().unwrap();
    assert_eq!(fresh.len(), 1);
    assert_eq!(fresh[0]["path"], "/v2/gift-cards");
    assert_eq!(v["known"].as_array().unwrap().len(), 8);

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let o = idem(&["audit", "--baseline", bad.to_str().unwrap(), &spec]);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("is not valid"));
}

#[test]
fn rules_and_explain() {
    let o = idem(&["rules"]);
    assert_eq!(o.code, EXIT_CLEAN);
    assert_eq!(o.stdout.lines().count(), idem_codegen::audit::RULES.len());
    assert!(o.stdout.contains("IDEM001  unkeyed-unsafe-write"));
    let by_code = idem(&["explain", "IDEM004"]);
    let by_slug = idem(&["explain", "reaper-before-replay-window"]);
    assert_eq!(by_code.code, EXIT_CLEAN);
    assert_eq!(by_code.stdout, by_slug.stdout);
    assert!(by_code.stdout.contains("## Why is this bad?"));
    let typo = idem(&["explain", "reaper-before-replay-windw"]);
    assert_eq!(typo.code, EXIT_ERROR);
    assert!(
        typo.stderr
            .contains("did you mean `reaper-before-replay-window`?")
    );
}

#[test]
fn the_binary_is_the_same_program() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_idem"));
    let out = std::process::Command::new(&exe)
        .args(["audit", "--format", "json"])
        .arg(Path::new("../fixtures/cratebase.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(EXIT_FINDINGS));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["summary"]["errors"], 3);
    let out = std::process::Command::new(&exe)
        .arg("audit")
        .arg("missing.yaml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(EXIT_ERROR));
}

#[test]
fn idem_docs_writes_both_pages_despite_audit_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("site/docs");
    let spec = "../fixtures/cratebase.yaml";
    let o = idem(&[
        "docs",
        spec,
        "--out",
        out_dir.to_str().unwrap(),
        "--color",
        "never",
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    // The findings, as `idem audit` renders them, on stderr.
    assert!(o.stderr.contains("error[IDEM001]"), "{}", o.stderr);
    assert!(o.stderr.contains("--> ../fixtures/cratebase.yaml:32:5"));
    assert!(o.stderr.contains("summary: 5 operations"));
    for (name, start) in [
        (
            "idempotency.md",
            "# Idempotency keys and retries: Cratebase Orders API\n",
        ),
        ("idempotency.html", "<!DOCTYPE html>\n"),
    ] {
        let path = out_dir.join(name);
        assert!(
            std::fs::read_to_string(&path).unwrap().starts_with(start),
            "{name}"
        );
        assert!(o.stdout.contains(&format!("wrote {}", path.display())));
    }
    // A clean spec prints no findings.
    let o = idem(&[
        "docs",
        "../fixtures/payments-clean.yaml",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(o.code, EXIT_CLEAN);
    assert_eq!(o.stderr, "");
}

#[test]
fn idem_docs_exits_2_on_unreadable_specs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let missing = idem(&["docs", "no/such/spec.yaml", "--out", out]);
    assert_eq!(missing.code, EXIT_ERROR);
    assert!(
        missing.stderr.contains("cannot read `no/such/spec.yaml`"),
        "{}",
        missing.stderr
    );
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "openapi: 3.1.0\ninfo: { title: x\npaths: {}\n").unwrap();
    let broken = idem(&[
        "docs",
        bad.to_str().unwrap(),
        "--out",
        out,
        "--color",
        "never",
    ]);
    assert_eq!(broken.code, EXIT_ERROR);
    assert!(
        broken.stderr.contains(&format!("--> {}:", bad.display())),
        "{}",
        broken.stderr
    );
    assert!(!dir.path().join("out").exists(), "nothing written");
    assert_eq!(
        idem(&["docs", "../fixtures/cratebase.yaml"]).code,
        EXIT_ERROR
    );
    // An output path that is a file cannot be written to.
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let blocked = idem(&[
        "docs",
        "../fixtures/payments-clean.yaml",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert_eq!(blocked.code, EXIT_ERROR);
    assert!(
        blocked.stderr.contains("error: cannot"),
        "{}",
        blocked.stderr
    );
}

#[test]
fn idem_generate_writes_a_crate_and_its_docs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("shop");
    let o = idem(&[
        "generate",
        &fixture("shop.yaml"),
        "--out",
        out.to_str().unwrap(),
        "--runtime-path",
        "../idem-runtime",
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    assert!(
        o.stdout.starts_with("generated shop-api in "),
        "{}",
        o.stdout
    );
    let manifest = std::fs::read_to_string(out.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"shop-api\""));
    assert!(manifest.contains("idem-runtime = { path = "), "{manifest}");
    let lib = std::fs::read_to_string(out.join("src/lib.rs")).unwrap();
    assert!(lib.starts_with("// @generated by idem"));
    assert!(lib.contains("pub fn orders(&self) -> OrdersClient<'_>"));
    // The lines it reports are the lines of the file it wrote.
    assert!(
        o.stdout
            .contains(&format!(" operations, {} lines, ", lib.lines().count())),
        "{} against {} lines",
        o.stdout,
        lib.lines().count()
    );
    assert!(lib.contains("pub fn router<"), "no flag: the server too");
    assert!(
        out.join("docs/idempotency.md").exists(),
        "no flag: client, server and docs"
    );
    // Unchanged input writes nothing.
    let again = idem(&[
        "generate",
        &fixture("shop.yaml"),
        "--out",
        out.to_str().unwrap(),
        "--runtime-path",
        "../idem-runtime",
    ]);
    assert!(
        again.stdout.contains(", 0 file(s) written"),
        "{}",
        again.stdout
    );
    // --client alone: no docs.
    let only = dir.path().join("only");
    let o = idem(&[
        "generate",
        &fixture("shop.yaml"),
        "--client",
        "--out",
        only.to_str().unwrap(),
        "--name",
        "my-shop",
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    assert!(!only.join("docs").exists());
    assert!(
        std::fs::read_to_string(only.join("Cargo.toml"))
            .unwrap()
            .contains("name = \"my-shop\"")
    );
}

#[test]
fn idem_generate_stops_on_audit_errors_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("crate");
    let out = out.to_str().unwrap();
    let o = idem(&[
        "generate",
        &fixture("cratebase.yaml"),
        "--out",
        out,
        "--color",
        "never",
    ]);
    assert_eq!(o.code, EXIT_FINDINGS);
    assert!(o.stderr.contains("error[IDEM001]"), "{}", o.stderr);
    // One line says every way on.
    let refusal = o
        .stderr
        .lines()
        .find(|l| l.contains("nothing generated"))
        .unwrap();
    for way in ["--overlay", "allow:", "--allow-findings"] {
        assert!(refusal.contains(way), "{refusal}");
    }
    assert!(!Path::new(out).exists());
    let o = idem(&[
        "generate",
        &fixture("cratebase.yaml"),
        "--out",
        out,
        "--allow-findings",
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    assert!(Path::new(out).join("src/lib.rs").exists());
    // Unreadable input and the server (not in this version) are exit 2.
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "openapi: 3.0.0\npaths: [\n").unwrap();
    let o = idem(&["generate", broken.to_str().unwrap(), "--out", out]);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(o.stderr.contains("broken.yaml:"), "{}", o.stderr);
    let server = dir.path().join("server");
    let o = idem(&[
        "generate",
        &fixture("shop.yaml"),
        "--server",
        "--out",
        server.to_str().unwrap(),
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    let lib = std::fs::read_to_string(server.join("src/lib.rs")).unwrap();
    assert!(lib.contains("pub fn router<") && !lib.contains("pub struct Client"));
}

#[test]
fn the_cli_example_crate_is_what_idem_generate_writes() {
    // examples/client-cli is committed output of this command, run at the
    // workspace root (spec locations in the code are relative to it).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("client-cli");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .current_dir("..")
        .args([
            "generate",
            "fixtures/shop.yaml",
            "--client",
            "--name",
            "shop-client-cli",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let fresh = std::fs::read_to_string(out.join("src/lib.rs")).unwrap();
    let committed = std::fs::read_to_string("../examples/client-cli/src/lib.rs").unwrap();
    assert!(
        fresh == committed,
        "examples/client-cli is stale: run `cargo run -p idem-codegen -- generate fixtures/shop.yaml \\
         --client --out examples/client-cli --name shop-client-cli --runtime-path idem-runtime`"
    );
}

/// With no runtime flag, a crate generated by an `idem` built from this
/// checkout depends on its commit in its `origin` (or, with no `origin`,
/// on the checkout's runtime), so it builds with nothing published; `--published-runtime` asks for the registry's, and a
/// `--runtime-path` that is not the runtime is refused.
#[test]
fn generate_finds_the_runtime_it_was_built_beside() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("beside");
    let o = idem(&[
        "generate",
        &fixture("shop.yaml"),
        "--client",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    let manifest = std::fs::read_to_string(out.join("Cargo.toml")).unwrap();
    // Built from a clone with an `origin`: the commit, in that repository.
    let (origin, commit) = (env!("IDEM_BUILD_ORIGIN"), env!("IDEM_BUILD_COMMIT"));
    let expected = if origin.is_empty() {
        let runtime = std::fs::canonicalize("../idem-runtime").unwrap();
        format!(
            "idem-runtime = {{ path = {:?},",
            runtime.display().to_string()
        )
    } else {
        format!("idem-runtime = {{ git = {origin:?}, rev = {commit:?},")
    };
    assert!(manifest.contains(&expected), "{expected}\n{manifest}");
    // The manifest says which it is, and how to choose another.
    assert!(manifest.contains("--runtime-path PATH"), "{manifest}");
    let published = dir.path().join("published");
    let o = idem(&[
        "generate",
        &fixture("shop.yaml"),
        "--client",
        "--published-runtime",
        "--out",
        published.to_str().unwrap(),
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    let manifest = std::fs::read_to_string(published.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains(&format!(
            "idem-runtime = {{ version = \"{}\",",
            env!("CARGO_PKG_VERSION")
        )),
        "{manifest}"
    );
    for (path, why) in [
        ("does/not/exist", "no such directory"),
        ("../fixtures/shop.yaml", "not a directory"),
        (
            "../idem-codegen",
            "its Cargo.toml is the package `idem-codegen`, not `idem-runtime`",
        ),
    ] {
        let refused = dir.path().join("refused");
        let o = idem(&[
            "generate",
            &fixture("shop.yaml"),
            "--client",
            "--runtime-path",
            path,
            "--out",
            refused.to_str().unwrap(),
        ]);
        assert_eq!(o.code, EXIT_ERROR, "{path}: {}", o.stdout);
        assert_eq!(o.stderr, format!("error: --runtime-path {path}: {why}\n"));
        assert!(!refused.exists(), "{path}: nothing is written");
    }
}

#[test]
fn generate_narrows_to_tags_and_operations() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("part");
    let out = out.to_str().unwrap();
    let spec = fixture("tagged.yaml");
    let o = idem(&[
        "generate", &spec, "--client", "--out", out, "--tags", "order",
    ]);
    assert_eq!(o.code, EXIT_ERROR);
    assert!(
        o.stderr
            .contains("error: no tag `order` in the spec; did you mean `orders`?"),
        "{}",
        o.stderr
    );
    let o = idem(&[
        "generate",
        &spec,
        "--client",
        "--out",
        out,
        "--tags",
        "catalog",
        "--operations",
        "getCustomer,/orders/{order_id}",
    ]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    assert!(o.stdout.contains(": 3 operations,"), "{}", o.stdout);
    let code = std::fs::read_to_string(Path::new(out).join("src/lib.rs")).unwrap();
    assert!(code.contains("pub struct Product"));
    assert!(code.contains("pub struct Customer"));
    assert!(
        !code.contains("pub struct NewOrder"),
        "createOrder was not chosen"
    );
    assert!(!code.contains("pub struct Unused"));
}

/// A whole-API crate puts each resource group behind a cargo feature, and
/// each type behind the groups that reach it. The crate compiles, warnings
/// denied, with every feature, with none, and with each group alone.
#[test]
fn resource_groups_are_features_that_compile_alone() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = std::fs::canonicalize("../idem-runtime").unwrap();
    let target = std::fs::canonicalize("..")
        .unwrap()
        .join("target/feature-groups");
    for (spec, groups) in [
        ("tagged.yaml", &["catalog", "customers", "orders"][..]),
        (
            "shop.yaml",
            &[
                "blobs", "charges", "health", "notes", "orders", "refunds", "uploads",
            ][..],
        ),
    ] {
        let out = dir.path().join(spec.trim_end_matches(".yaml"));
        let o = idem(&[
            "generate",
            &fixture(spec),
            "--client",
            "--out",
            out.to_str().unwrap(),
            "--runtime-path",
            runtime.to_str().unwrap(),
        ]);
        assert_eq!(o.code, EXIT_CLEAN, "{spec}: {}", o.stderr);
        let manifest = std::fs::read_to_string(out.join("Cargo.toml")).unwrap();
        let full = groups
            .iter()
            .map(|g| format!("{g:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        assert!(
            manifest.contains(&format!("default = [\"full\"]\nfull = [{full}]\n")),
            "{spec}: {manifest}"
        );
        let mut configs: Vec<Vec<&str>> = vec![vec![], vec!["--no-default-features"]];
        configs.extend(
            groups
                .iter()
                .map(|g| vec!["--no-default-features", "--features", g]),
        );
        for config in configs {
            let check = std::process::Command::new(env!("CARGO"))
                .args(["check", "--quiet", "--message-format=short"])
                .args(&config)
                .current_dir(&out)
                .env("CARGO_TARGET_DIR", &target)
                .env("RUSTFLAGS", "-D warnings")
                .output()
                .unwrap();
            assert!(
                check.status.success(),
                "{spec} {config:?}:\n{}",
                String::from_utf8_lossy(&check.stderr)
            );
        }
    }
    // In the tagged store, `Money` is reached by every group and is not
    // gated; `Problem` only by `orders`; `Unused` by no operation.
    let code = std::fs::read_to_string(dir.path().join("tagged/src/lib.rs")).unwrap();
    let gate_of = |item: &str| {
        let at = code.find(item).unwrap_or_else(|| panic!("no {item}"));
        let before = &code[..at];
        let start = before.rfind("\n\n").unwrap_or(0);
        before[start..]
            .lines()
            .map(str::trim_start)
            .find(|l| l.starts_with("#[cfg("))
            .map(str::to_owned)
    };
    assert_eq!(gate_of("pub struct Money"), None);
    assert_eq!(
        gate_of("pub struct Problem").as_deref(),
        Some("#[cfg(feature = \"orders\")]")
    );
    assert_eq!(
        gate_of("pub struct Unused").as_deref(),
        Some("#[cfg(feature = \"full\")]")
    );
    assert_eq!(
        gate_of("pub struct CatalogClient").as_deref(),
        Some("#[cfg(feature = \"catalog\")]")
    );
}

/// `idem workflow` gives a team the example workflow from their own
/// repository, with their spec's path in it.
#[test]
fn idem_workflow_prints_and_writes_the_example_workflow() {
    let printed = idem(&["workflow"]);
    assert_eq!(printed.code, EXIT_CLEAN, "{}", printed.stderr);
    let file = std::fs::read_to_string("ci/idem.yml").unwrap();
    // Built from a git checkout, it pins the install to its own commit.
    let commit = env!("IDEM_BUILD_COMMIT");
    let pinned = if commit.is_empty() {
        file.clone()
    } else {
        assert_eq!(commit.len(), 40, "{commit}");
        file.replacen(
            "  IDEM_REV: v0.1.0\n",
            &format!("  IDEM_REV: {commit}\n"),
            1,
        )
    };
    assert!(
        commit.is_empty() || pinned != file,
        "the template names IDEM_REV: v0.1.0"
    );
    assert_eq!(printed.stdout, pinned);
    let named = idem(&["workflow", "--spec", "api/openapi.yaml"]);
    assert!(
        named.stdout.contains("\n  IDEM_SPEC: api/openapi.yaml\n"),
        "{}",
        named.stdout
    );
    assert!(
        named
            .stderr
            .contains("note: there is no api/openapi.yaml here"),
        "{}",
        named.stderr
    );
    assert_eq!(named.stdout.lines().count(), file.lines().count());
    // The overlay `idem suggest` wrote: every job applies it.
    let overlaid = idem(&[
        "workflow",
        "--spec",
        "api/openapi.yaml",
        "--overlay",
        "api/idempotency.overlay.yaml",
    ]);
    assert!(
        overlaid
            .stdout
            .contains("\n  IDEM_OVERLAY: api/idempotency.overlay.yaml\n"),
        "{}",
        overlaid.stdout
    );
    assert!(printed.stdout.contains("\n  IDEM_OVERLAY: \"\"\n"));
    assert_eq!(overlaid.stdout.lines().count(), file.lines().count());
    let odd = idem(&["workflow", "--spec", "specs/my api: v2.yaml"]);
    assert!(
        odd.stdout
            .contains("\n  IDEM_SPEC: \"specs/my api: v2.yaml\"\n"),
        "{}",
        odd.stdout
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(".github/workflows/idem.yml");
    let out = out.to_str().unwrap();
    let wrote = idem(&["workflow", "--spec", "api.yaml", "--out", out]);
    assert_eq!(wrote.code, EXIT_CLEAN, "{}", wrote.stderr);
    assert_eq!(wrote.stdout, format!("wrote {out}\n"));
    assert!(
        std::fs::read_to_string(out)
            .unwrap()
            .contains("IDEM_SPEC: api.yaml\n")
    );
    let again = idem(&["workflow", "--spec", "api.yaml", "--out", out]);
    assert_eq!(again.stdout, format!("unchanged: {out}\n"));
    let other = idem(&["workflow", "--spec", "other.yaml", "--out", out]);
    assert_eq!(other.code, EXIT_ERROR);
    assert!(
        other
            .stderr
            .contains("holds another workflow; pass --force"),
        "{}",
        other.stderr
    );
    assert!(
        std::fs::read_to_string(out)
            .unwrap()
            .contains("IDEM_SPEC: api.yaml\n")
    );
    let forced = idem(&["workflow", "--spec", "other.yaml", "--out", out, "--force"]);
    assert_eq!(forced.code, EXIT_CLEAN, "{}", forced.stderr);
    assert!(
        std::fs::read_to_string(out)
            .unwrap()
            .contains("IDEM_SPEC: other.yaml\n")
    );
}

/// `idem generate --help` says what it writes with no flag: the server too.
#[test]
fn generate_help_names_everything_it_writes_by_default() {
    let o = idem(&["generate", "--help"]);
    assert_eq!(o.code, EXIT_CLEAN, "{}", o.stderr);
    let help = o.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        "Generate a crate from SPEC: the typed client, the server scaffolding and the integrator docs page",
        "With none of --client, --server and --docs: all three (client, server and docs page)",
        "--published-runtime",
    ] {
        assert!(help.contains(said), "{said}: {help}");
    }
}
