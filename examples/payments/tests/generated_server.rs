#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The protocol's gates, through the *generated* server: the demo binary's
//! `serve` (the generated router over the generated `Api` trait) as a real
//! process on loopback, on SQLite and, when `IDEM_TEST_DATABASE_URL` names
//! one, PostgreSQL.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_runtime::reqwest;
use idem_runtime::serde_json::{Value, json};

struct Server {
    child: Option<std::process::Child>,
    listen: SocketAddr,
    database_url: String,
    bank: Option<String>,
}

impl Server {
    fn start(database_url: &str, bank: Option<String>) -> Server {
        let listen = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut server = Server {
            child: None,
            listen,
            database_url: database_url.to_owned(),
            bank,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_payments-demo"));
        command
            .args(["serve", "--database-url", &self.database_url, "--listen"])
            .arg(self.listen.to_string());
        if let Some(bank) = &self.bank {
            command.args(["--bank-url", bank]);
        }
        self.child = Some(command.spawn().expect("start the server"));
        let started = Instant::now();
        while std::net::TcpStream::connect(self.listen).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listen)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The stores to run on: a fresh SQLite file, and PostgreSQL when configured.
fn stores(dir: &tempfile::TempDir) -> Vec<String> {
    let mut urls = vec![format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("payments.db").display()
    )];
    match std::env::var("IDEM_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => urls.push(url),
        _ => eprintln!("skipped on PostgreSQL: IDEM_TEST_DATABASE_URL is not set"),
    }
    urls
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid_ish())
}

fn uuid_ish() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos:x}")
}

async fn charge(
    http: &reqwest::Client,
    server: &Server,
    account: &str,
    key: &str,
    body: &Value,
) -> reqwest::Response {
    http.post(server.url("/v1/charges"))
        .header("x-account-id", account)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn charges(http: &reqwest::Client, server: &Server, account: &str) -> Vec<Value> {
    let list: Value = http
        .get(server.url("/v1/charges"))
        .header("x-account-id", account)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list.as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_concurrent_same_key_requests_make_one_charge() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir) {
        let server = Server::start(&url, None);
        let http = reqwest::Client::new();
        let (account, key) = (unique("acct"), unique("key"));
        let body = json!({"order_id": "order-1", "amount": 1200, "currency": "usd"});
        let mut tasks = Vec::new();
        for _ in 0..100 {
            let (http, account, key, body) =
                (http.clone(), account.clone(), key.clone(), body.clone());
            let url = server.url("/v1/charges");
            tasks.push(tokio::spawn(async move {
                let r = http
                    .post(url)
                    .header("x-account-id", &account)
                    .header("idempotency-key", &key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let replayed = r.headers().contains_key("idempotent-replayed");
                let status = r.status().as_u16();
                let body: Value = r.json().await.unwrap_or(Value::Null);
                (status, replayed, body)
            }));
        }
        let (mut originals, mut replays, mut in_use) = (0, 0, 0);
        let mut ids = std::collections::BTreeSet::new();
        for task in tasks {
            let (status, replayed, body) = task.await.unwrap();
            match (status, replayed) {
                (201, false) => originals += 1,
                (201, true) => replays += 1,
                (409, _) => {
                    assert_eq!(body["code"], "idempotency_key_in_use", "{body}");
                    in_use += 1;
                }
                other => panic!("{url}: unexpected answer {other:?}: {body}"),
            }
            if status == 201 {
                ids.insert(body["id"].to_string());
            }
        }
        assert_eq!(originals, 1, "{url}: exactly one request ran");
        assert_eq!(originals + replays + in_use, 100);
        assert_eq!(ids.len(), 1, "{url}: every replay is the same charge");
        assert_eq!(
            charges(&http, &server, &account).await.len(),
            1,
            "{url}: one effect"
        );
    }
}

#[tokio::test]
async fn a_reused_key_with_another_body_is_refused_without_effect() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir) {
        let server = Server::start(&url, None);
        let http = reqwest::Client::new();
        let (account, key) = (unique("acct"), unique("key"));
        let first = json!({"order_id": "order-1", "amount": 1200, "currency": "usd"});
        assert_eq!(
            charge(&http, &server, &account, &key, &first)
                .await
                .status(),
            201
        );
        let other = json!({"order_id": "order-1", "amount": 9900, "currency": "usd"});
        let r = charge(&http, &server, &account, &key, &other).await;
        assert_eq!(r.status(), 409, "{url}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "idempotency_key_reused", "{url}");
        let all = charges(&http, &server, &account).await;
        assert_eq!(all.len(), 1, "{url}");
        assert_eq!(all[0]["amount"], 1200);
    }
}

#[tokio::test]
async fn two_callers_with_one_key_value_never_see_each_other() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir) {
        let server = Server::start(&url, None);
        let http = reqwest::Client::new();
        let key = unique("shared-key");
        let (a, b) = (unique("acct-a"), unique("acct-b"));
        let body_a = json!({"order_id": "a-1", "amount": 100, "currency": "usd"});
        let body_b = json!({"order_id": "b-1", "amount": 200, "currency": "eur"});
        let ra: Value = charge(&http, &server, &a, &key, &body_a)
            .await
            .json()
            .await
            .unwrap();
        let rb = charge(&http, &server, &b, &key, &body_b).await;
        assert_eq!(rb.status(), 201, "{url}");
        assert!(!rb.headers().contains_key("idempotent-replayed"), "{url}");
        let rb: Value = rb.json().await.unwrap();
        assert_ne!(ra["id"], rb["id"]);
        assert_eq!(rb["order_id"], "b-1");
        assert_eq!(charges(&http, &server, &a).await.len(), 1);
        assert_eq!(charges(&http, &server, &b).await.len(), 1);
    }
}

#[tokio::test]
async fn undecodable_inputs_are_clear_400s_that_record_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = stores(&dir).remove(0);
    let server = Server::start(&url, None);
    let http = reqwest::Client::new();
    let (account, key) = (unique("acct"), unique("key"));

    // A wrong type inside the body names the field.
    let bad = json!({"order_id": "order-1", "amount": "twelve", "currency": "usd"});
    let r = charge(&http, &server, &account, &key, &bad).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "invalid_request");
    assert_eq!(body["field"], "body field `amount`", "{body}");

    // Malformed JSON.
    let r = http
        .post(server.url("/v1/charges"))
        .header("x-account-id", &account)
        .header("idempotency-key", &key)
        .header("content-type", "application/json")
        .body("{\"order_id\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // A business rule the handler checks before writing: unrecorded too.
    let zero = json!({"order_id": "order-1", "amount": 0, "currency": "usd"});
    assert_eq!(
        charge(&http, &server, &account, &key, &zero).await.status(),
        400
    );

    // None of the refusals kept the key: the corrected request runs.
    let good = json!({"order_id": "order-1", "amount": 1200, "currency": "usd"});
    let r = charge(&http, &server, &account, &key, &good).await;
    assert_eq!(r.status(), 201);
    assert!(!r.headers().contains_key("idempotent-replayed"));

    // Path and query parameters of the wrong type.
    let r = http
        .get(server.url("/v1/charges/abc"))
        .header("x-account-id", &account)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["field"], "path parameter `charge_id`", "{body}");
    let r = http
        .get(server.url("/v1/charges?limit=ten"))
        .header("x-account-id", &account)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["field"], "query parameter `limit`", "{body}");

    // A missing required header.
    let r = http.get(server.url("/v1/charges")).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["field"], "header `X-Account-Id`", "{body}");

    // Unknown paths and methods.
    let r = http.get(server.url("/v2/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "not_found");
    let r = http.delete(server.url("/v1/charges")).send().await.unwrap();
    assert_eq!(r.status(), 405);
}

/// A bank on loopback that counts calls per key, and can cut the server
/// off (SIGKILL) the first time it is notified.
#[derive(Default)]
struct Bank {
    transfers: HashMap<String, usize>,
    notifications: HashMap<String, usize>,
}

async fn bank(server: Arc<Mutex<Option<Server>>>, state: Arc<Mutex<Bank>>) -> String {
    use idem_runtime::axum::{self, http::HeaderMap, routing::post};
    let transfers = {
        let state = Arc::clone(&state);
        move |headers: HeaderMap| {
            let state = Arc::clone(&state);
            async move {
                let key = headers["idempotency-key"].to_str().unwrap().to_owned();
                *state
                    .lock()
                    .unwrap()
                    .transfers
                    .entry(key.clone())
                    .or_default() += 1;
                format!("ref-{}", &key[..8])
            }
        }
    };
    let notifications = move |headers: HeaderMap| {
        let (state, server) = (Arc::clone(&state), Arc::clone(&server));
        async move {
            let key = headers["idempotency-key"].to_str().unwrap().to_owned();
            let first = {
                let mut s = state.lock().unwrap();
                let n = s.notifications.entry(key).or_default();
                *n += 1;
                *n == 1
            };
            if first {
                // The server dies between recording `submit_to_bank` and
                // hearing back from `notify_vendor`.
                if let Some(server) = server.lock().unwrap().as_mut() {
                    server.kill();
                }
            }
            "notified"
        }
    };
    let app = axum::Router::new()
        .route("/transfers", post(transfers))
        .route("/notifications", post(notifications));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payout_killed_between_phases_resumes_without_repeating_a_finished_call() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir) {
        let slot: Arc<Mutex<Option<Server>>> = Arc::new(Mutex::new(None));
        let state = Arc::new(Mutex::new(Bank::default()));
        let bank_url = bank(Arc::clone(&slot), Arc::clone(&state)).await;
        let server = Server::start(&url, Some(bank_url));
        let base = server.url("");
        *slot.lock().unwrap() = Some(server);
        let http = reqwest::Client::new();
        let (account, key) = (unique("acct"), unique("payout"));
        let body = json!({"vendor_id": "v-1", "amount": 5000});
        let send = || {
            http.post(format!("{base}/v1/payouts"))
                .header("x-account-id", &account)
                .header("idempotency-key", &key)
                .json(&body)
                .send()
        };
        // The first attempt dies with the server.
        let _ = send().await;
        assert!(
            slot.lock()
                .unwrap()
                .as_ref()
                .is_some_and(|s| s.child.is_none()),
            "{url}: the server was killed between the phases"
        );
        // Restart; after the lock timeout (2 s) the retry takes the key over
        // and resumes after `submit_to_bank`.
        let mut server = slot.lock().unwrap().take().unwrap();
        server.spawn();
        let restarted = server;
        tokio::time::sleep(Duration::from_millis(2300)).await;
        let mut answer = None;
        for _ in 0..50 {
            let r = send().await.unwrap();
            if r.status() == 201 {
                answer = Some(r.json::<Value>().await.unwrap());
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let answer = answer.unwrap_or_else(|| panic!("{url}: the payout never completed"));
        assert_eq!(answer["notified"], true);
        let bank = state.lock().unwrap();
        assert_eq!(bank.transfers.len(), 1, "{url}: one transfer key");
        assert_eq!(
            bank.transfers.values().sum::<usize>(),
            1,
            "{url}: the finished transfer was not repeated"
        );
        // The interrupted notification ran again with the same derived key.
        assert_eq!(bank.notifications.len(), 1, "{url}");
        assert_eq!(bank.notifications.values().sum::<usize>(), 2, "{url}");
        drop(restarted);
    }
}

#[test]
fn the_demo_charges_through_loss_and_a_crash_with_no_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let mut urls = vec![None];
    if let Ok(url) = std::env::var("IDEM_TEST_DATABASE_URL")
        && !url.is_empty()
    {
        urls.push(Some(url));
    }
    for url in urls {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_payments-demo"));
        command.args(["--orders", "300", "--out"]).arg(dir.path());
        if let Some(url) = &url {
            command.args(["--database-url", url]);
        }
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{url:?}:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let row = stdout
            .lines()
            .find(|l| l.starts_with("idem (keyed"))
            .unwrap_or_else(|| panic!("no idem row:\n{stdout}"));
        let numbers: Vec<&str> = row.split_whitespace().collect();
        // orders charges duplicates unknown reconciled overcharged lost seconds
        let n = numbers.len();
        assert_eq!(numbers[n - 8], "300", "{row}");
        assert_eq!(numbers[n - 7], "300", "charges: {row}");
        assert_eq!(numbers[n - 6], "0", "duplicates: {row}");
        assert_eq!(numbers[n - 2], "0", "lost: {row}");
        assert!(dir.path().join("idempotency.html").exists());
    }
}
