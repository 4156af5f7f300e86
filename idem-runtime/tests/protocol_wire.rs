#![cfg(feature = "server")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! What the server sends is what `idem_runtime::protocol` says it sends:
//! the conflict, missing-key and accepted bodies compared byte for byte over
//! real HTTP, since the docs page publishes `protocol`'s rendering of them.

mod support_server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::StatusCode;
use idem_runtime::protocol;
use idem_runtime::server::{
    HeaderScope, IdemTx, Idempotency, IdempotencyKey, InFlight, MismatchStatus, Policy,
};
use sqlx::Sqlite;
use support_server::{TestDb, serve, sqlite};
use tokio::sync::Notify;

/// Writes its row, then waits for the test to let it commit, so a duplicate
/// meets a request in flight.
#[derive(Default)]
struct Gate {
    entered: AtomicUsize,
    release: Notify,
}

async fn order(
    State(gate): State<Arc<Gate>>,
    key: IdempotencyKey,
    mut tx: IdemTx<Sqlite>,
    body: Bytes,
) -> Response {
    let text = String::from_utf8_lossy(&body).into_owned();
    if let Err(e) = Sqlite::insert_order(&mut tx, &key.scope, &text).await {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    gate.entered.fetch_add(1, Ordering::SeqCst);
    if text.contains("hold") {
        // A liveness guard only: the test releases it long before.
        tokio::select! {
            () = gate.release.notified() => {}
            () = tokio::time::sleep(Duration::from_secs(30)) => {}
        }
    }
    (StatusCode::CREATED, "{}").into_response()
}

async fn app(policy: Policy) -> (SocketAddr, Arc<Gate>, tempfile::TempDir) {
    let (store, dir) = sqlite().await;
    let idem = Idempotency::builder(store)
        .policy(policy)
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let gate = Arc::new(Gate::default());
    let router = Router::new()
        .route("/orders", post(order))
        .route_layer(idem.layer())
        .with_state(Arc::clone(&gate));
    (serve(router).await, gate, dir)
}

async fn send(addr: SocketAddr, key: Option<&str>, body: &str) -> (u16, String, String) {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/orders"))
        .header("x-account-id", "acct")
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, retry_after, response.text().await.unwrap())
}

async fn entered(gate: &Gate) {
    for _ in 0..6000 {
        if gate.entered.load(Ordering::SeqCst) >= 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the first request never reached its handler");
}

#[tokio::test]
async fn conflict_bodies_are_the_protocols() {
    let (addr, _, _dir) = app(Policy::new()).await;
    assert_eq!(send(addr, Some("k1"), r#"{"n":1}"#).await.0, 201);
    let (status, _, body) = send(addr, Some("k1"), r#"{"n":2}"#).await;
    assert_eq!(status, protocol::KEY_REUSED.status);
    assert_eq!(body, protocol::KEY_REUSED.body());

    let policy = Policy::new().mismatch_status(MismatchStatus::UnprocessableEntity);
    let (addr, _, _dir) = app(policy).await;
    assert_eq!(send(addr, Some("k1"), r#"{"n":1}"#).await.0, 201);
    let (status, _, body) = send(addr, Some("k1"), r#"{"n":2}"#).await;
    assert_eq!(status, protocol::KEY_REUSED_UNPROCESSABLE_STATUS);
    assert_eq!(body, protocol::KEY_REUSED.body());

    let (status, _, body) = send(addr, None, "{}").await;
    assert_eq!(status, protocol::KEY_MISSING.status);
    assert_eq!(
        body,
        protocol::KEY_MISSING.body_with(&protocol::key_missing_message("Idempotency-Key"))
    );
    let (status, _, body) = send(addr, Some(""), "{}").await;
    assert_eq!(status, protocol::KEY_INVALID.status);
    assert!(body.starts_with(&format!(r#"{{"code":"{}","#, protocol::KEY_INVALID.code)));
}

#[tokio::test]
async fn in_flight_bodies_are_the_protocols() {
    let wait = Duration::from_millis(50);
    for (in_flight, expected) in [
        (InFlight::Conflict, protocol::KEY_IN_USE.body()),
        (
            InFlight::Accepted,
            protocol::accepted_body(&format!("{}/held", protocol::DEFAULT_STATUS_PREFIX), None),
        ),
    ] {
        let policy = Policy::new().in_flight(in_flight).duplicate_wait(wait);
        let (addr, gate, _dir) = app(policy).await;
        let first = tokio::spawn(async move { send(addr, Some("held"), r#"{"hold":1}"#).await });
        entered(&gate).await;
        let (status, retry_after, body) = send(addr, Some("held"), r#"{"hold":1}"#).await;
        let wanted = if in_flight == InFlight::Accepted {
            protocol::KEY_IN_FLIGHT.status
        } else {
            protocol::KEY_IN_USE.status
        };
        assert_eq!(status, wanted, "{in_flight:?}");
        assert_eq!(
            retry_after,
            protocol::IN_FLIGHT_RETRY_AFTER_SECS.to_string()
        );
        assert_eq!(body, expected, "{in_flight:?}");
        gate.release.notify_one();
        assert_eq!(first.await.unwrap().0, 201);
    }
}
