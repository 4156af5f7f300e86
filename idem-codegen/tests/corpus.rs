#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Every document under `../shared/specs` (real public API descriptions)
//! audits or fails with a clear error; none panics. Skips, saying so, when
//! the folder is absent. `IDEM_SPECS_DIR` points elsewhere.

use std::path::{Path, PathBuf};

use idem_codegen::cli::{EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, run};

mod corpus_support;
use corpus_support::corpus;

fn documents(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            documents(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
}

fn audit(path: &Path) -> (i32, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = run(
        ["idem", "audit", "--format", "json", path.to_str().unwrap()],
        &mut out,
        &mut err,
    );
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

#[test]
fn every_corpus_file_audits_or_fails_clearly() {
    let Some(dir) = corpus() else { return };
    let mut files = Vec::new();
    documents(&dir, &mut files);
    assert!(
        files.len() > 3000,
        "expected the whole corpus, found {}",
        files.len()
    );
    let mut audited = 0;
    for file in &files {
        let (code, stdout, stderr) = match std::panic::catch_unwind(|| audit(file)) {
            Ok(r) => r,
            Err(_) => panic!("idem panicked on {}", file.display()),
        };
        match code {
            EXIT_CLEAN | EXIT_FINDINGS => {
                serde_json::from_str::<serde_json::Value>(&stdout)
                    .unwrap_or_else(|e| panic!("{}: bad JSON: {e}", file.display()));
                audited += 1;
            }
            EXIT_ERROR => assert!(
                stderr.starts_with("error: ") && stderr.len() > 10,
                "{}: exit 2 without a clear error: {stderr}",
                file.display()
            ),
            other => panic!("{}: exit code {other}", file.display()),
        }
    }
    assert!(audited >= 30, "only {audited} documents audited");
}

/// Facts checked against MANIFEST.tsv and the vendors' own documents.
#[test]
fn root_documents_are_modelled_faithfully() {
    let Some(dir) = corpus() else { return };
    let summary = |rel: &str| {
        let (code, stdout, stderr) = audit(&dir.join(rel));
        assert!(
            code == EXIT_CLEAN || code == EXIT_FINDINGS,
            "{rel}: {stderr}"
        );
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap()
    };
    // Operation counts from the manifest, multi-file ones included.
    for (rel, ops) in [
        ("stripe/spec3.yaml", 468),
        ("progenitor/api.github.com.json", 767),
        (
            "digitalocean/specification/DigitalOcean-public.v2.yaml",
            659,
        ),
        ("lob/lob-api-public.yml", 105),
        ("dwolla/specs/spec.yml", 82),
        ("lago/src/openapi.yaml", 202),
        ("twilio/twilio_verify_v3.json", 0),
        // Swagger 2.0, read into the same model.
        ("slack/slack_web_openapi_v2.json", 174),
        ("netlify/swagger.yml", 174),
        ("square/api-swagger2-2024-10.json", 297),
        ("oai/v2.0/json/uber.json", 5),
        ("oai/v2.0/yaml/petstore-minimal.yaml", 1),
        ("oai/v2.0/json/petstore-expanded.json", 4),
        ("oai/v2.0/yaml/petstore-separate/spec/swagger.yaml", 4),
    ] {
        assert_eq!(summary(rel)["summary"]["operations"], ops, "{rel}");
    }
    // Webhook-only documents: nothing to audit as served operations.
    for rel in [
        "oai/v3.1/webhook-example.yaml",
        "adyen/BalancePlatformTransferNotification-v4.json",
    ] {
        let v = summary(rel);
        assert_eq!(v["summary"]["operations"], 0, "{rel}");
        assert!(!v["webhooks"].as_array().unwrap().is_empty(), "{rel}");
    }
    // APIs that declare the Idempotency-Key header have keyed operations.
    for rel in [
        "adyen/CheckoutService-v71.json",
        "xero/xero_accounting.yaml",
        "resend/resend.yaml",
        "dwolla/openapi-bundled.yml",
    ] {
        assert!(
            summary(rel)["summary"]["keyed"].as_u64().unwrap() > 0,
            "{rel}"
        );
    }
    // Keys the specs already show are inferred, without annotations: Square
    // and Twilio carry them in the request body (Square's 2.0 document too).
    for (rel, keyed, field) in [
        ("square/api.json", 63, "idempotency_key"),
        ("square/api-swagger2-2024-10.json", 59, "idempotency_key"),
        ("twilio/twilio_api_v2010.yaml", 4, "IdempotencyKey"),
    ] {
        let v = summary(rel);
        let inferred: Vec<&serde_json::Value> = v["operations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["class"] == "keyed")
            .collect();
        assert_eq!(inferred.len(), keyed, "{rel}");
        for op in inferred {
            assert_eq!(op["key_source"], "inferred", "{rel}: {op}");
            assert_eq!(
                (op["key_in"].as_str(), op["key_name"].as_str()),
                (Some("body"), Some(field)),
                "{rel}: {op}"
            );
        }
    }
}

/// Every diagnostic of a Swagger 2.0 document names a line that exists in
/// its file and starts at a token (positions survive the conversion).
#[test]
fn swagger_2_findings_have_real_positions() {
    let Some(dir) = corpus() else { return };
    for rel in [
        "slack/slack_web_openapi_v2.json",
        "netlify/swagger.yml",
        "square/api-swagger2-2024-10.json",
        "oai/v2.0/json/petstore-expanded.json",
        "oai/v2.0/yaml/petstore-separate/spec/swagger.yaml",
    ] {
        let path = dir.join(rel);
        let (code, stdout, stderr) = audit(&path);
        assert!(
            code == EXIT_CLEAN || code == EXIT_FINDINGS,
            "{rel}: {stderr}"
        );
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let diagnostics = v["diagnostics"].as_array().unwrap();
        assert!(!diagnostics.is_empty(), "{rel}");
        for d in diagnostics {
            let file = d["file"].as_str().unwrap();
            let text =
                std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{rel}: {file}: {e}"));
            let line = d["line"].as_u64().unwrap() as usize;
            let column = d["column"].as_u64().unwrap() as usize;
            let shown = text
                .lines()
                .nth(line - 1)
                .unwrap_or_else(|| panic!("{rel}: {file} has no line {line}"));
            let at = shown.chars().nth(column - 1);
            assert!(
                at.is_some_and(|c| !c.is_whitespace()),
                "{rel}: {file}:{line}:{column} is not at a token: {shown:?}"
            );
        }
        // An operation's finding sits on its method key.
        if let Some(d) = diagnostics
            .iter()
            .find(|d| d["rule"] == "unkeyed-unsafe-write")
        {
            let text = std::fs::read_to_string(d["file"].as_str().unwrap()).unwrap();
            let line = text
                .lines()
                .nth(d["line"].as_u64().unwrap() as usize - 1)
                .unwrap();
            let method = d["method"].as_str().unwrap().to_ascii_lowercase();
            assert!(
                line.contains(&method),
                "{rel}: {line:?} is not the `{method}` key"
            );
        }
    }
}

/// `idem probe --dry-run` plans every root document of the corpus, or
/// refuses it clearly (no keyed operation, an unreadable spec): the body
/// synthesis meets real schemas and never panics. Nothing is sent.
#[test]
fn probe_plans_every_root_document_or_refuses_clearly() {
    let Some(dir) = corpus() else { return };
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    let mut planned = 0;
    for line in manifest.lines().skip(1) {
        let Some(path) = line.split('\t').next() else {
            continue;
        };
        let spec = dir.join(path);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(
            [
                "idem",
                "probe",
                spec.to_str().unwrap(),
                "--base-url",
                "http://127.0.0.1:9",
                "--dry-run",
            ],
            &mut out,
            &mut err,
        );
        let (out, err) = (String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
        match code {
            EXIT_CLEAN => {
                assert!(
                    out.contains("at most, none of them retried"),
                    "{path}: {out}"
                );
                planned += 1;
                let skipped = out.lines().filter(|l| l.starts_with("  skipped:")).count();
                eprintln!(
                    "{path}: {} ({skipped} operations without a body the probe can make)",
                    out.lines().last().unwrap_or_default()
                );
            }
            EXIT_ERROR => {
                assert!(err.starts_with("error: "), "{path}: {err}");
                eprintln!("{path}: {}", err.lines().next().unwrap_or_default());
            }
            other => panic!("{path}: exit {other}: {err}"),
        }
    }
    assert!(
        planned >= 5,
        "only {planned} corpus specs have keyed operations to plan"
    );
}
