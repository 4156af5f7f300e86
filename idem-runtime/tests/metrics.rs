#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! A hand-wired layer counts its requests as a generated route does: one
//! outcome each in `idem_requests_total`, under the name it was given or its
//! method and route. (The generated router's own counts are tested in the
//! payments example, `tests/metrics.rs`.) The client counts one outcome per
//! call and one result per attempt. The recorder is global to the process,
//! so this file holds one test.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::Router;
use axum::routing::post;
use http::StatusCode;
use idem_runtime::server::{Backend, HeaderScope, IdemTx, Idempotency, Store};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

async fn create<DB: Backend>(_tx: IdemTx<DB>, body: String) -> (StatusCode, String) {
    (StatusCode::CREATED, format!("{{\"echo\":{body:?}}}"))
}

async fn serve<DB: Backend>(store: Store<DB>) -> String {
    store.migrate().await.unwrap();
    let idem = Idempotency::builder(store)
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let refuse_empty = |_: &http::request::Parts, body: &axum::body::Bytes| {
        use axum::response::IntoResponse as _;
        body.is_empty()
            .then(|| (StatusCode::BAD_REQUEST, "empty").into_response())
    };
    let app: Router = Router::new()
        .route("/orders", post(create::<DB>))
        .route_layer(idem.layer().validate(refuse_empty))
        .merge(
            Router::new()
                .route("/refunds", post(create::<DB>))
                .route_layer(idem.layer().operation("createRefund")),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn scenario(base: &str, drain_all: &dyn Fn() -> BTreeMap<String, f64>, db: &str) {
    let drain = || {
        drain_all()
            .into_iter()
            .filter(|(k, v)| k.starts_with("idem_requests_total{") && *v > 0.0)
            .collect::<BTreeMap<String, f64>>()
    };
    let http = reqwest::Client::new();
    let send = |path: &str, key: Option<&str>, body: &str| {
        let mut request = http
            .post(format!("{base}{path}"))
            .header("x-account-id", "acct-1")
            .body(body.to_owned());
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        request.send()
    };
    let key = format!("k-{:x}", rand::random::<u64>());
    drain();
    assert_eq!(
        send("/orders", Some(&key), "a").await.unwrap().status(),
        201
    );
    assert_eq!(
        send("/orders", Some(&key), "a").await.unwrap().status(),
        201
    );
    assert_eq!(
        send("/orders", Some(&key), "b").await.unwrap().status(),
        409
    );
    assert_eq!(send("/orders", None, "a").await.unwrap().status(), 400);
    assert_eq!(
        send("/orders", Some("fresh"), "").await.unwrap().status(),
        400
    );
    assert_eq!(
        send("/refunds", Some(&format!("{key}-refund")), "a")
            .await
            .unwrap()
            .status(),
        201
    );
    let want: BTreeMap<String, f64> = [
        ("idem_requests_total{POST /orders,executed}", 1.0),
        ("idem_requests_total{POST /orders,replayed}", 1.0),
        ("idem_requests_total{POST /orders,reused}", 1.0),
        ("idem_requests_total{POST /orders,refused}", 2.0),
        ("idem_requests_total{createRefund,executed}", 1.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(drain(), want, "{db}");
}

/// What the client counts for a call retried once (503, then 201), and for
/// one that runs out of attempts.
async fn client_scenario(drain_all: &dyn Fn() -> BTreeMap<String, f64>) {
    use idem_runtime::client::{Backoff, Operation, RetryClass, RetryClient, RetryPolicy};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/flaky",
            post({
                let seen = std::sync::Arc::clone(&seen);
                move || async move {
                    if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        StatusCode::CREATED
                    }
                }
            }),
        )
        .route("/down", post(|| async { StatusCode::SERVICE_UNAVAILABLE }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let policy = RetryPolicy::default()
        .max_attempts(2)
        .backoff(Backoff::full_jitter(
            std::time::Duration::from_millis(1),
            std::time::Duration::from_millis(5),
        ));
    let client = RetryClient::builder(reqwest::Client::new())
        .policy(policy)
        .build();
    const CREATE: Operation = Operation::new("createOrder", RetryClass::Keyed);
    drain_all();
    let ok = client
        .send(&CREATE, |http| {
            http.post(format!("{base}/flaky")).body("{}")
        })
        .await
        .unwrap();
    assert_eq!(ok.status(), 201);
    let failed = client
        .send(&CREATE, |http| http.post(format!("{base}/down")).body("{}"))
        .await;
    assert!(failed.is_err());
    let got = drain_all();
    let want: BTreeMap<String, f64> = [
        ("idem_client_calls_total{createOrder,ok}", 1.0),
        ("idem_client_calls_total{createOrder,error}", 1.0),
        ("idem_client_attempts_total{createOrder,status}", 3.0),
        ("idem_client_attempts_total{createOrder,answered}", 1.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let counted: BTreeMap<String, f64> = got
        .iter()
        .filter(|(k, _)| {
            k.starts_with("idem_client_calls") || k.starts_with("idem_client_attempts")
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert_eq!(counted, want);
    assert!(
        got.contains_key("idem_client_retry_budget_tokens{}"),
        "the budget is reported: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_wired_layer_counts_one_outcome_per_request() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    // Everything recorded since the last call (the snapshot drains), as
    // `name{label values}` → value.
    let all = move || {
        let mut values = BTreeMap::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let labels: Vec<&str> = key.labels().map(|l| l.value()).collect();
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(h) => h.len() as f64,
            };
            values.insert(format!("{}{{{}}}", key.name(), labels.join(",")), value);
        }
        values
    };
    client_scenario(&all).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("l.db").display());
    let base = serve(Store::open_sqlite(&url).await.unwrap()).await;
    scenario(&base, &all, "sqlite").await;

    match std::env::var("IDEM_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let store = Store::connect_postgres(&url, 4).await.unwrap();
            let base = serve(store).await;
            scenario(&base, &all, "postgres").await;
        }
        _ => eprintln!("skipped on PostgreSQL: IDEM_TEST_DATABASE_URL is not set"),
    }
}
