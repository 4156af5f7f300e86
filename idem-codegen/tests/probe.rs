#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! `idem probe` against real servers on loopback: a correct orders API
//! and the same API broken in one known way each (Python's standard
//! library, `tests/probe_support/orders_server.py`), plus servers that hang
//! or answer garbage. Each defect must fail the check that names it and
//! no other. Skipped, saying so, where `python3` is missing.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const SPEC: &str = "../fixtures/probe.yaml";

struct Orders {
    child: Child,
    url: String,
}

impl Orders {
    /// The orders server with `defect`, or `None` without python3.
    fn start(defect: &str, extra: &[&str]) -> Option<Orders> {
        let spawned = Command::new("python3")
            .arg("tests/probe_support/orders_server.py")
            .args(["--defect", defect])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                eprintln!("skipped: cannot run python3 ({e})");
                return None;
            }
        };
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().rsplit(' ').next().unwrap().to_owned();
        Some(Orders {
            child,
            url: format!("http://127.0.0.1:{port}"),
        })
    }
}

impl Drop for Orders {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn idem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Probe `url` with both callers, as JSON: (exit code, report).
fn probe(url: &str, extra: &[&str]) -> (i32, Value) {
    probe_with(SPEC, url, extra)
}

/// [`probe`] against another spec.
fn probe_spec(spec: &std::path::Path, url: &str) -> (i32, Value) {
    probe_with(spec.to_str().unwrap(), url, &[])
}

fn probe_with(spec: &str, url: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![
        "probe",
        spec,
        "--base-url",
        url,
        "--allow-writes",
        "--header",
        "X-Account-Id: acct-first",
        "--second-caller",
        "X-Account-Id: acct-second",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = idem(&args);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", text(&out.stdout), text(&out.stderr)));
    (out.status.code().unwrap(), report)
}

/// Each check's outcome, by slug.
fn outcomes(report: &Value) -> Vec<(String, String)> {
    report["operations"][0]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_owned(),
                c["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_correct_server_holds_every_check() {
    let Some(server) = Orders::start("correct", &[]) else {
        return;
    };
    let (code, report) = probe(&server.url, &[]);
    assert_eq!(code, 0, "{report:#}");
    for (check, outcome) in outcomes(&report) {
        assert_eq!(outcome, "held", "{check}: {report:#}");
    }
    assert_eq!(report["operations"].as_array().unwrap().len(), 1);
    assert_eq!(report["not_sent"][0]["operation"], "addNote");
    let planned = report["requests"]["planned"].as_u64().unwrap();
    let sent = report["requests"]["sent"].as_u64().unwrap();
    assert_eq!(planned, 51);
    assert!(sent <= planned, "{sent} > {planned}");
    // Every resource it made is listed with the key that made it.
    let created = report["created"].as_array().unwrap();
    assert!(created.len() >= 5, "{created:?}");
    let prefix = report["key_prefix"].as_str().unwrap();
    assert!(
        created
            .iter()
            .all(|c| c["key"].as_str().unwrap().starts_with(prefix))
    );
    // A second run uses other keys: nothing of the first is replayed.
    let (_, again) = probe(&server.url, &[]);
    assert_ne!(again["key_prefix"], report["key_prefix"]);
}

/// The checks in the order a run makes them, for the tables below.
const ORDER: [&str; 7] = [
    "replay",
    "payload-mismatch",
    "caller-isolation",
    "concurrent-duplicates",
    "key-required",
    "key-bounds",
    "failed-request-not-stored",
];

/// Each check's outcome in [`ORDER`], one letter each: `H`eld, `F`ailed,
/// `U`ndecided, `S`kipped; `*` after one decided from effects.
fn verdicts(report: &Value) -> String {
    let checks = report["operations"][0]["checks"].as_array().unwrap();
    ORDER
        .iter()
        .map(|name| {
            let c = checks.iter().find(|c| c["check"] == *name).unwrap();
            let letter = match c["outcome"].as_str().unwrap() {
                "held" => "H",
                "failed" => "F",
                "undecided" => "U",
                _ => "S",
            };
            let effects = if c["decided_from"] == "effects" {
                "*"
            } else {
                ""
            };
            format!("{letter}{effects}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `fixtures/probe.yaml` with the key declared `format: uuid`.
fn uuid_spec(dir: &std::path::Path) -> std::path::PathBuf {
    let fixture = std::fs::read_to_string(SPEC).unwrap();
    let declared = fixture.replace(
        "          required: true\n          schema: { type: string, minLength: 1, maxLength: 64 }\n        - $ref",
        "          required: true\n          schema: { type: string, format: uuid }\n        - $ref",
    );
    assert_ne!(declared, fixture);
    let spec = dir.join("uuid.yaml");
    std::fs::write(&spec, declared).unwrap();
    spec
}

/// Every broken server of the suite, one way of getting the key contract
/// wrong each, with the verdicts it must get (in [`ORDER`]). The checks
/// after `replay` are decided from effects where the replay fails but each
/// answer names its order, which `GET /v1/orders/{id}` reads back.
#[test]
fn each_server_gets_the_verdicts_it_must() {
    let dir = tempfile::tempdir().unwrap();
    let uuid = uuid_spec(dir.path());
    let uuid = uuid.to_str().unwrap();
    let cases: [(&str, &str, &str); 15] = [
        ("correct", SPEC, "H H H H H H H"),
        // Check-then-insert without a lock, and a lock around the lookup only.
        ("race", SPEC, "H H H F H H H"),
        ("lookup-lock", SPEC, "H H H F H H H"),
        // The key never looked up: every request an order, counted by reading back.
        ("ignore-key", SPEC, "F F* H* F* H H H*"),
        // A new id made up for each replay: the ids do not read back.
        ("regenerate", SPEC, "F H* H* H* H H H*"),
        ("ignore-body", SPEC, "H F H H H H H"),
        ("body-in-key", SPEC, "H F H H H H H"),
        ("global-keys", SPEC, "H H F H H H H"),
        ("store-validation", SPEC, "H H H H H H F"),
        // The original order replayed under 409.
        ("wrong-status", SPEC, "F H* H* H* H H H*"),
        // `Idempotent-Replayed: false` on originals is no replay.
        ("false-header", SPEC, "H H H H H H H"),
        // Keys the spec declares as UUIDs, and a service that takes only those.
        ("uuid-keys", uuid, "H H H H H H H"),
        // A key with a space is taken; the spec forbids no character: a note.
        ("any-characters", SPEC, "H H H H H H H"),
        // The first answer of every key is a 500, stored and replayed.
        ("stored-5xx", SPEC, "F U U U U H U"),
        // Keys the spec does not declare as UUIDs: every keyed request a 500.
        ("uuid-keys", SPEC, "U U U U U H U"),
    ];
    let mut wrong = Vec::new();
    for (server, spec, expected) in cases {
        let Some(running) = Orders::start(server, &[]) else {
            return;
        };
        let (code, report) = probe_with(spec, &running.url, &[]);
        let got = verdicts(&report);
        if got != expected {
            wrong.push(format!(
                "{server} ({spec}): got {got}, want {expected}\n{report:#}"
            ));
        }
        let failing = expected.contains('F') || expected.contains('U');
        assert_eq!(code, i32::from(failing), "{server}: {report:#}");
        let checks = report["operations"][0]["checks"].as_array().unwrap();
        for c in checks {
            if c["outcome"] == "failed" {
                assert!(
                    !c["evidence"].as_array().unwrap().is_empty(),
                    "{server}: a failure shows its requests: {c:#}"
                );
            }
        }
        let check = |name: &str| checks.iter().find(|c| c["check"] == name).unwrap().clone();
        match server {
            "race" | "lookup-lock" => {
                // Every round runs and says what it made.
                let tries = check("concurrent-duplicates")["tries"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(
                    tries.contains("round 1: ") && tries.contains("round 2: "),
                    "{tries}"
                );
            }
            "ignore-key" => {
                let reason = check("concurrent-duplicates")["reason"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(reason.contains("effects in round 1"), "{reason}");
                assert!(report["requests"]["reads"].as_u64().unwrap() > 0);
            }
            "wrong-status" => {
                let tries = check("concurrent-duplicates")["tries"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(tries.contains("round 1: 1 effect"), "{tries}");
                assert!(check("replay")["reason"].as_str().unwrap().contains("409"));
            }
            "uuid-keys" if spec == uuid => {
                let key = report["created"][0]["key"].as_str().unwrap();
                assert_eq!(
                    uuid::Uuid::parse_str(key).unwrap().get_version_num(),
                    4,
                    "{key}"
                );
            }
            "uuid-keys" => {
                let reason = check("replay")["reason"].as_str().unwrap().to_owned();
                assert!(
                    reason.contains("answered 500 to a well-formed request"),
                    "{reason}"
                );
                assert!(reason.contains("format: uuid"), "{reason}");
            }
            "any-characters" => {
                let notes = check("key-bounds")["notes"].to_string();
                assert!(
                    notes.contains("characters:") && notes.contains("not a failure"),
                    "{notes}"
                );
            }
            "stored-5xx" => {
                let reason = check("replay")["reason"].as_str().unwrap().to_owned();
                assert!(reason.contains("stored under the key"), "{reason}");
            }
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn the_human_report_points_at_the_operation_and_other_formats_hold_the_same() {
    let Some(server) = Orders::start("ignore-body", &[]) else {
        return;
    };
    let base = [
        "probe",
        SPEC,
        "--base-url",
        server.url.as_str(),
        "--allow-writes",
        "--header",
        "X-Account-Id: acct-1",
    ];
    let human = idem(&base);
    assert_eq!(human.status.code(), Some(1));
    let out = text(&human.stdout);
    assert!(out.contains("error[PROBE002]"), "{out}");
    assert!(out.contains("fixtures/probe.yaml:14:5"), "{out}");
    assert!(
        out.contains("skipped   PROBE003 caller-isolation (no `--second-caller` was given)"),
        "{out}"
    );
    assert!(text(&human.stderr).contains("probe: up to 50 requests"));

    let sarif = idem(&[&base[..], &["--format", "sarif"]].concat());
    let sarif: Value = serde_json::from_slice(&sarif.stdout).unwrap();
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{sarif:#}");
    assert_eq!(results[0]["ruleId"], "PROBE002");
    let location = &results[0]["locations"][0]["physicalLocation"];
    assert!(
        location["artifactLocation"]["uri"]
            .as_str()
            .unwrap()
            .ends_with("fixtures/probe.yaml")
    );
    assert_eq!(location["region"]["startLine"], 14);

    let junit = idem(&[&base[..], &["--format", "junit"]].concat());
    assert_eq!(junit.status.code(), Some(1));
    let xml = text(&junit.stdout);
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(xml.contains("failures=\"1\""), "{xml}");
    assert_eq!(xml.matches("<testcase ").count(), 7, "{xml}");
    assert_eq!(xml.matches("<failure ").count(), 1, "{xml}");
    assert_eq!(xml.matches("<skipped ").count(), 1, "{xml}");
    assert!(!xml.contains("\u{1b}"));
}

#[test]
fn writes_need_consent_and_a_dry_run_sends_nothing() {
    // Nothing listens on port 9: a request would fail the run.
    let dry = idem(&[
        "probe",
        SPEC,
        "--base-url",
        "http://127.0.0.1:9",
        "--dry-run",
    ]);
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry.stderr));
    let plan = text(&dry.stdout);
    assert!(
        plan.contains("createOrder (POST /v1/orders): 50 requests"),
        "{plan}"
    );
    assert!(
        plan.contains("PROBE004 concurrent-duplicates      40 requests"),
        "{plan}"
    );
    assert!(plan.contains("addNote: never sent"), "{plan}");
    assert!(
        plan.contains("50 requests to http://127.0.0.1:9 at most"),
        "{plan}"
    );

    let refused = idem(&["probe", SPEC, "--base-url", "http://127.0.0.1:9"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("pass `--allow-writes`"));
}

#[test]
fn bad_calls_and_broken_services_exit_2_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let reads_only = dir.path().join("reads.yaml");
    std::fs::write(
        &reads_only,
        "openapi: 3.0.3\ninfo: { title: R, version: '1' }\npaths:\n  /a:\n    get:\n      responses:\n        '200': { description: ok }\n",
    )
    .unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![reads_only.display().to_string()],
            "declares no keyed operation",
        ),
        (
            vec![SPEC.into(), "--operation".into(), "createOrdr".into()],
            "did you mean `createOrder`?",
        ),
        (
            vec![SPEC.into(), "--header".into(), "no colon".into()],
            "expected `NAME: VALUE`",
        ),
        (
            vec![
                SPEC.into(),
                "--body".into(),
                "createOrder=@/nonexistent".into(),
            ],
            "cannot read `/nonexistent`",
        ),
        (vec!["../fixtures/missing.yaml".into()], "missing.yaml"),
    ];
    for (args, says) in cases {
        let mut all = vec!["probe".to_owned()];
        all.extend(args);
        all.extend([
            "--base-url".into(),
            "http://127.0.0.1:9".into(),
            "--allow-writes".into(),
        ]);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let out = idem(&refs);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert!(
            text(&out.stderr).contains(says),
            "{all:?}: {}",
            text(&out.stderr)
        );
    }

    let unreachable = idem(&[
        "probe",
        SPEC,
        "--base-url",
        "http://127.0.0.1:9",
        "--allow-writes",
    ]);
    assert_eq!(unreachable.status.code(), Some(2));
    assert!(text(&unreachable.stderr).contains("cannot connect"));

    for (defect, says) in [("hang", "within the timeout"), ("garbage", "not HTTP")] {
        let Some(server) = Orders::start(defect, &[]) else {
            return;
        };
        let started = Instant::now();
        let out = idem(&[
            "probe",
            SPEC,
            "--base-url",
            &server.url,
            "--allow-writes",
            "--timeout",
            "1",
        ]);
        assert_eq!(out.status.code(), Some(2), "{defect}");
        assert!(
            text(&out.stderr).contains(says),
            "{defect}: {}",
            text(&out.stderr)
        );
        // One timeout, not one per planned request.
        assert!(started.elapsed() < Duration::from_secs(20), "{defect}");
    }
}

#[test]
fn checks_have_pages() {
    let out = idem(&["explain", "PROBE004"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("# concurrent-duplicates (PROBE004)"));
    let out = idem(&["explain", "failed-request-not-stored"]);
    assert!(text(&out.stdout).contains("PROBE007"));
    // The committed pages are what the checks say.
    for check in idem_codegen::probe::CHECKS {
        let path = format!("../docs/probe/{}.md", check.slug);
        let page = probe_page(check);
        if std::env::var_os("IDEM_BLESS").is_some() {
            std::fs::create_dir_all("../docs/probe").unwrap();
            std::fs::write(&path, &page).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == page,
            "{path} is stale: run `IDEM_BLESS=1 cargo test -p idem-codegen --test probe`"
        );
    }
}

fn probe_page(check: &idem_codegen::probe::Check) -> String {
    format!(
        "<!-- @generated from idem-codegen/src/probe.rs by `IDEM_BLESS=1 cargo test -p idem-codegen --test probe`; edit the check, not this page -->\n\n{}",
        check.page()
    )
}

#[test]
fn a_parameter_the_probe_cannot_make_is_given_with_param() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("accounts.yaml");
    std::fs::write(
        &spec,
        "openapi: 3.0.3\ninfo: { title: A, version: '1' }\npaths:\n  /v1/accounts/{account}/orders:\n    post:\n      operationId: createOrder\n      x-idempotency: { key: required }\n      parameters:\n        - { name: account, in: path, required: true, schema: { type: string, pattern: '^AC[0-9]{4}$' } }\n        - { name: Idempotency-Key, in: header, required: true, schema: { type: string, maxLength: 64 } }\n      requestBody:\n        content:\n          application/json:\n            schema: { type: object, required: [item], properties: { item: { type: string } } }\n      responses:\n        '201': { description: made }\n        '409': { description: conflict }\n",
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let base = [
        "probe",
        spec,
        "--base-url",
        "http://127.0.0.1:9",
        "--dry-run",
    ];
    let out = idem(&base);
    let plan = text(&out.stdout);
    assert!(
        plan.contains("createOrder (POST /v1/accounts/{account}/orders): 0 requests")
            && plan.contains("give its value with `--param account=VALUE`"),
        "{plan}"
    );
    let out = idem(&[&base[..], &["--param", "account=AC1234"]].concat());
    let plan = text(&out.stdout);
    assert!(
        plan.contains("createOrder (POST /v1/accounts/{account}/orders): 50 requests"),
        "{plan}"
    );
    let out = idem(&[&base[..], &["--param", "=x"]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("expected `NAME=VALUE`"));
}

/// A key in the body (Square's and Dwolla's style): the probe writes its own
/// key into the field, over any the example holds, and leaves the field out
/// for the missing-key check.
#[test]
fn a_key_in_the_body_is_probed_like_a_header() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("body-key.yaml");
    let fixture = std::fs::read_to_string(SPEC).unwrap();
    let body_keyed = fixture
        .replace(
            "      x-idempotency:\n        effect: create\n        key: required\n      parameters:\n        - name: Idempotency-Key\n          in: header\n          required: true\n          schema: { type: string, minLength: 1, maxLength: 64 }\n",
            "      x-idempotency:\n        effect: create\n        key: required\n        key-in: body\n      parameters:\n",
        )
        .replace(
            "example: { item: probe-widget, quantity: 2 }",
            "example: { item: probe-widget, quantity: 2, idempotency_key: from-the-example }",
        )
        .replace(
            "      required: [item, quantity]\n      properties:\n",
            "      required: [item, quantity, idempotency_key]\n      properties:\n        idempotency_key: { type: string, minLength: 1, maxLength: 64 }\n",
        );
    assert_ne!(body_keyed, fixture);
    std::fs::write(&spec, &body_keyed).unwrap();
    let Some(server) = Orders::start("correct", &["--key-in", "body"]) else {
        return;
    };
    let (code, report) = probe_spec(&spec, &server.url);
    assert_eq!(code, 0, "{report:#}");
    for (check, outcome) in outcomes(&report) {
        assert_eq!(outcome, "held", "{check}: {report:#}");
    }
    let sent = report.to_string();
    assert!(!sent.contains("from-the-example"), "{report:#}");
}

/// `in-flight: accepted`: duplicates of a running request are answered `202`
/// with where to follow it. They are not second originals.
#[test]
fn accepted_duplicates_are_not_second_originals() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("accepted.yaml");
    let fixture = std::fs::read_to_string(SPEC).unwrap();
    let accepted = fixture
        .replace(
            "  scope: account\n",
            "  scope: account\n  in-flight: accepted\n",
        )
        .replace(
            "        \"400\": { $ref: \"#/components/responses/Problem\" }\n        \"401\"",
            "        \"202\": { description: Still running; follow the status URL. }\n        \"400\": { $ref: \"#/components/responses/Problem\" }\n        \"401\"",
        );
    assert_eq!(accepted.matches("in-flight: accepted").count(), 1);
    assert!(accepted.contains("\"202\""));
    std::fs::write(&spec, &accepted).unwrap();
    let Some(server) = Orders::start("correct", &["--in-flight", "accepted"]) else {
        return;
    };
    let (code, report) = probe_spec(&spec, &server.url);
    let concurrent = report["operations"][0]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "concurrent-duplicates")
        .unwrap();
    assert_eq!(concurrent["outcome"], "held", "{report:#}");
    assert_eq!(code, 0, "{report:#}");
}
