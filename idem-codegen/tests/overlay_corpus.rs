#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The example overlays of `examples/overlays/` on the corpus copies of the
//! specs they were written for: what the audit reports before and after,
//! the docs page, and the generated Stripe client on the wire. Skips,
//! saying so, when `../shared/specs` is absent (`IDEM_SPECS_DIR` points
//! elsewhere).

use std::path::{Path, PathBuf};
use std::process::Command;

mod cli_support;
mod corpus_support;
use cli_support::idem;
use corpus_support::corpus;
use idem_codegen::cli::{EXIT_CLEAN, EXIT_FINDINGS};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn example(name: &str) -> String {
    workspace()
        .join("examples/overlays")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// (errors, warnings, keyed operations, unkeyed-write errors) of a JSON audit.
fn counts(stdout: &str) -> (u64, u64, usize, usize) {
    let v: serde_json::Value = serde_json::from_str(stdout).unwrap();
    let keyed = v["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["class"] == "keyed")
        .count();
    let unkeyed = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["rule"] == "unkeyed-unsafe-write")
        .count();
    (
        v["summary"]["errors"].as_u64().unwrap(),
        v["summary"]["warnings"].as_u64().unwrap(),
        keyed,
        unkeyed,
    )
}

#[test]
fn the_stripe_overlay_keys_every_post() {
    let Some(specs) = corpus() else { return };
    let spec = specs.join("stripe/spec3.yaml");
    let spec = spec.to_str().unwrap();
    let before = idem(&["audit", "--format", "json", spec]);
    assert_eq!(before.code, EXIT_FINDINGS);
    // One POST reads as a query in its words (`…/validate`): a warning.
    assert_eq!(counts(&before.stdout), (221, 1, 0, 221));

    let overlay = example("stripe.yaml");
    let after = idem(&["audit", "--format", "json", spec, "--overlay", &overlay]);
    assert_eq!(after.code, EXIT_CLEAN, "{}", after.stderr);
    assert_eq!(counts(&after.stdout), (0, 0, 222, 0));
    assert!(
        after.stderr.is_empty(),
        "every target matched: {}",
        after.stderr
    );

    // The docs page lists the POSTs as keyed.
    let dir = tempfile::tempdir().unwrap();
    let docs = idem(&[
        "docs",
        spec,
        "--overlay",
        &overlay,
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(docs.code, EXIT_CLEAN, "{}", docs.stderr);
    let page = std::fs::read_to_string(dir.path().join("idempotency.md")).unwrap();
    assert!(page.contains(
        "| POST | `/v1/customers` | `PostCustomers` | optional | header `Idempotency-Key` |"
    ));
    assert!(!page.contains("`PostCustomers` | none"));
}

#[test]
fn the_netlify_overlay_declares_what_the_api_does() {
    let Some(specs) = corpus() else { return };
    let spec = specs.join("netlify/swagger.yml");
    let spec = spec.to_str().unwrap();
    let before = idem(&["audit", "--format", "json", spec]);
    assert_eq!(before.code, EXIT_FINDINGS);
    assert_eq!(counts(&before.stdout), (51, 0, 0, 51));
    let after = idem(&[
        "audit",
        "--format",
        "json",
        spec,
        "--overlay",
        &example("netlify.yaml"),
    ]);
    assert_eq!(after.code, EXIT_CLEAN, "{}", after.stderr);
    let (errors, _, keyed, unkeyed) = counts(&after.stdout);
    assert_eq!((errors, keyed, unkeyed), (0, 0, 0));
    assert!(
        after.stderr.is_empty(),
        "every target matched: {}",
        after.stderr
    );
}

/// The program run against the generated Stripe client: a loopback server
/// that reads each request whole, drops the connection on the first one
/// (the reply is lost) and answers the others; two logical calls to
/// `POST /v1/customers`. It prints one line per request the server saw.
const CAPTURE: &str = r##"
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn read_request(socket: &mut TcpStream) -> String {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "the client closed the connection mid-request");
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return text;
            }
        }
    }
}

fn header(request: &str, name: &str) -> String {
    request
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
        .unwrap_or_default()
}

#[tokio::main]
async fn main() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        for n in 0..3 {
            let (mut socket, _) = listener.accept().await.unwrap();
            let request = read_request(&mut socket).await;
            let line = request.lines().next().unwrap_or_default().to_owned();
            let body = request.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
            println!(
                "request\t{line}\t{}\t{}\t{body}",
                header(&request, "idempotency-key"),
                header(&request, "authorization"),
            );
            if n == 0 {
                continue; // dropped: the reply never arrives
            }
            let reply = r#"{"id":"cus_1","object":"customer","created":1700000000,"livemode":false}"#;
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
            socket.write_all(response.as_bytes()).await.unwrap();
        }
    });
    let client = stripe_api::Client::new(&base).unwrap().bearer_auth("sk_test_123");
    let first = client
        .customers()
        .create()
        .body(&stripe_api::PostCustomersRequest {
            email: Some("jo@example.com".into()),
            ..Default::default()
        })
        .send()
        .await;
    println!("call\t{}", first.map(|c| c.id).unwrap_or_else(|e| format!("error: {e}")));
    let second = client.customers().create().send().await;
    println!("call\t{}", second.map(|c| c.id).unwrap_or_else(|e| format!("error: {e}")));
    server.await.unwrap();
}
"##;

#[test]
fn the_generated_stripe_client_sends_one_key_per_call() {
    let Some(specs) = corpus() else { return };
    let root = workspace();
    let out = root.join("target/overlay-stripe");
    let runtime = root.join("idem-runtime");
    let generated = idem(&[
        "generate",
        specs.join("stripe/spec3.yaml").to_str().unwrap(),
        "--overlay",
        &example("stripe.yaml"),
        "--client",
        "--name",
        "stripe-api",
        "--runtime-path",
        runtime.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(generated.code, EXIT_CLEAN, "{}", generated.stderr);
    // The capture program, with the versions this workspace has locked.
    let manifest = out.join("Cargo.toml");
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    text.push_str(
        "\n[dev-dependencies]\ntokio = { version = \"1\", features = [\"rt-multi-thread\", \"macros\", \"net\", \"io-util\"] }\n\n[workspace]\n",
    );
    std::fs::write(&manifest, text).unwrap();
    std::fs::create_dir_all(out.join("examples")).unwrap();
    std::fs::write(out.join("examples/capture.rs"), CAPTURE).unwrap();
    std::fs::copy(root.join("Cargo.lock"), out.join("Cargo.lock")).unwrap();
    let run = Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--example", "capture"])
        .current_dir(&out)
        .env("CARGO_TARGET_DIR", out.join("target"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let requests: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("request\t"))
        .map(|l| l.split('\t').collect())
        .collect();
    let calls: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("call\t"))
        .collect();
    assert_eq!(calls, ["cus_1", "cus_1"], "{stdout}");
    assert_eq!(requests.len(), 3, "{stdout}");
    for r in &requests {
        assert_eq!(r[1], "POST /v1/customers HTTP/1.1");
        assert_eq!(r[3], "Bearer sk_test_123");
    }
    let keys: Vec<&str> = requests.iter().map(|r| r[2]).collect();
    assert!(!keys[0].is_empty(), "the first attempt carries a key");
    assert_eq!(keys[0], keys[1], "the retry after the lost reply reuses it");
    assert_ne!(keys[1], keys[2], "a second logical call mints a new one");
    assert!(!keys[2].is_empty());
    assert_eq!(requests[0][4], "email=jo%40example.com");
    assert_eq!(requests[1][4], requests[0][4]);
}
