//! A typed client from `build.rs`: `cargo run -p example-client-build -- [BASE_URL]`.
//!
//! Calls the shop's `GET /health` (retry class `safe`) and `POST /orders`
//! (keyed: one key minted for the call, sent on every attempt) at BASE_URL,
//! by default the first server the spec names.

mod shop {
    idem_runtime::include_api!();
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::args()
        .nth(1)
        .unwrap_or_else(|| shop::DEFAULT_BASE_URL.to_owned());
    let client = shop::Client::new(&base)?.bearer_auth("sk_test_example");
    match client.health().health().send().await {
        Ok(health) => println!("health: {health:?}"),
        Err(e) => println!("health: {e}"),
    }
    let order = shop::NewOrder {
        sku: "tea".into(),
        quantity: 2,
        gift: None,
        note: None,
    };
    match client.orders().create(&order).send().await {
        Ok(created) => println!("order {} created", created.body.id),
        // A keyed call that gave up says which key to retry with.
        Err(e) => println!("create_order: {e}"),
    }
    Ok(())
}
