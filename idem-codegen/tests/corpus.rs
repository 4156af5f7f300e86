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

fn corpus() -> Option<PathBuf> {
    let dir = std::env::var_os("IDEM_SPECS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/specs"),
        PathBuf::from,
    );
    dir.is_dir().then_some(dir)
}

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
    let Some(dir) = corpus() else {
        eprintln!("skipped: ../shared/specs is absent (set IDEM_SPECS_DIR to point elsewhere)");
        return;
    };
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
    let Some(dir) = corpus() else {
        eprintln!("skipped: ../shared/specs is absent (set IDEM_SPECS_DIR to point elsewhere)");
        return;
    };
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
    // Swagger 2.0 is refused with a clear message.
    let (code, _, stderr) = audit(&dir.join("slack/slack_web_openapi_v2.json"));
    assert_eq!(code, EXIT_ERROR);
    assert!(
        stderr.contains("unsupported version: Swagger 2.0"),
        "{stderr}"
    );
}
