#![cfg(feature = "server")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Regression tests for defects found by driving the server runtime with
//! real processes and hostile requests: provider keys shared across callers,
//! unbounded scopes reaching the index, validation failures stored as a
//! key's result, and control characters in a key. Real HTTP over loopback,
//! on SQLite and PostgreSQL.

mod support_server;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::StatusCode;
use idem_runtime::server::{
    BoxFuture, ConfigError, ForeignCall, HeaderScope, IdemTx, Idempotency, IdempotencyKey,
    MAX_INDEXED_BYTES, Operation, Policy, Reject, Reply, Run, StepError, Store,
};
use serde_json::{Value, json};
use support_server::{TestDb, serve};

/// A payment provider that, like Stripe, refuses a key it has seen with
/// other parameters, and otherwise replays: the two ways a shared provider
/// key goes wrong.
#[derive(Default)]
struct Psp {
    /// Provider key → (amount, charge id, times called).
    charges: Mutex<HashMap<String, (i64, String, usize)>>,
}

impl Psp {
    fn charge(&self, call: &ForeignCall, amount: i64) -> Result<String, StepError> {
        let mut charges = self.charges.lock().unwrap();
        let next = charges.len() + 1;
        let entry = charges
            .entry(call.derived_key.clone())
            .or_insert_with(|| (amount, format!("ch_{next}"), 0));
        entry.2 += 1;
        if entry.0 != amount {
            return Err(StepError::Transient(
                "provider refused: key reused with other parameters".into(),
            ));
        }
        Ok(entry.1.clone())
    }

    fn keys(&self) -> Vec<(String, usize)> {
        let mut keys: Vec<_> = self
            .charges
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.2))
            .collect();
        keys.sort();
        keys
    }
}

struct Pay<DB> {
    psp: Arc<Psp>,
    _db: PhantomData<fn() -> DB>,
}

impl<DB: TestDb> Operation<DB> for Pay<DB> {
    fn name(&self) -> &'static str {
        "pay"
    }

    fn run<'a>(&'a self, run: &'a mut Run<DB>) -> BoxFuture<'a, Result<Reply, StepError>> {
        Box::pin(async move {
            // A malformed body is refused before anything runs.
            let body: Value = run.json()?;
            let amount = body["amount"].as_i64().unwrap_or(0);
            let scope = run.scope().to_owned();
            let order: i64 = run
                .local("create_order", move |tx| {
                    Box::pin(async move { Ok(DB::insert_order(tx, &scope, "pay").await?) })
                })
                .await?;
            let psp = Arc::clone(&self.psp);
            let charge: String = run
                .foreign(
                    "charge_card",
                    |call| async move { psp.charge(&call, amount) },
                )
                .await?;
            Ok(Reply::json(
                StatusCode::CREATED,
                &json!({ "order": order, "charge": charge }),
            ))
        })
    }
}

async fn pay_app<DB: TestDb>(store: Store<DB>, psp: Arc<Psp>) -> (SocketAddr, Idempotency<DB>) {
    let idem = Idempotency::builder(store)
        .policy(Policy::new())
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let op = Pay::<DB> {
        psp,
        _db: PhantomData,
    };
    let router = Router::new().route("/pay", post(idem.phased(op)));
    (serve(router).await, idem)
}

async fn pay(addr: SocketAddr, account: &str, key: &str, body: &str) -> (StatusCode, Value) {
    call(addr, "/pay", account, key, body).await
}

/// Two callers who pick the same key value are two requests: each gets its
/// own provider key, and each is charged exactly once.
async fn provider_keys_are_unique_per_caller<DB: TestDb>(store: Store<DB>) {
    let psp = Arc::new(Psp::default());
    let (addr, _) = pay_app(store.clone(), Arc::clone(&psp)).await;
    let (a, a_body) = pay(addr, "acct-A", "k", r#"{"amount":1999}"#).await;
    let (b, b_body) = pay(addr, "acct-B", "k", r#"{"amount":500}"#).await;
    assert_eq!(
        (a, b),
        (StatusCode::CREATED, StatusCode::CREATED),
        "{b_body}"
    );
    assert_ne!(a_body["charge"], b_body["charge"]);
    let keys = psp.keys();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|(k, calls)| *calls == 1 && k.len() <= 255));
    assert!(keys.iter().all(|(k, _)| k.ends_with(":charge_card")));
    assert!(!keys.iter().any(|(k, _)| k.starts_with("k:")));
    // Retries replay; the provider is not called again.
    let (again, again_body) = pay(addr, "acct-B", "k", r#"{"amount":500}"#).await;
    assert_eq!((again, &again_body), (StatusCode::CREATED, &b_body));
    assert_eq!(psp.keys().len(), 2);
    // After the replay window the key names a new request: a new claim, and
    // with it a new provider key.
    DB::age_key(&store, "k", 25 * 3600 * 1000).await;
    let (later, later_body) = pay(addr, "acct-A", "k", r#"{"amount":1999}"#).await;
    assert_eq!(later, StatusCode::CREATED, "{later_body}");
    assert_ne!(later_body["charge"], a_body["charge"]);
    assert_eq!(psp.keys().len(), 3);
    assert_eq!(DB::count_orders(&store).await, 3);
}
on_every_backend!(provider_keys_are_unique_per_caller);

async fn order<DB: TestDb>(key: IdempotencyKey, mut tx: IdemTx<DB>, body: String) -> Response {
    match insert(&mut tx, &key.scope, &body).await {
        Ok(id) => (StatusCode::CREATED, json!({ "id": id }).to_string()).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn insert<DB: TestDb>(
    tx: &mut IdemTx<DB>,
    scope: &str,
    body: &str,
) -> Result<i64, sqlx::Error> {
    DB::insert_order(tx, scope, body).await
}

async fn orders_app<DB: TestDb>(store: Store<DB>, policy: Policy) -> SocketAddr {
    let idem = Idempotency::builder(store)
        .policy(policy)
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let router = Router::new()
        .route("/orders", post(order::<DB>))
        .route_layer(idem.layer());
    serve(router).await
}

async fn call(
    addr: SocketAddr,
    path: &str,
    account: &str,
    key: &str,
    body: &str,
) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .header("x-account-id", account)
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Visible ASCII that does not compress, so the database stores it at full size.
fn incompressible(len: usize, seed: u64) -> String {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from(0x21 + ((state >> 33) % 94) as u8)
        })
        .collect()
}

/// A scope is request input on its way into the index: bounded like a key,
/// refused with a 4xx (never a 503 that sends clients into retries).
async fn scopes_are_bounded<DB: TestDb>(store: Store<DB>) {
    let addr = orders_app(store.clone(), Policy::new()).await;
    let huge = "a".repeat(10_000);
    let (status, body) = call(addr, "/orders", &huge, "k1", "{}").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "caller_scope_invalid");
    assert!(
        body["message"].as_str().unwrap().contains("10000 bytes"),
        "{body}"
    );
    let (status, body) = call(addr, "/orders", &"s".repeat(256), "k1", "{}").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("caller_scope_invalid"))
    );
    let (status, body) = call(addr, "/orders", "acct 1", "k1", "{}").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("caller_scope_invalid"))
    );
    assert_eq!(DB::count_keys(&store).await, 0);
    assert_eq!(DB::count_orders(&store).await, 0);
    // The largest key and scope the bounds allow fit the index on both engines.
    let widest = Policy::new()
        .key_max_length(MAX_INDEXED_BYTES - 255)
        .scope_max_length(255);
    let addr = orders_app(store.clone(), widest).await;
    let scope = incompressible(255, 1);
    let key = incompressible(MAX_INDEXED_BYTES - 255, 2);
    let (status, body) = call(addr, "/orders", &scope, &key, "{}").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _) = call(addr, "/orders", &scope, &key, "{}").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(DB::count_orders(&store).await, 1);
    // A scope of 1,000 bytes fits PostgreSQL's and SQLite's key table, not
    // MariaDB's narrower columns: refused when built there.
    let wide_scope = Idempotency::builder(store.clone())
        .policy(Policy::new().scope_max_length(1000).key_max_length(1000))
        .scope(HeaderScope::new("x-account-id"))
        .build();
    match DB::KEY_COLUMNS {
        Some(_) => assert!(
            matches!(wide_scope, Err(ConfigError::KeyColumnsTooNarrow { .. })),
            "{:?}",
            wide_scope.err()
        ),
        None => assert!(wide_scope.is_ok()),
    }
    // Bounds the index cannot hold are refused when the service is built.
    let too_wide = Idempotency::builder(store)
        .policy(Policy::new().key_max_length(4096))
        .scope(HeaderScope::new("x-account-id"))
        .build();
    assert!(matches!(
        too_wide,
        Err(ConfigError::KeyColumnsTooLong { .. })
    ));
}
on_every_backend!(scopes_are_bounded);

/// A handler that validates its own body: a parse failure is a [`Reject`].
async fn strict_order<DB: TestDb>(
    key: IdempotencyKey,
    mut tx: IdemTx<DB>,
    body: Result<axum::Json<Value>, JsonRejection>,
) -> Response {
    let axum::Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => {
            return Reject((
                StatusCode::BAD_REQUEST,
                axum::Json(json!({ "code": "invalid_body", "message": rejection.body_text() })),
            ))
            .into_response();
        }
    };
    match insert(&mut tx, &key.scope, &body.to_string()).await {
        Ok(id) => (StatusCode::CREATED, axum::Json(json!({ "id": id }))).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn validating_app<DB: TestDb>(store: Store<DB>, psp: Arc<Psp>) -> SocketAddr {
    let idem = Idempotency::builder(store)
        .policy(Policy::new())
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let before_claim = idem.layer().validate(|_parts, body| {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        match parsed.as_ref().and_then(|v| v["amount"].as_i64()) {
            Some(amount) if amount > 0 => None,
            _ => {
                Some((StatusCode::BAD_REQUEST, "amount must be a positive integer").into_response())
            }
        }
    });
    let router = Router::new()
        .route("/strict", post(strict_order::<DB>))
        .route_layer(idem.layer())
        .merge(
            Router::new()
                .route("/checked", post(order::<DB>))
                .route_layer(before_claim),
        )
        .merge(Router::new().route(
            "/pay",
            post(idem.phased(Pay::<DB> {
                psp,
                _db: PhantomData,
            })),
        ));
    serve(router).await
}

/// A request that fails validation saves nothing: no key row, no effect,
/// and the corrected retry with the same key runs normally.
async fn validation_failures_are_not_recorded<DB: TestDb>(store: Store<DB>) {
    let psp = Arc::new(Psp::default());
    let addr = validating_app(store.clone(), Arc::clone(&psp)).await;
    for path in ["/strict", "/checked", "/pay"] {
        let key = format!("fix{path}");
        let (status, body) = call(addr, path, "a", &key, r#"{"amount": 10"#).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(
            DB::key_state(&store, &key).await,
            None,
            "{path} stored its 400"
        );
        let (status, body) = call(addr, path, "a", &key, r#"{"amount": 10}"#).await;
        assert_eq!(status, StatusCode::CREATED, "{path}: {body}");
        let (status, replay) = call(addr, path, "a", &key, r#"{"amount": 10}"#).await;
        assert_eq!((status, &replay), (StatusCode::CREATED, &body), "{path}");
        assert_eq!(
            DB::key_state(&store, &key).await.as_deref(),
            Some("complete")
        );
    }
    // A validator refusal is answered before the claim as well.
    let (status, _) = call(addr, "/checked", "a", "neg", r#"{"amount": -1}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(DB::key_state(&store, "neg").await, None);
    assert_eq!(DB::count_orders(&store).await, 3);
    assert_eq!(psp.keys().len(), 1);
}
on_every_backend!(validation_failures_are_not_recorded);

/// hyper refuses header values with control characters (here NUL) with an
/// empty 400 before the protocol sees them; nothing is stored.
async fn control_characters_in_a_key_never_reach_the_store<DB: TestDb>(store: Store<DB>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = orders_app(store.clone(), Policy::new()).await;
    for key in ["a\0b", "a\rb"] {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST /orders HTTP/1.1\r\nhost: x\r\nx-account-id: a\r\nidempotency-key: {key}\r\n\
             content-length: 2\r\nconnection: close\r\n\r\n{{}}"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        let _ = stream.read_to_string(&mut out).await;
        assert!(out.starts_with("HTTP/1.1 400"), "{key:?}: {out:?}");
    }
    assert_eq!(DB::count_keys(&store).await, 0);
}
on_every_backend!(control_characters_in_a_key_never_reach_the_store);
