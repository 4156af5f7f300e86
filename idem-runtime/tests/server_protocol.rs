#![cfg(feature = "server")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The key protocol end to end: real HTTP over loopback into an axum app
//! backed by SQLite and PostgreSQL.

mod support_server;

use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::StatusCode;
use idem_runtime::server::{
    BoxFuture, ClaimAt, ConfigError, FailureReplay, ForeignCall, HeaderScope, IdemTx, Idempotency,
    IdempotencyKey, InFlight, KeyIn, MismatchStatus, Operation, Policy, Reject, Reply,
    ResumePolicy, Run, StepError, Store,
};
use serde_json::{Value, json};
use support_server::{TestDb, serve};
use tokio::sync::Notify;

/// The business handler: one row per execution, its id in the body.
async fn create_order<DB: TestDb>(
    key: IdempotencyKey,
    mut tx: IdemTx<DB>,
    body: Bytes,
) -> Response {
    let text = String::from_utf8_lossy(&body).into_owned();
    if text.contains("\"fail\"") {
        return (StatusCode::INTERNAL_SERVER_ERROR, "upstream broke").into_response();
    }
    let id = match DB::insert_order(&mut tx, &key.scope, &text).await {
        Ok(id) => id,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    if text.contains("\"panic\"") {
        panic!("injected crash after the effect");
    }
    if text.contains("\"huge\"") {
        return (StatusCode::CREATED, vec![b'x'; 64 * 1024]).into_response();
    }
    let out = json!({ "id": id, "scope": key.scope, "nonce": uuid::Uuid::new_v4().to_string() });
    (
        StatusCode::CREATED,
        [
            ("content-type", "application/json"),
            ("set-cookie", "session=secret"),
            ("x-order-id", &id.to_string()),
            ("x-not-listed", "first-only"),
        ],
        out.to_string(),
    )
        .into_response()
}

async fn app<DB: TestDb>(store: Store<DB>, policy: Policy) -> (SocketAddr, Idempotency<DB>) {
    let idem = Idempotency::builder(store)
        .policy(
            policy
                .replay_header("x-order-id")
                .max_response_body(16 * 1024)
                .max_request_body(8 * 1024),
        )
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let router = Router::new()
        .route("/orders", post(create_order::<DB>))
        .route_layer(idem.layer());
    (serve(router).await, idem)
}

fn post_order(
    client: &reqwest::Client,
    addr: SocketAddr,
    account: &str,
    key: &str,
    body: &str,
) -> reqwest::RequestBuilder {
    client
        .post(format!("http://{addr}/orders"))
        .header("x-account-id", account)
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body.to_owned())
}

async fn code(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (status, body["code"].as_str().unwrap_or("").to_owned())
}

async fn concurrency_gate<DB: TestDb>(store: Store<DB>) {
    let (addr, _) = app(store.clone(), Policy::new()).await;
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let request = post_order(&client, addr, "acct-1", "gate-key", r#"{"amount":5}"#);
        tasks.push(tokio::spawn(async move { request.send().await.unwrap() }));
    }
    let (mut first, mut replays, mut in_use) = (0, 0, 0);
    let mut bodies = std::collections::HashSet::new();
    for task in tasks {
        let response = task.await.unwrap();
        let status = response.status();
        assert!(!status.is_server_error(), "a caller got {status}");
        let replayed = response.headers().contains_key("idempotent-replayed");
        if status == StatusCode::CREATED {
            if replayed {
                replays += 1
            } else {
                first += 1
            }
            bodies.insert(response.text().await.unwrap());
        } else {
            assert_eq!(
                code(response).await,
                (StatusCode::CONFLICT, "idempotency_key_in_use".into())
            );
            in_use += 1;
        }
    }
    assert_eq!(first, 1);
    assert_eq!(first + replays + in_use, 100);
    assert_eq!(
        bodies.len(),
        1,
        "every replay carries the first response's body"
    );
    assert_eq!(DB::count_orders(&store).await, 1);
}
on_every_backend!(concurrency_gate);

async fn payload_mismatch_is_refused_without_effect<DB: TestDb>(store: Store<DB>) {
    let (addr, _) = app(store.clone(), Policy::new()).await;
    let client = reqwest::Client::new();
    let ok = post_order(&client, addr, "a", "k-mismatch", r#"{"amount":5}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::CREATED);
    // Same JSON, other key order and spacing: the same request.
    let same = post_order(&client, addr, "a", "k-mismatch", r#"{ "amount" : 5 }"#)
        .send()
        .await
        .unwrap();
    assert_eq!(same.headers()["idempotent-replayed"], "true");
    let other = post_order(&client, addr, "a", "k-mismatch", r#"{"amount":6}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(other).await,
        (StatusCode::CONFLICT, "idempotency_key_reused".into())
    );
    assert_eq!(DB::count_orders(&store).await, 1);

    let (addr422, _) = app(
        store.clone(),
        Policy::new().mismatch_status(MismatchStatus::UnprocessableEntity),
    )
    .await;
    let other = post_order(&client, addr422, "a", "k-mismatch", r#"{"amount":7}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(other).await,
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused".into()
        )
    );
    assert_eq!(DB::count_orders(&store).await, 1);
}
on_every_backend!(payload_mismatch_is_refused_without_effect);

async fn callers_are_isolated<DB: TestDb>(store: Store<DB>) {
    let (addr, _) = app(store.clone(), Policy::new()).await;
    let client = reqwest::Client::new();
    let a = post_order(&client, addr, "alice", "shared", r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    let a: Value = a.json().await.unwrap();
    let b = post_order(&client, addr, "bob", "shared", r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    assert!(!b.headers().contains_key("idempotent-replayed"));
    let b: Value = b.json().await.unwrap();
    assert_eq!(a["scope"], "alice");
    assert_eq!(b["scope"], "bob");
    assert_ne!(a["id"], b["id"]);
    assert_eq!(DB::count_orders(&store).await, 2);
    // Without an identified caller there is no scope: refused before any effect.
    let anonymous = client
        .post(format!("http://{addr}/orders"))
        .header("idempotency-key", "shared")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(anonymous).await,
        (StatusCode::UNAUTHORIZED, "caller_unidentified".into())
    );
    assert_eq!(DB::count_orders(&store).await, 2);
    // And no scope source at all is a configuration error, not a global scope.
    let unscoped = Idempotency::builder(store.clone()).build();
    assert!(matches!(unscoped, Err(ConfigError::MissingScope)));
}
on_every_backend!(callers_are_isolated);

async fn replays_are_byte_for_byte<DB: TestDb>(store: Store<DB>) {
    let (addr, _) = app(store.clone(), Policy::new()).await;
    let client = reqwest::Client::new();
    let first = post_order(&client, addr, "a", "fidelity", r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    let first_headers = first.headers().clone();
    let first_status = first.status();
    let first_body = first.bytes().await.unwrap();
    assert_eq!(first_headers["set-cookie"], "session=secret");
    for _ in 0..2 {
        let replay = post_order(&client, addr, "a", "fidelity", r#"{"n":1}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(replay.status(), first_status);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        assert_eq!(
            replay.headers()["content-type"],
            first_headers["content-type"]
        );
        assert_eq!(replay.headers()["x-order-id"], first_headers["x-order-id"]);
        assert!(!replay.headers().contains_key("set-cookie"));
        assert!(!replay.headers().contains_key("x-not-listed"));
        assert_eq!(replay.bytes().await.unwrap(), first_body);
    }
    assert_eq!(DB::count_orders(&store).await, 1);

    // A stored failure replays verbatim too.
    let failed = post_order(&client, addr, "a", "fails", r#"{"mode":"fail"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!failed.headers().contains_key("idempotent-replayed"));
    let again = post_order(&client, addr, "a", "fails", r#"{"mode":"fail"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.text().await.unwrap(), "upstream broke");

    // With `reattempt` a failure is not stored: the retry runs again.
    let (addr2, _) = app(
        store.clone(),
        Policy::new().failure_replay(FailureReplay::Reattempt),
    )
    .await;
    for _ in 0..2 {
        let r = post_order(&client, addr2, "a", "reattempted", r#"{"mode":"fail"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!r.headers().contains_key("idempotent-replayed"));
    }
    assert_eq!(DB::key_state(&store, "reattempted").await, None);
}
on_every_backend!(replays_are_byte_for_byte);

async fn expiry_and_reaper<DB: TestDb>(store: Store<DB>) {
    let policy = Policy::new()
        .replay_window(Duration::from_secs(3600))
        .reaper_after(Duration::from_secs(7200));
    let (addr, idem) = app(store.clone(), policy).await;
    let client = reqwest::Client::new();
    let first = post_order(&client, addr, "a", "expiring", r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    // An hour and a bit later the key names a new request, even with another payload.
    DB::age_key(&store, "expiring", 3_700_000).await;
    let fresh = post_order(&client, addr, "a", "expiring", r#"{"n":2}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(fresh.status(), StatusCode::CREATED);
    assert!(!fresh.headers().contains_key("idempotent-replayed"));
    assert_eq!(DB::count_orders(&store).await, 2);
    // Inside the new window it replays the new outcome.
    let replay = post_order(&client, addr, "a", "expiring", r#"{"n":2}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");

    // The reaper deletes only what is past reaper-after.
    let kept = post_order(&client, addr, "a", "young", r#"{"n":3}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status(), StatusCode::CREATED);
    DB::age_key(&store, "expiring", 7_300_000).await;
    let report = idem.reap().await.unwrap();
    assert_eq!(report.deleted, 1);
    assert!(report.unfinished.is_empty());
    assert_eq!(DB::key_state(&store, "expiring").await, None);
    assert_eq!(
        DB::key_state(&store, "young").await.as_deref(),
        Some("complete")
    );
}
on_every_backend!(expiry_and_reaper);

async fn malformed_keys_and_oversized_bodies<DB: TestDb>(store: Store<DB>) {
    let (addr, _) = app(store.clone(), Policy::new()).await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/orders");
    let missing = client
        .post(&url)
        .header("x-account-id", "a")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(missing).await,
        (StatusCode::BAD_REQUEST, "idempotency_key_missing".into())
    );
    let long = "k".repeat(256);
    for bad in [
        &b""[..],
        b"has space",
        b"tab\tkey",
        b"caf\xc3\xa9",
        long.as_bytes(),
    ] {
        let r = client
            .post(&url)
            .header("x-account-id", "a")
            .header(
                "idempotency-key",
                http::HeaderValue::from_bytes(bad).unwrap(),
            )
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(
            code(r).await,
            (StatusCode::BAD_REQUEST, "idempotency_key_invalid".into())
        );
    }
    let twice = client
        .post(&url)
        .header("x-account-id", "a")
        .header("idempotency-key", "one")
        .header("idempotency-key", "two")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(twice).await,
        (StatusCode::BAD_REQUEST, "idempotency_key_invalid".into())
    );
    // 255 visible-ASCII bytes is fine.
    let ok = post_order(&client, addr, "a", &"k".repeat(255), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::CREATED);

    // A body over the cap, declared or streamed, is refused before any claim.
    let big = post_order(&client, addr, "a", "big", &"x".repeat(9 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(big).await,
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_body_too_large".into()
        )
    );
    let chunked = raw_chunked_post(addr, "big-chunked", 9 * 1024).await;
    assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");
    // A response too large to store is not sent half-recorded: the effect rolls back.
    let huge = post_order(&client, addr, "a", "huge", r#"{"mode":"huge"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(huge).await,
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "response_too_large".into()
        )
    );
    assert_eq!(DB::key_state(&store, "big").await, None);
    assert_eq!(DB::key_state(&store, "huge").await, None);
    assert_eq!(DB::count_orders(&store).await, 1);
}
on_every_backend!(malformed_keys_and_oversized_bodies);

async fn raw_chunked_post(addr: SocketAddr, key: &str, size: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /orders HTTP/1.1\r\nhost: x\r\nx-account-id: a\r\nidempotency-key: {key}\r\n\
         transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'y'; 1024];
    for _ in 0..size / 1024 {
        stream.write_all(b"400\r\n").await.unwrap();
        stream.write_all(&chunk).await.unwrap();
        if stream.write_all(b"\r\n").await.is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut out = String::new();
    let _ = stream.read_to_string(&mut out).await;
    out
}

async fn effect_and_key_commit_together<DB: TestDb>(store: Store<DB>) {
    let (addr, _) = app(store.clone(), Policy::new()).await;
    let client = reqwest::Client::new();
    // The key's move to complete fails after the handler wrote its row.
    DB::install_fault(&store).await;
    let r = post_order(&client, addr, "a", "fault-1", r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    let (status, code_) = code(r).await;
    assert_eq!(
        (status, code_.as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "idempotency_store_unavailable"
        )
    );
    assert_eq!(
        DB::count_orders(&store).await,
        0,
        "an effect survived without its key"
    );
    assert_eq!(DB::key_state(&store, "fault-1").await, None);
    DB::remove_fault(&store).await;
    // The handler dies between its write and the key's completion.
    let crashed = post_order(&client, addr, "a", "crash-1", r#"{"mode":"panic"}"#)
        .send()
        .await;
    assert!(crashed.is_err() || crashed.unwrap().status().is_server_error());
    assert_eq!(DB::count_orders(&store).await, 0);
    assert_eq!(DB::key_state(&store, "crash-1").await, None);
    // The retry then runs once and completes both.
    let r = post_order(&client, addr, "a", "fault-1", r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(DB::count_orders(&store).await, 1);
    assert_eq!(
        DB::key_state(&store, "fault-1").await.as_deref(),
        Some("complete")
    );
}
on_every_backend!(effect_and_key_commit_together);

async fn unreachable_store_fails_closed<DB: TestDb>(store: Store<DB>) {
    let (addr, _) = app(store.clone(), Policy::new()).await;
    store.pool().close().await;
    let client = reqwest::Client::new();
    let r = post_order(&client, addr, "a", "k", "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    // A closed pool is an unreachable database, and the outage has just
    // begun: come back in a second.
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(code(r).await.1, "idempotency_store_unavailable");
    // Known to be down, the next request is refused without waiting.
    let r = post_order(&client, addr, "a", "k2", "{}")
        .send()
        .await
        .unwrap();
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(
        code(r).await,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "idempotency_store_unavailable".to_owned()
        )
    );
}
on_every_backend!(unreachable_store_fails_closed);

/// A foreign system the phased operation calls; it can be held, fail once,
/// and remembers every derived key it saw.
#[derive(Default)]
struct Provider {
    calls: AtomicUsize,
    seen: std::sync::Mutex<Vec<ForeignCall>>,
    hold: AtomicBool,
    release: Notify,
    fail_next: AtomicBool,
    /// Every call fails transiently.
    down: AtomicBool,
    /// The server has no provider configured: the operation refuses to start.
    unconfigured: AtomicBool,
}

impl Provider {
    async fn charge(&self, call: ForeignCall) -> Result<String, StepError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.seen.lock().unwrap().push(call.clone());
        if self.hold.load(Ordering::SeqCst) {
            self.release.notified().await;
        }
        if self.fail_next.swap(false, Ordering::SeqCst) || self.down.load(Ordering::SeqCst) {
            return Err(StepError::Transient("provider timed out".into()));
        }
        Ok(format!("ch_{}", call.derived_key))
    }
}

struct Checkout<DB> {
    provider: Arc<Provider>,
    _db: PhantomData<fn() -> DB>,
}

impl<DB: TestDb> Operation<DB> for Checkout<DB> {
    fn name(&self) -> &'static str {
        "checkout"
    }

    fn run<'a>(&'a self, run: &'a mut Run<DB>) -> BoxFuture<'a, Result<Reply, StepError>> {
        Box::pin(async move {
            if self.provider.unconfigured.load(Ordering::SeqCst) {
                return Err(StepError::Unavailable(
                    "no payment provider is configured".into(),
                ));
            }
            let scope = run.scope().to_owned();
            let order: i64 = run
                .local("create_order", move |tx| {
                    Box::pin(async move { Ok(DB::insert_order(tx, &scope, "checkout").await?) })
                })
                .await?;
            let provider = Arc::clone(&self.provider);
            let charge: String = run
                .foreign("charge", |call| async move { provider.charge(call).await })
                .await?;
            Ok(Reply::json(
                StatusCode::CREATED,
                &json!({ "order": order, "charge": charge }),
            ))
        })
    }
}

async fn phased_app<DB: TestDb>(
    store: Store<DB>,
    policy: Policy,
    provider: Arc<Provider>,
) -> (SocketAddr, Idempotency<DB>) {
    let idem = Idempotency::builder(store)
        .policy(policy)
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let op = Checkout::<DB> {
        provider,
        _db: PhantomData,
    };
    let router = Router::new().route("/checkout", post(idem.phased(op)));
    (serve(router).await, idem)
}

fn checkout(client: &reqwest::Client, addr: SocketAddr, key: &str) -> reqwest::RequestBuilder {
    client
        .post(format!("http://{addr}/checkout"))
        .header("x-account-id", "a")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(r#"{"amount":10}"#)
}

async fn wait_until_called(provider: &Provider, n: usize) {
    // A liveness guard, not a timing assertion: a request refused before the
    // provider would otherwise hang the test.
    for _ in 0..6000 {
        if provider.calls.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the provider was never called {n} times");
}

async fn in_flight_policies<DB: TestDb>(store: Store<DB>) {
    let client = reqwest::Client::new();
    for (policy, expect) in [
        (InFlight::Conflict, StatusCode::CONFLICT),
        (InFlight::Accepted, StatusCode::ACCEPTED),
        (InFlight::Wait(Duration::from_secs(30)), StatusCode::CREATED),
    ] {
        let provider = Arc::new(Provider::default());
        provider.hold.store(true, Ordering::SeqCst);
        let (addr, _) = phased_app(
            store.clone(),
            Policy::new().in_flight(policy),
            Arc::clone(&provider),
        )
        .await;
        let key = format!("inflight-{}", expect.as_u16());
        let first = tokio::spawn(checkout(&client, addr, &key).send());
        wait_until_called(&provider, 1).await;
        let second = tokio::spawn(checkout(&client, addr, &key).send());
        if expect == StatusCode::CREATED {
            // The waiter blocks until the first finishes, then gets its replay.
            tokio::time::sleep(Duration::from_millis(100)).await;
            provider.release.notify_one();
            let second = second.await.unwrap().unwrap();
            assert_eq!(second.status(), StatusCode::CREATED);
            assert_eq!(second.headers()["idempotent-replayed"], "true");
        } else {
            let (status, code_) = code(second.await.unwrap().unwrap()).await;
            assert_eq!(status, expect);
            let wanted = if expect == StatusCode::CONFLICT {
                "idempotency_key_in_use"
            } else {
                "idempotency_key_in_flight"
            };
            assert_eq!(code_, wanted);
            provider.release.notify_one();
        }
        assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
        assert_eq!(provider.calls.load(Ordering::SeqCst), 1);
    }
    assert_eq!(DB::count_orders(&store).await, 3);
}
on_every_backend!(in_flight_policies);

/// A GET on the status resource as `account` (no scope header when `None`).
async fn get_status(
    client: &reqwest::Client,
    addr: SocketAddr,
    path: &str,
    account: Option<&str>,
) -> reqwest::Response {
    let mut request = client.get(format!("http://{addr}{path}"));
    if let Some(account) = account {
        request = request.header("x-account-id", account);
    }
    request.send().await.unwrap()
}

async fn accepted_duplicates_get_a_status_url<DB: TestDb>(store: Store<DB>) {
    let provider = Arc::new(Provider::default());
    provider.hold.store(true, Ordering::SeqCst);
    let idem = Idempotency::builder(store.clone())
        .policy(Policy::new().in_flight(InFlight::Accepted))
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let op = Checkout::<DB> {
        provider: Arc::clone(&provider),
        _db: PhantomData,
    };
    let router = Router::new()
        .route("/checkout", post(idem.phased(op)))
        .merge(idem.status_router());
    let addr = serve(router).await;
    let client = reqwest::Client::new();
    // Reserved characters in the key: the URL must carry it as one segment.
    let key = "order/7?x#1%";
    let location = "/idempotency-keys/order%2F7%3Fx%231%25";

    // The first request pauses between its steps, its in-flight record
    // committed; the duplicate gets 202 and the status URL.
    let first = tokio::spawn(checkout(&client, addr, key).send());
    wait_until_called(&provider, 1).await;
    let duplicate = checkout(&client, addr, key).send().await.unwrap();
    assert_eq!(duplicate.status(), StatusCode::ACCEPTED);
    assert_eq!(duplicate.headers()["location"], location);
    assert!(duplicate.headers().contains_key("retry-after"));
    let body: Value = duplicate.json().await.unwrap();
    assert_eq!(body["code"], "idempotency_key_in_flight");
    assert_eq!(body["status_url"], location);
    assert_eq!(body["recovery_point"], "charge:intent");

    // Polling it while in flight: 202 with where the operation has got to.
    let poll = get_status(&client, addr, location, Some("a")).await;
    assert_eq!(poll.status(), StatusCode::ACCEPTED);
    assert!(poll.headers().contains_key("retry-after"));
    assert_eq!(poll.headers()["location"], location);
    let body: Value = poll.json().await.unwrap();
    assert_eq!(body["code"], "idempotency_key_in_flight");
    assert_eq!(body["recovery_point"], "charge:intent");
    // Another caller never sees the key; no caller at all is refused.
    assert_eq!(
        code(get_status(&client, addr, location, Some("b")).await).await,
        (StatusCode::NOT_FOUND, "idempotency_key_unknown".into())
    );
    assert_eq!(
        code(get_status(&client, addr, location, None).await).await,
        (StatusCode::UNAUTHORIZED, "caller_unidentified".into())
    );

    // Once complete: the original response, byte for byte, marked replayed.
    provider.release.notify_one();
    let original = first.await.unwrap().unwrap();
    assert_eq!(original.status(), StatusCode::CREATED);
    let original_type = original.headers()["content-type"].clone();
    let original_body = original.bytes().await.unwrap();
    let done = get_status(&client, addr, location, Some("a")).await;
    assert_eq!(done.status(), StatusCode::CREATED);
    assert_eq!(done.headers()["idempotent-replayed"], "true");
    assert_eq!(done.headers()["content-type"], original_type);
    assert_eq!(done.bytes().await.unwrap(), original_body);
    assert_eq!(
        code(get_status(&client, addr, location, Some("b")).await).await,
        (StatusCode::NOT_FOUND, "idempotency_key_unknown".into())
    );

    // Reads only: polling an unknown key claims nothing, and nothing ran twice.
    let keys = DB::count_keys(&store).await;
    assert_eq!(
        code(get_status(&client, addr, "/idempotency-keys/never-sent", Some("a")).await).await,
        (StatusCode::NOT_FOUND, "idempotency_key_unknown".into())
    );
    assert_eq!(DB::count_keys(&store).await, keys);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 1);
    assert_eq!(DB::count_orders(&store).await, 1);

    // A hostile key in the path gets the header key's validation: 400.
    let long = format!("/idempotency-keys/{}", "k".repeat(256));
    for path in [
        "/idempotency-keys/%FF",
        "/idempotency-keys/caf%C3%A9",
        "/idempotency-keys/a%20b",
        "/idempotency-keys/a%00b",
        "/idempotency-keys/%zz",
        "/idempotency-keys/ab%2",
        long.as_str(),
    ] {
        assert_eq!(
            code(get_status(&client, addr, path, Some("a")).await).await,
            (StatusCode::BAD_REQUEST, "idempotency_key_invalid".into()),
            "{path}"
        );
    }

    // Past the replay window the key is unknown again.
    DB::age_key(&store, key, 25 * 3600 * 1000).await;
    assert_eq!(
        code(get_status(&client, addr, location, Some("a")).await).await,
        (StatusCode::NOT_FOUND, "idempotency_key_unknown".into())
    );
}
on_every_backend!(accepted_duplicates_get_a_status_url);

/// A single-phase handler's claim is uncommitted while it runs; the status
/// resource still reports it in flight (this process holds its turn), under
/// a configured prefix.
async fn status_of_an_uncommitted_single_phase_request<DB: TestDb>(store: Store<DB>) {
    let hold = Arc::new(Hold::default());
    let idem = Idempotency::builder(store.clone())
        .policy(
            Policy::new()
                .in_flight(InFlight::Accepted)
                .duplicate_wait(Duration::from_millis(50))
                .status_prefix("/v1/keys"),
        )
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let router = Router::new()
        .route("/orders", post(held_order::<DB>))
        .route_layer(idem.layer())
        .with_state(Arc::clone(&hold))
        .merge(idem.status_router());
    let addr = serve(router).await;
    let client = reqwest::Client::new();
    let first = tokio::spawn(post_order(&client, addr, "a", "held-1", r#"{"n":1}"#).send());
    wait_until_entered(&hold).await;
    let duplicate = post_order(&client, addr, "a", "held-1", r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(duplicate.status(), StatusCode::ACCEPTED);
    assert_eq!(duplicate.headers()["location"], "/v1/keys/held-1");
    let poll = get_status(&client, addr, "/v1/keys/held-1", Some("a")).await;
    assert_eq!(poll.status(), StatusCode::ACCEPTED);
    let body: Value = poll.json().await.unwrap();
    assert_eq!(body["code"], "idempotency_key_in_flight");
    assert!(body.get("recovery_point").is_none());
    hold.release.notify_one();
    let original = first.await.unwrap().unwrap();
    assert_eq!(original.status(), StatusCode::CREATED);
    let original_body = original.bytes().await.unwrap();
    let done = get_status(&client, addr, "/v1/keys/held-1", Some("a")).await;
    assert_eq!(done.status(), StatusCode::CREATED);
    assert_eq!(done.headers()["idempotent-replayed"], "true");
    assert_eq!(done.bytes().await.unwrap(), original_body);
    // Asked only now: on SQLite a poll that is not answered from this
    // process's turns reads through the one pooled connection, which the
    // held handler had.
    assert_eq!(
        code(get_status(&client, addr, "/v1/keys/held-1", Some("b")).await).await,
        (StatusCode::NOT_FOUND, "idempotency_key_unknown".into())
    );
    assert_eq!(DB::count_orders(&store).await, 1);
}
on_every_backend!(status_of_an_uncommitted_single_phase_request);

async fn takeover_after_lock_timeout_fences_the_old_holder<DB: TestDb>(store: Store<DB>) {
    let provider = Arc::new(Provider::default());
    provider.hold.store(true, Ordering::SeqCst);
    let policy = Policy::new().lock_timeout(Duration::from_secs(60));
    let (addr, _) = phased_app(store.clone(), policy, Arc::clone(&provider)).await;
    let client = reqwest::Client::new();
    let stuck = tokio::spawn(checkout(&client, addr, "takeover").send());
    wait_until_called(&provider, 1).await;
    // Inside the lock timeout the duplicate is refused.
    let early = checkout(&client, addr, "takeover").send().await.unwrap();
    assert_eq!(code(early).await.1, "idempotency_key_in_use");
    // Past it (the holder stopped refreshing its lock), a retry takes over and
    // resumes after the recorded order, reconciling the interrupted charge.
    DB::age_key(&store, "takeover", 61_000).await;
    provider.hold.store(false, Ordering::SeqCst);
    let retry = checkout(&client, addr, "takeover").send().await.unwrap();
    assert_eq!(retry.status(), StatusCode::CREATED);
    let seen = provider.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].derived_key, seen[1].derived_key);
    assert!(seen[0].derived_key.ends_with(":charge"), "{seen:?}");
    assert!(!seen[0].reconciling && seen[1].reconciling);
    // The original holder wakes up and is refused: it no longer owns the key.
    provider.release.notify_one();
    let late = stuck.await.unwrap().unwrap();
    assert_eq!(
        code(late).await,
        (StatusCode::CONFLICT, "idempotency_key_taken_over".into())
    );
    assert_eq!(DB::count_orders(&store).await, 1);
    let replay = checkout(&client, addr, "takeover").send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
}
on_every_backend!(takeover_after_lock_timeout_fences_the_old_holder);

async fn completer_finishes_what_the_client_abandoned<DB: TestDb>(store: Store<DB>) {
    let provider = Arc::new(Provider::default());
    provider.fail_next.store(true, Ordering::SeqCst);
    let (addr, idem) = phased_app(store.clone(), three_runs(), Arc::clone(&provider)).await;
    let client = reqwest::Client::new();
    let r = checkout(&client, addr, "abandoned").send().await.unwrap();
    assert_eq!(
        code(r).await,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "operation_incomplete".into()
        )
    );
    assert_eq!(
        DB::key_state(&store, "abandoned").await.as_deref(),
        Some("in_flight")
    );
    // Not due yet (a minute more than the backoff drew, which may be ~0).
    DB::age_key(&store, "abandoned", -60_000).await;
    assert_eq!(idem.complete_abandoned(10).await.unwrap().found, 0);
    // The client never retries; once due, the completer resumes at the
    // recovery point.
    DB::age_key(&store, "abandoned", 120_000).await;
    let report = idem.complete_abandoned(10).await.unwrap();
    assert_eq!((report.found, report.completed), (1, 1));
    assert_eq!(
        DB::key_state(&store, "abandoned").await.as_deref(),
        Some("complete")
    );
    assert_eq!(DB::count_orders(&store).await, 1);
    assert_eq!(
        provider.calls.load(Ordering::SeqCst),
        2,
        "one failed call, one completed by the completer"
    );
    // A client that does come back gets the completer's outcome.
    let late = checkout(&client, addr, "abandoned").send().await.unwrap();
    assert_eq!(late.status(), StatusCode::CREATED);
    assert_eq!(late.headers()["idempotent-replayed"], "true");
    // Nothing left to do; and an unfinished record past reaper-after is reported.
    assert_eq!(idem.complete_abandoned(10).await.unwrap().found, 0);
    provider.hold.store(true, Ordering::SeqCst);
    let pending = tokio::spawn(checkout(&client, addr, "never-done").send());
    wait_until_called(&provider, 3).await;
    DB::age_key(&store, "never-done", 73 * 3600 * 1000).await;
    let report = idem.reap().await.unwrap();
    assert_eq!(report.unfinished.len(), 1);
    assert_eq!(report.unfinished[0].key, "never-done");
    assert_eq!(report.unfinished[0].recovery_point, "charge:intent");
    provider.release.notify_one();
    let _ = pending.await;
}
on_every_backend!(completer_finishes_what_the_client_abandoned);

/// Three runs at most, a backoff long enough that nothing is due unless the
/// test ages the record.
fn three_runs() -> Policy {
    Policy::new().resume(ResumePolicy {
        max_attempts: 3,
        base: Duration::from_secs(60),
        cap: Duration::from_secs(60),
        give_up_after: Duration::from_secs(24 * 3600),
    })
}

async fn failed_runs_back_off_and_the_bound_ends_them<DB: TestDb>(store: Store<DB>) {
    let provider = Arc::new(Provider::default());
    provider.down.store(true, Ordering::SeqCst);
    let (addr, idem) = phased_app(store.clone(), three_runs(), Arc::clone(&provider)).await;
    let app = Router::new().merge(idem.status_router());
    let status_addr = serve(app).await;
    let client = reqwest::Client::new();

    let first = checkout(&client, addr, "down").send().await.unwrap();
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    let wait: u64 = first.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (1..=60).contains(&wait),
        "Retry-After {wait} is the backoff"
    );
    assert_eq!(code(first).await.1, "operation_incomplete");
    // Full jitter may draw a wait near zero; a minute more makes sure the
    // next run is not due yet. A retry before it is due is answered without
    // calling out, and the completer's pass leaves it alone.
    DB::age_key(&store, "down", -60_000).await;
    let early = checkout(&client, addr, "down").send().await.unwrap();
    assert_eq!(
        code(early).await,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "operation_incomplete".into()
        )
    );
    assert_eq!(idem.complete_abandoned(10).await.unwrap().found, 0);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 1);

    // Due: the completer runs it (2nd run) and a retry runs it (3rd, the last).
    DB::age_key(&store, "down", 120_000).await;
    let report = idem.complete_abandoned(10).await.unwrap();
    assert_eq!((report.found, report.completed), (1, 0));
    assert_eq!(provider.calls.load(Ordering::SeqCst), 2);
    DB::age_key(&store, "down", 60_000).await;
    let last = checkout(&client, addr, "down").send().await.unwrap();
    assert_eq!(
        code(last).await,
        (StatusCode::CONFLICT, "idempotency_key_exhausted".into())
    );
    assert_eq!(provider.calls.load(Ordering::SeqCst), 3);
    assert_eq!(
        DB::key_state(&store, "down").await.as_deref(),
        Some("exhausted")
    );

    // Terminal: no retry, no completer pass and no recovered provider makes
    // another call; the operator sees it.
    provider.down.store(false, Ordering::SeqCst);
    DB::age_key(&store, "down", 3_600_000).await;
    assert_eq!(idem.complete_abandoned(10).await.unwrap().found, 0);
    let retry = checkout(&client, addr, "down").send().await.unwrap();
    assert_eq!(retry.status(), StatusCode::CONFLICT);
    let body: Value = retry.json().await.unwrap();
    assert_eq!(body["code"], "idempotency_key_exhausted");
    assert_eq!(body["retryable"], false);
    assert!(
        body["message"].as_str().unwrap().contains("charge:intent"),
        "{body}"
    );
    assert_eq!(provider.calls.load(Ordering::SeqCst), 3);
    let status = get_status(&client, status_addr, "/idempotency-keys/down", Some("a")).await;
    assert_eq!(
        code(status).await,
        (StatusCode::CONFLICT, "idempotency_key_exhausted".into())
    );
    assert_eq!(idem.count_exhausted().await.unwrap(), 1);
    let listed = idem.exhausted(10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].key.as_str(), listed[0].recovery_point.as_str()),
        ("down", "charge:intent")
    );
    assert_eq!(listed[0].attempts, 3);
    assert_eq!(DB::count_orders(&store).await, 1);
}
on_every_backend!(failed_runs_back_off_and_the_bound_ends_them);

async fn a_run_past_the_age_bound_is_not_started<DB: TestDb>(store: Store<DB>) {
    let provider = Arc::new(Provider::default());
    provider.fail_next.store(true, Ordering::SeqCst);
    let (addr, idem) = phased_app(store.clone(), three_runs(), Arc::clone(&provider)).await;
    let client = reqwest::Client::new();
    let first = checkout(&client, addr, "old").send().await.unwrap();
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    // A day later (the server was down, say), the schedule has run out.
    DB::age_key(&store, "old", 24 * 3600 * 1000 + 1).await;
    let report = idem.complete_abandoned(10).await.unwrap();
    assert_eq!((report.found, report.completed), (1, 0));
    assert_eq!(provider.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        DB::key_state(&store, "old").await.as_deref(),
        Some("exhausted")
    );
    assert_eq!(idem.exhausted(10).await.unwrap()[0].attempts, 1);
}
on_every_backend!(a_run_past_the_age_bound_is_not_started);

async fn a_missing_provider_is_unavailable_and_records_nothing<DB: TestDb>(store: Store<DB>) {
    let provider = Arc::new(Provider::default());
    provider.unconfigured.store(true, Ordering::SeqCst);
    let (addr, _idem) = phased_app(store.clone(), Policy::new(), Arc::clone(&provider)).await;
    let client = reqwest::Client::new();
    let refused = checkout(&client, addr, "unconfigured")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "operation_unavailable");
    assert_eq!(body["retryable"], true);
    assert_eq!(DB::key_state(&store, "unconfigured").await, None);
    // Configured: the same key now runs normally.
    provider.unconfigured.store(false, Ordering::SeqCst);
    let done = checkout(&client, addr, "unconfigured")
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), StatusCode::CREATED);
    assert_eq!(DB::count_orders(&store).await, 1);
}
on_every_backend!(a_missing_provider_is_unavailable_and_records_nothing);

async fn optional_keys_and_safe_methods<DB: TestDb>(store: Store<DB>) {
    let idem = Idempotency::builder(store.clone())
        .policy(Policy::new().key(idem_runtime::server::KeyRequirement::Optional))
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let router = Router::new()
        .route(
            "/orders",
            post(create_order::<DB>).get(|| async { "listing" }),
        )
        .route_layer(idem.layer());
    let addr = serve(router).await;
    let client = reqwest::Client::new();
    // Without a key an optional-key route runs every time and records nothing.
    for _ in 0..2 {
        let r = client
            .post(format!("http://{addr}/orders"))
            .header("x-account-id", "a")
            .body(r#"{"n":1}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        assert!(!r.headers().contains_key("idempotent-replayed"));
    }
    assert_eq!(DB::count_orders(&store).await, 2);
    assert_eq!(DB::count_keys(&store).await, 0);
    // With one, the protocol applies as usual.
    for _ in 0..2 {
        let r = post_order(&client, addr, "a", "opt", r#"{"n":1}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    assert_eq!(DB::count_orders(&store).await, 3);
    // Safe methods pass through untouched, key or not.
    let listing = client
        .get(format!("http://{addr}/orders"))
        .header("idempotency-key", "not checked")
        .send()
        .await
        .unwrap();
    assert_eq!(listing.status(), StatusCode::OK);
    assert_eq!(listing.text().await.unwrap(), "listing");
}
on_every_backend!(optional_keys_and_safe_methods);

/// A handler that writes its row and then keeps its transaction open until
/// the test lets it go, so a duplicate overlaps an uncommitted claim.
#[derive(Default)]
struct Hold {
    entered: AtomicUsize,
    release: Notify,
}

async fn held_order<DB: TestDb>(
    axum::extract::State(hold): axum::extract::State<Arc<Hold>>,
    key: IdempotencyKey,
    mut tx: IdemTx<DB>,
    body: Bytes,
) -> Response {
    let text = String::from_utf8_lossy(&body).into_owned();
    let id = match DB::insert_order(&mut tx, &key.scope, &text).await {
        Ok(id) => id,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    hold.entered.fetch_add(1, Ordering::SeqCst);
    // The sleep is a liveness guard only: were the duplicate not bounded,
    // it would get a replay after it and the test would fail, not hang.
    tokio::select! {
        () = hold.release.notified() => {}
        () = tokio::time::sleep(Duration::from_secs(30)) => {}
    }
    (StatusCode::CREATED, json!({ "id": id }).to_string()).into_response()
}

async fn held_app<DB: TestDb>(store: Store<DB>, policy: Policy, hold: Arc<Hold>) -> SocketAddr {
    let idem = Idempotency::builder(store)
        .policy(policy)
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let router = Router::new()
        .route("/orders", post(held_order::<DB>))
        .route_layer(idem.layer())
        .with_state(hold);
    serve(router).await
}

async fn wait_until_entered(hold: &Hold) {
    // A liveness guard, not a timing assertion.
    for _ in 0..6000 {
        if hold.entered.load(Ordering::SeqCst) >= 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the first request never reached its handler");
}

async fn uncommitted_duplicates_wait_a_bounded_time<DB: TestDb>(store: Store<DB>) {
    let client = reqwest::Client::new();
    let bound = Duration::from_millis(300);
    let is_postgres = <DB as sqlx::Database>::NAME == "PostgreSQL";
    for (n, (in_flight, expect)) in [
        (InFlight::Conflict, StatusCode::CONFLICT),
        (InFlight::Wait(bound), StatusCode::CONFLICT),
        (InFlight::Accepted, StatusCode::ACCEPTED),
    ]
    .into_iter()
    .enumerate()
    {
        // The duplicate reaches the same process as the original, or (a
        // second node) one with its own `Store` over the same database.
        for second_node in [false, true] {
            let hold = Arc::new(Hold::default());
            let policy = Policy::new().in_flight(in_flight).duplicate_wait(bound);
            let addr = held_app(store.clone(), policy.clone(), Arc::clone(&hold)).await;
            let dup_addr = if second_node {
                let other = Store::new(store.pool().clone());
                held_app(other, policy, Arc::clone(&hold)).await
            } else {
                addr
            };
            let key = format!("held-{n}-{second_node}");
            let body = r#"{"amount":5}"#;
            let first = tokio::spawn(post_order(&client, addr, "a", &key, body).send());
            wait_until_entered(&hold).await;
            let duplicate = post_order(&client, dup_addr, "a", &key, body).send();
            if second_node && !is_postgres {
                // SQLite, another `Store` over the same pool: nothing in this
                // process links the two, so the duplicate queues for the one
                // connection and gets the replay once the original commits.
                let duplicate = tokio::spawn(duplicate);
                hold.release.notify_one();
                assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
                let duplicate = duplicate.await.unwrap().unwrap();
                assert_eq!(duplicate.status(), StatusCode::CREATED);
                assert_eq!(duplicate.headers()["idempotent-replayed"], "true");
            } else {
                let duplicate = duplicate.await.unwrap();
                assert_eq!(duplicate.headers()["retry-after"], "1", "{key}");
                let wanted = if expect == StatusCode::ACCEPTED {
                    "idempotency_key_in_flight"
                } else {
                    "idempotency_key_in_use"
                };
                assert_eq!(code(duplicate).await, (expect, wanted.into()), "{key}");
                // The original was never disturbed: it completes once released.
                hold.release.notify_one();
                assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
            }
            assert_eq!(hold.entered.load(Ordering::SeqCst), 1, "{key} ran twice");
            let retry = post_order(&client, dup_addr, "a", &key, body)
                .send()
                .await
                .unwrap();
            assert_eq!(retry.status(), StatusCode::CREATED);
            assert_eq!(retry.headers()["idempotent-replayed"], "true");
        }
    }
    assert_eq!(DB::count_orders(&store).await, 6);
}
on_every_backend!(uncommitted_duplicates_wait_a_bounded_time);

fn post_body(client: &reqwest::Client, addr: SocketAddr, body: &str) -> reqwest::RequestBuilder {
    client
        .post(format!("http://{addr}/orders"))
        .header("x-account-id", "a")
        .header("content-type", "application/json")
        .body(body.to_owned())
}

async fn keys_carried_in_the_body<DB: TestDb>(store: Store<DB>) {
    let (addr, _) = app(store.clone(), Policy::new().key_in(KeyIn::Body)).await;
    let client = reqwest::Client::new();
    let first = post_body(&client, addr, r#"{"idempotency_key":"bk-1","amount":5}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first_body = first.text().await.unwrap();
    // Same key, same body (reordered): the replay. A header key is not read.
    let replay = post_body(
        &client,
        addr,
        r#"{ "amount": 5, "idempotency_key": "bk-1" }"#,
    )
    .header("idempotency-key", "ignored-header-key")
    .send()
    .await
    .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.text().await.unwrap(), first_body);
    // Same key, other payload: refused, no second row.
    let other = post_body(&client, addr, r#"{"idempotency_key":"bk-1","amount":6}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(other).await,
        (StatusCode::CONFLICT, "idempotency_key_reused".into())
    );
    // No key where one is required, or a body with no fields to read it from.
    for body in [r#"{"amount":5}"#, "amount=5", "[1,2]", ""] {
        let r = post_body(&client, addr, body).send().await.unwrap();
        let status = r.status();
        let error: Value = r.json().await.unwrap();
        assert_eq!(
            (status, error["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("idempotency_key_missing")),
            "{body}"
        );
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("idempotency_key"), "{message}");
        if !body.starts_with('{') {
            assert!(message.contains("not a JSON object"), "{message}");
        }
    }
    // Malformed keys: not a string, empty, too long, not visible ASCII.
    let long = "k".repeat(256);
    for key in [
        json!(7),
        json!(null),
        json!({"k": 1}),
        json!(""),
        json!(long),
        json!("has space"),
        json!("café"),
    ] {
        let body = json!({ "idempotency_key": key, "amount": 5 }).to_string();
        let r = post_body(&client, addr, &body).send().await.unwrap();
        assert_eq!(
            code(r).await,
            (StatusCode::BAD_REQUEST, "idempotency_key_invalid".into()),
            "{body}"
        );
    }
    assert_eq!(DB::count_orders(&store).await, 1);
    assert_eq!(DB::count_keys(&store).await, 1);
}
on_every_backend!(keys_carried_in_the_body);

/// A key in a form-urlencoded body, under the field name the spec shows
/// (Twilio's `IdempotencyKey`), as an inferred body key is served.
async fn form_keys_under_a_named_field<DB: TestDb>(store: Store<DB>) {
    let policy = Policy::new()
        .key_in(KeyIn::Body)
        .body_field("IdempotencyKey");
    let (addr, _) = app(store.clone(), policy).await;
    let client = reqwest::Client::new();
    let post = |body: &str| {
        client
            .post(format!("http://{addr}/orders"))
            .header("x-account-id", "a")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_owned())
    };
    let first = post("Body=hi&IdempotencyKey=fk-1").send().await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first_body = first.text().await.unwrap();
    let replay = post("Body=hi&IdempotencyKey=fk-1").send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.text().await.unwrap(), first_body);
    let other = post("Body=bye&IdempotencyKey=fk-1").send().await.unwrap();
    assert_eq!(
        code(other).await,
        (StatusCode::CONFLICT, "idempotency_key_reused".into())
    );
    // The default field name is not read; a missing field is named.
    let r = post("Body=hi&idempotency_key=fk-2").send().await.unwrap();
    let status = r.status();
    let error: Value = r.json().await.unwrap();
    assert_eq!(
        (status, error["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("idempotency_key_missing"))
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("IdempotencyKey")
    );
    for body in [
        "IdempotencyKey=",
        "IdempotencyKey=a&IdempotencyKey=b",
        "IdempotencyKey=%zz",
    ] {
        let r = post(body).send().await.unwrap();
        assert_eq!(
            code(r).await,
            (StatusCode::BAD_REQUEST, "idempotency_key_invalid".into()),
            "{body}"
        );
    }
    // A JSON body is read under the same field name.
    let json = client
        .post(format!("http://{addr}/orders"))
        .header("x-account-id", "a")
        .header("content-type", "application/json")
        .body(r#"{"IdempotencyKey":"fk-3"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(json.status(), StatusCode::CREATED);
    assert_eq!(DB::count_orders(&store).await, 2);
}
on_every_backend!(form_keys_under_a_named_field);

// ------------------------------------------------------- claim at commit

/// `claim: commit`: 100 concurrent requests with one key make one effect,
/// and every one of them gets the first's response (a wait, never
/// `idempotency_key_in_use`); a retry replays, a changed payload is a reused
/// key, and past the window the key names a new request.
async fn claim_at_commit_keeps_every_guarantee<DB: TestDb>(store: Store<DB>) {
    let policy = Policy::new()
        .claim_at(ClaimAt::Commit)
        .duplicate_wait(Duration::from_secs(30))
        .replay_window(Duration::from_secs(3600))
        .reaper_after(Duration::from_secs(7200));
    let (addr, _) = app(store.clone(), policy.clone()).await;
    // Half the duplicates reach a second node: its own `Store` (and so its
    // own per-key turns) over the same database.
    let (second, _) = app(Store::new(store.pool().clone()), policy).await;
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for n in 0..100 {
        let node = if n % 2 == 0 { addr } else { second };
        let request = post_order(&client, node, "acct-1", "commit-key", r#"{"amount":5}"#);
        tasks.push(tokio::spawn(async move { request.send().await.unwrap() }));
    }
    let (mut first, mut replays) = (0, 0);
    let mut bodies = std::collections::HashSet::new();
    for task in tasks {
        let response = task.await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        if response.headers().contains_key("idempotent-replayed") {
            replays += 1;
        } else {
            first += 1;
        }
        bodies.insert(response.text().await.unwrap());
    }
    assert_eq!((first, replays), (1, 99));
    assert_eq!(
        bodies.len(),
        1,
        "every replay carries the first response's body"
    );
    assert_eq!(DB::count_orders(&store).await, 1);
    assert_eq!(
        DB::key_state(&store, "commit-key").await.as_deref(),
        Some("complete")
    );

    // Same JSON, other spacing: the replay. Another payload: a reused key.
    let same = post_order(&client, addr, "acct-1", "commit-key", r#"{ "amount": 5 }"#)
        .send()
        .await
        .unwrap();
    assert_eq!(same.headers()["idempotent-replayed"], "true");
    let other = post_order(&client, addr, "acct-1", "commit-key", r#"{"amount":6}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(other).await,
        (StatusCode::CONFLICT, "idempotency_key_reused".into())
    );
    assert_eq!(DB::count_orders(&store).await, 1);

    // A failed handler stores its failure like any response; a refused
    // request (before execution) stores nothing.
    let failed = post_order(&client, addr, "acct-1", "commit-fail", r#"{"fail":"fail"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let again = post_order(&client, addr, "acct-1", "commit-fail", r#"{"fail":"fail"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");

    // Past its window the key names a new request, once.
    DB::age_key(&store, "commit-key", 3_700_000).await;
    let fresh = post_order(&client, addr, "acct-1", "commit-key", r#"{"amount":7}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(fresh.status(), StatusCode::CREATED);
    assert!(!fresh.headers().contains_key("idempotent-replayed"));
    assert_eq!(DB::count_orders(&store).await, 2);
    let replay = post_order(&client, addr, "acct-1", "commit-key", r#"{"amount":7}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(DB::count_orders(&store).await, 2);
}
on_every_backend!(claim_at_commit_keeps_every_guarantee);

/// The same gates on connections that bound their own lock waits
/// (`Store::connect_postgres_bounded`), where a claim at the route's
/// duplicate wait is the plain insert.
mod bounded_connections {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrency_gate() {
        let wait = Policy::new().duplicate_wait_bound();
        if let Some(store) = support_server::postgres_bounded("bounded_gate", wait).await {
            super::concurrency_gate(store).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn claim_at_commit_keeps_every_guarantee() {
        let wait = Duration::from_secs(30);
        if let Some(store) = support_server::postgres_bounded("bounded_commit", wait).await {
            super::claim_at_commit_keeps_every_guarantee(store).await;
        }
    }
}

/// A duplicate that cannot see the first's commit within its bound gets
/// the in-flight answer, and its own effect rolls back.
async fn claim_at_commit_bounds_the_wait<DB: TestDb>(store: Store<DB>) {
    let hold = Arc::new(Hold::default());
    let policy = Policy::new()
        .claim_at(ClaimAt::Commit)
        .duplicate_wait(Duration::from_millis(300));
    let addr = held_app(store.clone(), policy, Arc::clone(&hold)).await;
    let client = reqwest::Client::new();
    let body = r#"{"amount":5}"#;
    let first = {
        let request = post_order(&client, addr, "a", "held-commit", body);
        tokio::spawn(async move { request.send().await.unwrap() })
    };
    wait_until_entered(&hold).await;
    let duplicate = post_order(&client, addr, "a", "held-commit", body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        code(duplicate).await,
        (StatusCode::CONFLICT, "idempotency_key_in_use".into())
    );
    hold.release.notify_one();
    assert_eq!(first.await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(hold.entered.load(Ordering::SeqCst), 1);
    assert_eq!(DB::count_orders(&store).await, 1);
    // A retry runs the handler again, and its effect rolls back.
    hold.release.notify_one();
    let retry = post_order(&client, addr, "a", "held-commit", body)
        .send()
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(hold.entered.load(Ordering::SeqCst), 2);
    assert_eq!(DB::count_orders(&store).await, 1);
}
on_every_backend!(claim_at_commit_bounds_the_wait);

#[test]
fn claim_at_commit_cannot_answer_202() {
    let refused = Policy::new()
        .claim_at(ClaimAt::Commit)
        .in_flight(InFlight::Accepted);
    let built = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            let (store, _dir) = support_server::sqlite().await;
            Idempotency::builder(store)
                .policy(refused)
                .scope(HeaderScope::new("x-account-id"))
                .build()
                .map(|_| ())
        });
    assert!(matches!(built, Err(ConfigError::AcceptedNeedsClaimAtStart)));
}

/// A route that runs the layer's steps itself (`read_keyed`, `claim`,
/// `finish`), as generated servers do: the input is checked before the
/// claim, and the handler writes in the claim's transaction.
async fn steps_app<DB: TestDb>(store: Store<DB>, policy: Policy) -> SocketAddr {
    let idem = Idempotency::builder(store)
        .policy(policy)
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let route = move |request: axum::extract::Request| {
        let idem = idem.clone();
        async move {
            let keyed = match idem.read_keyed(request, "/orders").await {
                Ok(keyed) => keyed,
                Err(refusal) => return refusal,
            };
            let body: Value = match keyed.inbound().json() {
                Ok(body) => body,
                Err(rejection) => return rejection.into_response(),
            };
            if body["amount"].as_i64().is_none_or(|amount| amount < 1) {
                return (StatusCode::BAD_REQUEST, "amount below 1").into_response();
            }
            let cx = keyed.inbound().context();
            let key = cx.idempotency().cloned().unwrap();
            let (mut tx, claimed) = match keyed.claim().await {
                Ok(claimed) => claimed,
                Err(answer) => return answer,
            };
            if body["keep"] == true {
                // A transaction not given back is refused, nothing applied.
                let kept = tx;
                let reply = claimed.finish(StatusCode::CREATED.into_response()).await;
                drop(kept);
                return reply;
            }
            if body["refuse"] == true {
                let _ = DB::insert_order(&mut tx, &key.scope, "refused").await;
                drop(tx);
                return claimed
                    .finish(Reject((StatusCode::CONFLICT, "refused")).into_response())
                    .await;
            }
            let reply = create_order::<DB>(key, tx, Bytes::from(body.to_string())).await;
            claimed.finish(reply).await
        }
    };
    serve(Router::new().route("/orders", post(route))).await
}

async fn steps_keep_the_gates<DB: TestDb>(store: Store<DB>) {
    for (n, policy) in [Policy::new(), Policy::new().claim_at(ClaimAt::Commit)]
        .into_iter()
        .enumerate()
    {
        let addr = steps_app(store.clone(), policy).await;
        let client = reqwest::Client::new();
        let before = DB::count_orders(&store).await;
        let key = format!("steps-{n}");
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let request = post_order(&client, addr, "a", &key, r#"{"amount":5}"#);
            tasks.push(tokio::spawn(async move { request.send().await.unwrap() }));
        }
        let mut created = 0;
        for task in tasks {
            let response = task.await.unwrap();
            match response.status() {
                StatusCode::CREATED => created += 1,
                status => assert_eq!(
                    code(response).await,
                    (status, "idempotency_key_in_use".into()),
                    "{status}"
                ),
            }
        }
        assert!(created >= 1);
        assert_eq!(DB::count_orders(&store).await, before + 1, "one effect");
        let other = post_order(&client, addr, "a", &key, r#"{"amount":6}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(
            code(other).await,
            (StatusCode::CONFLICT, "idempotency_key_reused".into())
        );

        // Refused before the claim, by the handler after it, or with the
        // transaction kept: nothing is recorded, so the corrected request
        // runs with the same key.
        let keys = DB::count_keys(&store).await;
        let fresh = format!("steps-fresh-{n}");
        for (body, status) in [
            (r#"{"amount":0}"#, StatusCode::BAD_REQUEST),
            (r#"{"amount":5,"refuse":true}"#, StatusCode::CONFLICT),
            (
                r#"{"amount":5,"keep":true}"#,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ] {
            let refused = post_order(&client, addr, "a", &fresh, body)
                .send()
                .await
                .unwrap();
            assert_eq!(refused.status(), status, "{body}");
        }
        assert_eq!(DB::count_keys(&store).await, keys);
        assert_eq!(DB::count_orders(&store).await, before + 1);
        let corrected = post_order(&client, addr, "a", &fresh, r#"{"amount":5}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(corrected.status(), StatusCode::CREATED);
        assert_eq!(DB::count_orders(&store).await, before + 2);

        let missing = client
            .post(format!("http://{addr}/orders"))
            .header("x-account-id", "a")
            .header("content-type", "application/json")
            .body(r#"{"amount":5}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(
            code(missing).await,
            (StatusCode::BAD_REQUEST, "idempotency_key_missing".into())
        );
    }
}
on_every_backend!(steps_keep_the_gates);
