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
use std::time::Duration;

use idem_runtime::reqwest;
use idem_runtime::serde_json::{Value, json};
use payments_demo::bank::{Answer, Bank};

struct Server {
    child: Option<std::process::Child>,
    listen: SocketAddr,
    database_url: String,
    /// More arguments for `serve`.
    extra: Vec<String>,
}

impl Server {
    fn start(database_url: &str, bank: Option<String>) -> Server {
        let extra = bank.map(|b| vec!["--bank-url".to_owned(), b]);
        Server::start_with(database_url, extra.unwrap_or_default())
    }

    fn start_with(database_url: &str, extra: Vec<String>) -> Server {
        let mut server = Server {
            child: None,
            // The server picks its port when it first starts.
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            database_url: database_url.to_owned(),
            extra,
        };
        server.spawn();
        server
    }

    /// Starts the process and waits until it says where it listens: on a
    /// port of its own the first time, on the same one after a restart.
    fn spawn(&mut self) {
        use std::io::BufRead as _;
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_payments-demo"));
        command
            .args(["serve", "--database-url", &self.database_url, "--listen"])
            .arg(self.listen.to_string())
            .args(&self.extra)
            .stdout(std::process::Stdio::piped());
        let mut child = command.spawn().expect("start the server");
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        self.child = Some(child);
        let (said, first) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = stdout.read_line(&mut line);
            let _ = said.send(line);
            std::io::copy(&mut stdout, &mut std::io::sink())
        });
        let line = first
            .recv_timeout(Duration::from_secs(30))
            .expect("the server did not start within 30 s");
        self.listen = line
            .trim_end()
            .strip_prefix("listening on ")
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| panic!("the server did not start: {line:?}"));
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

/// The stores to run on: a fresh SQLite file, and, when configured, a
/// fresh PostgreSQL database. Each test gets its own: a server's completer
/// resumes every due payout in its store, and must not find another test's.
async fn stores(dir: &tempfile::TempDir) -> Vec<String> {
    let mut urls = vec![format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("payments.db").display()
    )];
    match fresh_postgres().await {
        Some(url) => urls.push(url),
        None => eprintln!("skipped on PostgreSQL: IDEM_TEST_DATABASE_URL is not set"),
    }
    urls
}

/// A new, empty database on the configured PostgreSQL server.
async fn fresh_postgres() -> Option<String> {
    let url = std::env::var("IDEM_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())?;
    let admin = idem_runtime::sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let name = format!("payments_{}", uuid_ish());
    idem_runtime::sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let (server, _) = url.rsplit_once('/').unwrap();
    Some(format!("{server}/{name}"))
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid_ish())
}

fn uuid_ish() -> String {
    format!("{:032x}", rand::random::<u128>())
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
    for url in stores(&dir).await {
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
    for url in stores(&dir).await {
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
    for url in stores(&dir).await {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_inputs_are_clear_400s_that_record_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir).await {
        let server = Server::start(&url, None);
        let http = reqwest::Client::new();
        let (account, key) = (unique("acct"), unique("key"));

        // A wrong type inside the body names the field.
        let bad = json!({"order_id": "order-1", "amount": "twelve", "currency": "usd"});
        let r = charge(&http, &server, &account, &key, &bad).await;
        assert_eq!(r.status(), 400);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "invalid_request");
        assert_eq!(body["field"], "body.amount", "{body}");

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

        // A keyword of the schema (`amount` has `minimum: 1`): refused before
        // the claim, naming the field and the rule.
        let zero = json!({"order_id": "order-1", "amount": 0, "currency": "usd"});
        let r = charge(&http, &server, &account, &key, &zero).await;
        assert_eq!(r.status(), 400);
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            (body["field"].as_str(), body["message"].as_str()),
            (Some("body.amount"), Some("must be at least 1")),
            "{body}"
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
        assert_eq!(body["field"], "path.charge_id", "{body}");
        let r = http
            .get(server.url("/v1/charges?limit=ten"))
            .header("x-account-id", &account)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["field"], "query.limit", "{body}");

        // The caller's scope header, on a route without a key: missing is
        // `401`, empty `400`, exactly as on keyed routes.
        let r = http.get(server.url("/v1/charges")).send().await.unwrap();
        assert_eq!(r.status(), 401);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "caller_unidentified", "{body}");
        let r = http
            .get(server.url("/v1/charges"))
            .header("x-account-id", "")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "caller_scope_invalid", "{body}");
        // A limit below the spec's `minimum: 1`.
        let r = http
            .get(server.url("/v1/charges?limit=0"))
            .header("x-account-id", &account)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["field"], "query.limit", "{body}");

        // Unknown paths and methods.
        let r = http.get(server.url("/v2/nothing")).send().await.unwrap();
        assert_eq!(r.status(), 404);
        assert_eq!(r.json::<Value>().await.unwrap()["code"], "not_found");
        let r = http.delete(server.url("/v1/charges")).send().await.unwrap();
        assert_eq!(r.status(), 405);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payout_killed_between_phases_resumes_without_repeating_a_finished_call() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir).await {
        let slot: Arc<Mutex<Option<Server>>> = Arc::new(Mutex::new(None));
        let bank = Bank::start().await.unwrap();
        // The server dies between recording `submit_to_bank` and hearing
        // back from `notify_vendor`.
        let killer = Arc::clone(&slot);
        bank.on_first_notification(move || {
            if let Some(server) = killer.lock().unwrap().as_mut() {
                server.kill();
            }
        });
        let server = Server::start(&url, Some(bank.url().to_owned()));
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
        assert_eq!(
            bank.calls_to("transfers").len(),
            1,
            "{url}: the finished transfer was not repeated"
        );
        // The interrupted notification ran again with the same derived key.
        let notifications = bank.calls_to("notifications");
        assert_eq!(notifications.len(), 2, "{url}");
        assert_eq!(notifications[0].key, notifications[1].key, "{url}");
        drop(restarted);
    }
}

async fn payout(
    http: &reqwest::Client,
    server: &Server,
    account: &str,
    key: &str,
) -> reqwest::Response {
    http.post(server.url("/v1/payouts"))
        .header("x-account-id", account)
        .header("idempotency-key", key)
        .json(&json!({"vendor_id": "v-1", "amount": 5000}))
        .send()
        .await
        .unwrap()
}

async fn code_of(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

/// A resume schedule short enough for a test: `base` ms, `runs` runs.
fn fast_schedule(bank: &Bank, base: u64, runs: u32) -> Vec<String> {
    [
        "--bank-url",
        bank.url(),
        "--resume-base-ms",
        &base.to_string(),
        "--resume-attempts",
        &runs.to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Polls `done` every 100 ms; a liveness guard, not a timing assertion.
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..600 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} never happened in 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_bank_is_called_once_and_its_402_replays() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir).await {
        let bank = Bank::start().await.unwrap();
        bank.answer_transfers(Answer::Refuse);
        let server = Server::start(&url, Some(bank.url().to_owned()));
        let http = reqwest::Client::new();
        let (account, key) = (unique("acct"), unique("refused"));
        let first = payout(&http, &server, &account, &key).await;
        assert_eq!(first.status(), 402, "{url}");
        assert!(!first.headers().contains_key("idempotent-replayed"));
        let body: Value = first.json().await.unwrap();
        assert_eq!(body["code"], "bank_refused", "{url}: {body}");
        for _ in 0..3 {
            let retry = payout(&http, &server, &account, &key).await;
            assert_eq!(retry.status(), 402, "{url}");
            assert_eq!(retry.headers()["idempotent-replayed"], "true");
            assert_eq!(retry.json::<Value>().await.unwrap(), body);
        }
        // Three completer passes later, still one call: the refusal is the
        // outcome, not a failure to retry.
        tokio::time::sleep(Duration::from_millis(1600)).await;
        assert_eq!(bank.calls_to("transfers").len(), 1, "{url}");
        assert!(bank.calls_to("notifications").is_empty(), "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_bank_a_payout_is_unavailable_and_its_key_survives() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir).await {
        let http = reqwest::Client::new();
        let (account, key) = (unique("acct"), unique("unconfigured"));
        let mut server = Server::start(&url, None);
        let refused = payout(&http, &server, &account, &key).await;
        assert!(refused.headers().contains_key("retry-after"), "{url}");
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["code"], "operation_unavailable", "{url}: {body}");
        assert_eq!(body["retryable"], true);
        server.kill();
        // Configured: the same key pays out, once.
        let bank = Bank::start().await.unwrap();
        let server = Server::start(&url, Some(bank.url().to_owned()));
        let paid = payout(&http, &server, &account, &key).await;
        assert_eq!(paid.status(), 201, "{url}");
        assert_eq!(bank.calls_to("transfers").len(), 1, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bank_down_then_healthy_completes_on_the_schedule() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir).await {
        let bank = Bank::start().await.unwrap();
        bank.answer_transfers(Answer::Down);
        let server = Server::start_with(&url, fast_schedule(&bank, 50, 12));
        let http = reqwest::Client::new();
        let (account, key) = (unique("acct"), unique("outage"));
        let first = payout(&http, &server, &account, &key).await;
        assert!(first.headers().contains_key("retry-after"), "{url}");
        assert_eq!(code_of(first).await, (503, "operation_incomplete".into()));
        // The caller never retries: the completer keeps trying, on the
        // schedule, while the bank is down.
        eventually("a second call to the bank", async || {
            bank.calls_to("transfers").len() >= 2
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let during = bank.calls_to("transfers").len();
        bank.answer_transfers(Answer::Accept);
        eventually("the payout's completion", async || {
            !bank.calls_to("notifications").is_empty()
        })
        .await;
        let transfers = bank.calls_to("transfers");
        let offsets: Vec<u128> = transfers
            .iter()
            .map(|c| (c.at - transfers[0].at).as_millis())
            .collect();
        eprintln!("{url}: bank calls at {offsets:?} ms");
        assert!(transfers.len() <= 12, "{url}: {offsets:?}");
        assert!(during < transfers.len(), "{url}: it recovered");
        // Once the bank took it, nothing more was sent.
        assert_eq!(transfers.iter().filter(|c| c.accepted).count(), 1);
        assert!(transfers.last().unwrap().accepted, "{url}: {offsets:?}");
        assert!(transfers.iter().all(|c| c.key == transfers[0].key));
        let done = payout(&http, &server, &account, &key).await;
        assert_eq!(done.status(), 201, "{url}");
        assert_eq!(done.headers()["idempotent-replayed"], "true");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bank_that_stays_down_ends_in_exhausted_after_the_last_run() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir).await {
        let bank = Bank::start().await.unwrap();
        bank.answer_transfers(Answer::Down);
        let server = Server::start_with(&url, fast_schedule(&bank, 20, 4));
        let http = reqwest::Client::new();
        let (account, key) = (unique("acct"), unique("exhausted"));
        let first = payout(&http, &server, &account, &key).await;
        assert_eq!(first.status(), 503, "{url}");
        // The caller retries too; every run, its own or the completer's,
        // counts against the same four.
        let mut last = (0, String::new());
        eventually("the exhausted answer", async || {
            last = code_of(payout(&http, &server, &account, &key).await).await;
            last.1 == "idempotency_key_exhausted"
        })
        .await;
        assert_eq!(last.0, 409, "{url}");
        assert_eq!(
            bank.calls_to("transfers").len(),
            4,
            "{url}: four runs, four calls"
        );
        // Terminal: a healthy bank and more time change nothing.
        bank.answer_transfers(Answer::Accept);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let again = payout(&http, &server, &account, &key).await;
        assert_eq!(
            code_of(again).await,
            (409, "idempotency_key_exhausted".into())
        );
        assert_eq!(bank.calls_to("transfers").len(), 4, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_stuck_payouts_stay_within_the_schedule() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir).await {
        let bank = Bank::start().await.unwrap();
        bank.answer_transfers(Answer::Down);
        let runs = 12;
        let server = Server::start_with(&url, fast_schedule(&bank, 50, runs));
        let http = reqwest::Client::new();
        let account = unique("acct");
        let keys: Vec<String> = (0..100)
            .map(|i| format!("{}-{i}", unique("stuck")))
            .collect();
        let mut sent = tokio::task::JoinSet::new();
        for key in keys.clone() {
            let (http, account, url) = (http.clone(), account.clone(), server.url("/v1/payouts"));
            sent.spawn(async move {
                http.post(url)
                    .header("x-account-id", account)
                    .header("idempotency-key", key)
                    .json(&json!({"vendor_id": "v-1", "amount": 5000}))
                    .send()
                    .await
                    .unwrap()
                    .status()
            });
        }
        while let Some(status) = sent.join_next().await {
            assert_eq!(status.unwrap(), 503, "{url}");
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        bank.answer_transfers(Answer::Accept);
        eventually("all 100 payouts", async || {
            bank.calls_to("notifications").len() >= 100
        })
        .await;
        let transfers = bank.calls_to("transfers");
        let mut per_key: HashMap<&str, usize> = HashMap::new();
        for call in &transfers {
            *per_key.entry(call.key.as_str()).or_default() += 1;
        }
        eprintln!(
            "{url}: 100 payouts, bank down 3 s: {} transfer calls (bound {}), at most {} for one payout",
            transfers.len(),
            100 * runs,
            per_key.values().max().unwrap()
        );
        assert_eq!(per_key.len(), 100, "{url}");
        assert!(
            per_key.values().all(|&n| n <= runs as usize),
            "{url}: {per_key:?}"
        );
        assert_eq!(
            transfers.iter().filter(|c| c.accepted).count(),
            100,
            "{url}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_never_run_one_due_record_twice() {
    let Some(url) = fresh_postgres().await else {
        eprintln!("skipped: IDEM_TEST_DATABASE_URL is not set");
        return;
    };
    let bank = Bank::start().await.unwrap();
    bank.answer_transfers(Answer::Down);
    // Each call takes 200 ms: two runs of one record at once would overlap.
    let delay = Duration::from_millis(200);
    bank.answer_after(delay);
    let first = Server::start_with(&url, fast_schedule(&bank, 50, 12));
    let second = Server::start_with(&url, fast_schedule(&bank, 50, 12));
    let http = reqwest::Client::new();
    let account = unique("acct-two");
    for i in 0..20 {
        let server = if i % 2 == 0 { &first } else { &second };
        let key = format!("two-{i}");
        assert_eq!(payout(&http, server, &account, &key).await.status(), 503);
    }
    // Both completers scan the same table for three seconds of outage.
    tokio::time::sleep(Duration::from_secs(3)).await;
    bank.answer_transfers(Answer::Accept);
    eventually("all 20 payouts", async || {
        bank.calls_to("notifications").len() >= 20
    })
    .await;
    // Every bank call is a run the store counted: a due record taken by
    // both processes would show as more calls than runs.
    let pool = idem_runtime::sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let runs: Vec<(String, i64)> = idem_runtime::sqlx::query_as(
        "SELECT idem_key, attempts FROM idem_keys WHERE scope = $1 ORDER BY idem_key",
    )
    .bind(&account)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(runs.len(), 20);
    let transfers = bank.calls_to("transfers");
    let runs_total: i64 = runs.iter().map(|(_, n)| n).sum();
    eprintln!(
        "two servers: {} transfer calls, {runs_total} runs counted",
        transfers.len()
    );
    assert!(i64::try_from(transfers.len()).unwrap() <= runs_total);
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    for call in &transfers {
        *per_key.entry(call.key.as_str()).or_default() += 1;
    }
    assert_eq!(per_key.len(), 20);
    assert!(per_key.values().all(|&n| n <= 12), "{per_key:?}");
    // No two calls for one payout overlapped: each began after the one
    // before it was answered.
    for key in per_key.keys() {
        let at: Vec<_> = transfers
            .iter()
            .filter(|c| c.key == *key)
            .map(|c| c.at)
            .collect();
        for pair in at.windows(2) {
            assert!(pair[1] - pair[0] >= delay, "{key}: two runs at once");
        }
    }
    assert_eq!(transfers.iter().filter(|c| c.accepted).count(), 20);
}

#[tokio::test]
async fn the_demo_charges_through_loss_and_a_crash_with_no_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let mut urls = vec![None];
    if let Some(url) = fresh_postgres().await {
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

/// Every case the outside review measured, answered as the spec says, on
/// both engines: constraints, nullability and content types are refused
/// before anything is written or called, and no route stores anything for
/// a caller it cannot identify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spec_is_the_contract_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir).await {
        let bank = Bank::start().await.unwrap();
        let server = Server::start(&url, Some(bank.url().to_owned()));
        let http = reqwest::Client::new();
        let account = unique("acct");
        let send = |path: &'static str,
                    key: Option<String>,
                    content_type: Option<&'static str>,
                    body: String| {
            let mut request = http
                .post(server.url(path))
                .header("x-account-id", &account)
                .body(body);
            if let Some(key) = key {
                request = request.header("idempotency-key", key);
            }
            if let Some(content_type) = content_type {
                request = request.header("content-type", content_type);
            }
            request.send()
        };
        let json_type = Some("application/json");
        let zero = json!({"order_id": "o-1", "amount": 0, "currency": "usd"}).to_string();
        let null = json!({"order_id": "o-1", "amount": 5, "currency": "usd", "description": null})
            .to_string();
        let good = json!({"order_id": "o-1", "amount": 5, "currency": "usd"}).to_string();
        let mut answers = Vec::new();
        for body in [&zero, &null] {
            answers.push(
                send("/v1/legacy-charges", None, json_type, body.clone())
                    .await
                    .unwrap(),
            );
            answers.push(
                send("/v1/charges", Some(unique("k")), json_type, body.clone())
                    .await
                    .unwrap(),
            );
        }
        let payout = json!({"vendor_id": "v-1", "amount": 0}).to_string();
        answers.push(
            send("/v1/payouts", Some(unique("p")), json_type, payout)
                .await
                .unwrap(),
        );
        for answer in answers {
            let status = answer.status().as_u16();
            let body: Value = answer.json().await.unwrap();
            assert_eq!(status, 400, "{url}: {body}");
            assert!(
                matches!(
                    body["field"].as_str(),
                    Some("body.amount" | "body.description")
                ),
                "{url}: {body}"
            );
        }
        // One media type declared: anything else, or none, is a 415.
        for content_type in [
            Some("text/plain"),
            Some("application/xml"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            let legacy = send("/v1/legacy-charges", None, content_type, good.clone())
                .await
                .unwrap();
            let keyed = send("/v1/charges", Some(unique("k")), content_type, good.clone())
                .await
                .unwrap();
            let payout = send(
                "/v1/payouts",
                Some(unique("p")),
                content_type,
                json!({"vendor_id": "v", "amount": 1}).to_string(),
            )
            .await
            .unwrap();
            for answer in [legacy, keyed, payout] {
                assert_eq!(answer.status(), 415, "{url} {content_type:?}");
            }
        }
        assert!(charges(&http, &server, &account).await.is_empty(), "{url}");
        assert!(
            bank.calls_to("transfers").is_empty(),
            "{url}: the bank was called"
        );

        // An empty caller is refused on the route without a key too, and
        // nothing is stored under "".
        for path in ["/v1/legacy-charges", "/v1/charges"] {
            let r = http
                .post(server.url(path))
                .header("x-account-id", "")
                .header("idempotency-key", unique("k"))
                .header("content-type", "application/json")
                .body(good.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{url} {path}");
            assert_eq!(
                r.json::<Value>().await.unwrap()["code"],
                "caller_scope_invalid"
            );
            let r = http
                .post(server.url(path))
                .header("idempotency-key", unique("k"))
                .header("content-type", "application/json")
                .body(good.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 401, "{url} {path}");
        }
        // A valid charge still goes through on both routes.
        let r = send("/v1/legacy-charges", None, json_type, good.clone())
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{url}");
        assert_eq!(charges(&http, &server, &account).await.len(), 1, "{url}");
    }
}

/// `idem probe` holds the generated server to the spec it came from: every
/// check holds on both keyed routes, on both stores, and the unkeyed legacy
/// route is never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_probe_holds_on_the_generated_server() {
    let dir = tempfile::tempdir().unwrap();
    for url in stores(&dir).await {
        let server = Server::start_with(&url, vec!["--fake-bank".to_owned()]);
        let base = server.url("");
        let spec = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/payments.yaml");
        let (code, out, err) = std::thread::spawn(move || {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = idem_codegen::cli::run(
                [
                    "idem",
                    "probe",
                    spec,
                    "--base-url",
                    &base,
                    "--allow-writes",
                    "--header",
                    "X-Account-Id: acct-probe-1",
                    "--second-caller",
                    "X-Account-Id: acct-probe-2",
                    "--format",
                    "json",
                ],
                &mut out,
                &mut err,
            );
            (code, out, err)
        })
        .join()
        .unwrap();
        let err = String::from_utf8_lossy(&err);
        let report: Value = idem_runtime::serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{url}: {e}: {err}"));
        assert_eq!(code, 0, "{url}: {report:#}");
        let operations = report["operations"].as_array().unwrap();
        let names: Vec<&str> = operations
            .iter()
            .map(|o| o["operation"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["createCharge", "createPayout"], "{url}");
        for op in operations {
            for check in op["checks"].as_array().unwrap() {
                assert_eq!(check["outcome"], "held", "{url}: {check:#}");
            }
        }
        assert_eq!(report["not_sent"][0]["operation"], "createLegacyCharge");
        // Every planned request was sent but the replay check's third,
        // which follows only a first answer of 5xx: one per operation.
        let sent = report["requests"]["sent"].as_u64().unwrap();
        let planned = report["requests"]["planned"].as_u64().unwrap();
        assert_eq!(sent + operations.len() as u64, planned, "{url}");
    }
}

#[tokio::test]
async fn serve_exports_every_outcome_on_its_metrics_listener() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("m.db").display());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_payments-demo"))
        .args(["serve", "--database-url", &url, "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let first_line = |stream: Box<dyn std::io::Read + Send>, prefix: &'static str| {
        let (said, heard) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix(prefix) {
                    let _ = said.send(rest.to_owned());
                }
            }
        });
        heard.recv_timeout(Duration::from_secs(30)).unwrap()
    };
    let metrics = first_line(Box::new(child.stderr.take().unwrap()), "metrics on ");
    let api = first_line(Box::new(child.stdout.take().unwrap()), "listening on ");
    let http = reqwest::Client::new();
    let body = json!({"order_id": "order-739", "amount": 1200, "currency": "usd"});
    for _ in 0..2 {
        let r = http
            .post(format!("http://{api}/v1/charges"))
            .header("x-account-id", "acct_1")
            .header("idempotency-key", "order-739")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let text = http
        .get(&metrics)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    for line in [
        "idem_requests_total{operation=\"createCharge\",outcome=\"executed\"} 1",
        "idem_requests_total{operation=\"createCharge\",outcome=\"replayed\"} 1",
        "# TYPE idem_request_duration_seconds histogram",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
}
