//! A hand-written reqwest caller wrapped in the retry client, against a
//! local server that is briefly unavailable.
//!
//! ```text
//! cargo run -p idem-runtime --no-default-features --features client --example client_reqwest
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use idem_runtime::client::{IdempotencyKey, Operation, RetryClass, RetryClient};

const CONFIRM_ORDER: Operation = Operation::new("confirmOrder", RetryClass::Keyed);

/// Unavailable twice, then confirms, echoing the key it saw.
async fn confirm(State(seen): State<Arc<AtomicU32>>, headers: HeaderMap) -> (StatusCode, String) {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned();
    let attempt = seen.fetch_add(1, Ordering::Relaxed) + 1;
    println!("server: attempt {attempt} with Idempotency-Key: {key}");
    if attempt < 3 {
        (StatusCode::SERVICE_UNAVAILABLE, "busy".to_owned())
    } else {
        (
            StatusCode::OK,
            format!("{{\"order\":739,\"confirmed\":true,\"key\":\"{key}\"}}"),
        )
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_target(false).init();

    let app = axum::Router::new()
        .route("/orders/739/confirm", axum::routing::post(confirm))
        .with_state(Arc::new(AtomicU32::new(0)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/orders/739/confirm", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The few lines a caller writes:
    let client = RetryClient::new(reqwest::Client::new());
    let key = IdempotencyKey::derived(["order", "739", "confirm"])?;
    let response = client
        .send_with_key(&CONFIRM_ORDER, key, |http| http.post(&url).body("{}"))
        .await?;

    println!("client: {} {}", response.status(), response.text().await?);
    println!("client: {:?}", client.metrics());
    Ok(())
}
