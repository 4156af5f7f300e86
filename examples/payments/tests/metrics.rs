#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Every request through the *generated* router gets exactly one outcome in
//! `idem_requests_total`, counted by `metrics-util`'s `DebuggingRecorder`:
//! a fresh charge, a replay, a mismatch, 20 concurrent duplicates, the
//! refusals, the store down, a lock-timeout takeover, a phased resume and a
//! completer run ending exhausted; on SQLite and, when
//! `IDEM_TEST_DATABASE_URL` names one, PostgreSQL.
//!
//! The recorder is global to the process, so this file holds one test and
//! runs its scenarios one after another, comparing counts before and after.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use idem_runtime::reqwest;
use idem_runtime::serde_json::{Value, json};
use idem_runtime::server::{Backend, HeaderScope, Idempotency, ResumePolicy, Store};
use idem_runtime::sqlx::{self, Postgres, Sqlite};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use payments_demo::api::Api;
use payments_demo::bank::{Answer, Bank};
use payments_demo::server::{POSTGRES_SCHEMA, Payments, SQLITE_SCHEMA};

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this process");
        snapshotter
    })
}

/// `(name, labels)` → value, for every metric recorded since the last
/// call: the recorder's snapshot drains what it reads (a histogram gives
/// the number of values it took).
type Values = BTreeMap<(String, Vec<(String, String)>), f64>;

fn drain() -> Values {
    let mut values = Values::new();
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        let labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        let value = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Gauge(g) => g.into_inner(),
            DebugValue::Histogram(h) => h.len() as f64,
        };
        values.insert((key.name().to_owned(), labels), value);
    }
    values
}

/// What `idem_requests_total` counted since the last drain, by
/// `operation/outcome`; zeros left out.
fn requests() -> BTreeMap<String, u64> {
    counter(&drain(), "idem_requests_total", &["operation", "outcome"])
}

/// The values of counter `name` in `values`, keyed by `labels` joined with `/`.
fn counter(values: &Values, name: &str, labels: &[&str]) -> BTreeMap<String, u64> {
    let mut found = BTreeMap::new();
    for ((metric, metric_labels), value) in values {
        if metric != name || *value == 0.0 {
            continue;
        }
        let label = labels
            .iter()
            .map(|want| {
                metric_labels
                    .iter()
                    .find(|(k, _)| k == want)
                    .map_or("-", |(_, v)| v.as_str())
            })
            .collect::<Vec<_>>()
            .join("/");
        found.insert(label, *value as u64);
    }
    found
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

/// The generated router over `store`, in this process, on a loopback port.
struct App<DB: Backend> {
    idem: Idempotency<DB>,
    base: String,
    http: reqwest::Client,
}

async fn serve<DB: Backend>(store: Store<DB>, bank: &Bank) -> App<DB>
where
    Payments<DB>: Api<DB>,
{
    store.migrate().await.unwrap();
    let api = Payments::new(store.pool().clone(), Some(bank.url().to_owned()));
    let idem = Idempotency::builder(store)
        .scope(HeaderScope::new("x-account-id"))
        .resume_override(ResumePolicy {
            max_attempts: 3,
            base: Duration::from_millis(20),
            cap: Duration::from_millis(40),
            ..ResumePolicy::default()
        })
        .build()
        .unwrap();
    let app = payments_demo::api::router(api, &idem).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { idem_runtime::axum::serve(listener, app).await });
    App {
        idem,
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
    }
}

impl<DB: Backend> App<DB> {
    async fn charge(&self, account: &str, key: Option<&str>, body: &Value) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}/v1/charges", self.base))
            .header("x-account-id", account)
            .json(body);
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        request.send().await.unwrap()
    }

    async fn payout(&self, account: &str, key: &str) -> reqwest::Response {
        payout(&self.http, &self.base, account, key).await
    }
}

async fn payout(http: &reqwest::Client, base: &str, account: &str, key: &str) -> reqwest::Response {
    http.post(format!("{base}/v1/payouts"))
        .header("x-account-id", account)
        .header("idempotency-key", key)
        .json(&json!({"vendor_id": "v-1", "amount": 5000}))
        .send()
        .await
        .unwrap()
}

/// Runs `scenario`, then checks the outcomes it counted and that their sum
/// is the number of requests it sent: no request without an outcome, none
/// with two.
async fn expect<F>(what: &str, sent: u64, want: &[(&str, u64)], scenario: F)
where
    F: std::future::Future<Output = ()>,
{
    drain();
    scenario.await;
    let got = requests();
    assert_eq!(got, counts(want), "{what}: outcomes counted");
    assert_eq!(
        got.values().sum::<u64>(),
        sent,
        "{what}: one outcome per request"
    );
}

async fn scenarios<DB: Backend>(store: Store<DB>, db: &str)
where
    Payments<DB>: Api<DB>,
{
    let bank = Bank::start().await.unwrap();
    let app = serve(store.clone(), &bank).await;
    let account = unique("acct");
    let body = json!({"order_id": "order-739", "amount": 1200, "currency": "usd"});
    let key = unique("key");

    expect(
        &format!("{db}: fresh"),
        1,
        &[("createCharge/executed", 1)],
        async {
            assert_eq!(app.charge(&account, Some(&key), &body).await.status(), 201);
        },
    )
    .await;
    expect(
        &format!("{db}: replay"),
        1,
        &[("createCharge/replayed", 1)],
        async {
            let r = app.charge(&account, Some(&key), &body).await;
            assert_eq!(r.headers()["idempotent-replayed"], "true");
        },
    )
    .await;
    expect(
        &format!("{db}: mismatch"),
        1,
        &[("createCharge/reused", 1)],
        async {
            let other = json!({"order_id": "order-739", "amount": 9900, "currency": "usd"});
            let status = app.charge(&account, Some(&key), &other).await.status();
            assert!(status == 409 || status == 422, "{status}");
        },
    )
    .await;

    // 20 at once with one new key: one runs; each other one is told it is
    // in flight or gets the stored answer, depending on when it arrives.
    drain();
    let key = unique("burst");
    let burst = (0..20).map(|_| app.charge(&account, Some(&key), &body));
    let statuses: Vec<u16> = futures_util::future::join_all(burst)
        .await
        .iter()
        .map(|r| r.status().as_u16())
        .collect();
    let got = requests();
    assert_eq!(got.get("createCharge/executed"), Some(&1), "{db}: {got:?}");
    let in_flight = got.get("createCharge/in_flight").copied().unwrap_or(0);
    let replayed = got.get("createCharge/replayed").copied().unwrap_or(0);
    assert_eq!(1 + in_flight + replayed, 20, "{db}: {got:?}");
    assert_eq!(got.values().sum::<u64>(), 20, "{db}: {got:?}");
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count() as u64,
        in_flight,
        "{db}: {statuses:?}"
    );

    expect(
        &format!("{db}: refusals"),
        4,
        &[("createCharge/refused", 3), ("getCharge/refused", 1)],
        async {
            // No key.
            assert_eq!(app.charge(&account, None, &body).await.status(), 400);
            // A body off the spec.
            let off = json!({"order_id": "order-1", "amount": -5, "currency": "usd"});
            assert_eq!(
                app.charge(&account, Some(&unique("k")), &off)
                    .await
                    .status(),
                400
            );
            // Not JSON.
            let r = app
                .http
                .post(format!("{}/v1/charges", app.base))
                .header("x-account-id", &account)
                .header("idempotency-key", unique("k"))
                .header("content-type", "text/plain")
                .body("order-1")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 415);
            // An unkeyed route's refusal: a path parameter that is no integer.
            let r = app
                .http
                .get(format!("{}/v1/charges/abc", app.base))
                .header("x-account-id", &account)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400);
        },
    )
    .await;
    expect(
        &format!("{db}: an unkeyed read"),
        1,
        &[("listCharges/executed", 1)],
        async {
            let r = app
                .http
                .get(format!("{}/v1/charges", app.base))
                .header("x-account-id", &account)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        },
    )
    .await;

    // The wait for a connection, once per transaction a charge opens.
    drain();
    assert_eq!(
        app.charge(&account, Some(&unique("k")), &body)
            .await
            .status(),
        201
    );
    let waits = drain()
        .get(&("idem_store_wait_seconds".to_owned(), Vec::new()))
        .copied();
    assert_eq!(
        waits,
        Some(1.0),
        "{db}: the wait for a connection is recorded"
    );

    // A lock-timeout takeover: the first payout waits on a slow bank past
    // the lock timeout (2 s); the retry takes the key over and finishes,
    // and the first, when its bank call returns, has lost its claim.
    bank.answer_after(Duration::from_millis(3500));
    let key = unique("slow");
    drain();
    let first = {
        let (http, base) = (app.http.clone(), app.base.clone());
        let (account, key) = (account.clone(), key.clone());
        tokio::spawn(async move { payout(&http, &base, &account, &key).await.status() })
    };
    tokio::time::sleep(Duration::from_millis(2300)).await;
    // Its lock is older than lock-timeout and nothing took it yet: stale.
    let watched = app.idem.refresh_record_gauges().await.unwrap();
    assert_eq!(
        (watched.in_flight, watched.stale),
        (1, 1),
        "{db}: {watched:?}"
    );
    bank.answer_after(Duration::ZERO);
    let retry = app.payout(&account, &key).await;
    assert_eq!(
        retry.status(),
        201,
        "{db}: the takeover finished the payout"
    );
    assert_eq!(first.await.unwrap(), 409, "{db}: the first lost its claim");
    assert_eq!(
        requests(),
        counts(&[("createPayout/resumed", 1), ("createPayout/in_flight", 1)]),
        "{db}: takeover"
    );

    // A phased resume: the bank is down, the payout is rescheduled; once
    // the bank is back, a retry continues from its recovery point.
    bank.answer_transfers(Answer::Down);
    let key = unique("down");
    drain();
    assert_eq!(app.payout(&account, &key).await.status(), 503);
    bank.answer_transfers(Answer::Accept);
    let mut sent = 1;
    loop {
        sent += 1;
        let r = app.payout(&account, &key).await;
        if r.status() == 201 {
            break;
        }
        assert!(sent < 200, "{db}: the payout never resumed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = requests();
    assert_eq!(got.get("createPayout/executed"), Some(&1), "{db}: {got:?}");
    assert_eq!(got.get("createPayout/resumed"), Some(&1), "{db}: {got:?}");
    assert_eq!(got.values().sum::<u64>(), sent, "{db}: {got:?}");

    // The completer runs a payout whose bank stays down until its schedule
    // (3 runs) ends it exhausted; a retry then gets the terminal answer.
    bank.answer_transfers(Answer::Down);
    let key = unique("exhaust");
    drain();
    assert_eq!(app.payout(&account, &key).await.status(), 503);
    let mut passes = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        app.idem.complete_abandoned(10).await.unwrap();
        if app.idem.refresh_record_gauges().await.unwrap().exhausted == 1 {
            break;
        }
        passes += 1;
        assert!(passes < 200, "{db}: the payout never ended exhausted");
    }
    let counted = drain();
    let completer = counter(
        &counted,
        "idem_completer_runs_total",
        &["operation", "outcome"],
    );
    assert_eq!(
        completer,
        counts(&[
            ("createPayout/rescheduled", 1),
            ("createPayout/exhausted", 1)
        ]),
        "{db}: completer runs"
    );
    let gauge = counted[&(
        "idem_records".to_owned(),
        vec![("state".to_owned(), "exhausted".to_owned())],
    )];
    assert_eq!(gauge, 1.0, "{db}: idem_records{{state=exhausted}}");
    expect(
        &format!("{db}: exhausted"),
        1,
        &[("createPayout/replayed", 1)],
        async {
            let r = app.payout(&account, &key).await;
            assert_eq!(r.status(), 409);
        },
    )
    .await;
    bank.answer_transfers(Answer::Accept);

    // The caller's deadline: gone on arrival (refused before the route
    // runs, counted under the route), and passing while a payout waits on
    // a slow bank (the route's future is dropped and counted refused).
    expect(
        &format!("{db}: deadlines"),
        2,
        &[("POST /v1/charges/refused", 1), ("createPayout/refused", 1)],
        async {
            let r = app
                .http
                .post(format!("{}/v1/charges", app.base))
                .header("x-account-id", &account)
                .header("idempotency-key", unique("late"))
                .header("idem-timeout-ms", "0")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 504);
            bank.answer_after(Duration::from_millis(1500));
            let r = app
                .http
                .post(format!("{}/v1/payouts", app.base))
                .header("x-account-id", &account)
                .header("idempotency-key", unique("slow"))
                .header("idem-timeout-ms", "300")
                .json(&json!({"vendor_id": "v-1", "amount": 5000}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 504);
            bank.answer_after(Duration::ZERO);
        },
    )
    .await;

    // The store down: its pool closed under the running router.
    store.pool().close().await;
    expect(
        &format!("{db}: store down"),
        2,
        &[
            ("createCharge/store_unavailable", 1),
            ("createPayout/store_unavailable", 1),
        ],
        async {
            let r = app.charge(&account, Some(&unique("k")), &body).await;
            assert_eq!(r.status(), 503);
            let r = app.payout(&account, &unique("p")).await;
            assert_eq!(r.status(), 503);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_request_through_the_generated_router_gets_exactly_one_outcome() {
    snapshotter();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("m.db").display());
    let store = Store::<Sqlite>::open_sqlite(&url).await.unwrap();
    sqlx::query(SQLITE_SCHEMA)
        .execute(store.pool())
        .await
        .unwrap();
    scenarios(store, "sqlite").await;

    let Some(admin) = std::env::var("IDEM_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("skipped on PostgreSQL: IDEM_TEST_DATABASE_URL is not set");
        return;
    };
    let name = unique("metrics").replace('-', "_");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&admin)
        .await
        .unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&pool)
        .await
        .unwrap();
    let url = match admin.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{name}"),
        None => panic!("IDEM_TEST_DATABASE_URL has no database name: {admin}"),
    };
    let store = Store::<Postgres>::connect_postgres(&url, 16).await.unwrap();
    sqlx::query(POSTGRES_SCHEMA)
        .execute(store.pool())
        .await
        .unwrap();
    scenarios(store, "postgres").await;
}
