//! The quick start of docs/server.md: an axum service whose `POST /orders`
//! is safe to retry.
//!
//! ```text
//! cargo run -p idem-runtime --no-default-features --features server --example server_quickstart
//! curl -si -XPOST localhost:3000/orders -H 'x-account-id: acme' -H 'Idempotency-Key: order-739' -d '{"sku":1}'
//! ```

use axum::{Router, http::StatusCode, routing::post};
use idem_runtime::server::{HeaderScope, IdemTx, Idempotency, Store};
use sqlx::Sqlite;

// The handler writes through the transaction it is given: its insert and the
// key's completion commit together, or not at all.
async fn create_order(mut tx: IdemTx<Sqlite>, body: String) -> (StatusCode, String) {
    let id: i64 = sqlx::query_scalar("INSERT INTO orders (body) VALUES ($1) RETURNING id")
        .bind(&body)
        .fetch_one(&mut *tx)
        .await
        .unwrap_or(-1);
    (StatusCode::CREATED, format!("{{\"id\":{id}}}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Store::open_sqlite("sqlite://app.db").await?; // or Store::connect_postgres
    store.migrate().await?; // creates the key tables
    sqlx::query("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, body TEXT)")
        .execute(store.pool())
        .await?;

    let idem = Idempotency::builder(store)
        .scope(HeaderScope::new("x-account-id")) // who the caller is
        .build()?;
    let app = Router::new()
        .route("/orders", post(create_order))
        .route_layer(idem.layer()); // keyed from here on

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    axum::serve(listener, app).await?;
    Ok(())
}
