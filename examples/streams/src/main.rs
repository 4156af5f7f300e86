//! Pages through a list and streams a completion, with the client generated
//! from `fixtures/streams.yaml`, against a mock of the API on loopback.
//!
//! `cargo run -p example-streams`

use futures_util::StreamExt as _;
use idem_runtime::axum::{self, extract::Query, http::header, routing::get, routing::post};
use idem_runtime::serde_json::{Value, json};

mod api {
    idem_runtime::include_api!();
}

use api::{Client, CreateChatCompletionRequest, ListCustomersParams};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = mock().await?;
    let client = Client::new(&base)?;

    // Every customer, each page fetched when the one before is used up.
    let mut customers = client
        .customers()
        .list(&ListCustomersParams::default())
        .paginate();
    while let Some(customer) = customers.next().await {
        let customer = customer?;
        println!("customer {} <{}>", customer.id, customer.email);
    }

    // The completion's chunks as the server writes them.
    let request = CreateChatCompletionRequest {
        prompt: "Say hello".into(),
        stream: Some(true),
    };
    let mut chunks = client.chat().create_completion(&request).stream().await?;
    while let Some(chunk) = chunks.next().await {
        print!("{}", chunk?.delta);
    }
    println!();
    Ok(())
}

/// Seven customers three to a page, Stripe's way, and a completion
/// written as server-sent events.
async fn mock() -> std::io::Result<String> {
    type Params = Query<std::collections::HashMap<String, String>>;
    let customers = |Query(q): Params| async move {
        let start = q
            .get("starting_after")
            .and_then(|id| id.strip_prefix("cus_"))
            .and_then(|n| n.parse::<usize>().ok())
            .map_or(0, |n| n + 1);
        let end = (start + 3).min(7);
        let data: Vec<Value> = (start..end)
            .map(|i| json!({"id": format!("cus_{i}"), "email": format!("c{i}@example.com")}))
            .collect();
        axum::Json(json!({"object": "list", "data": data, "has_more": end < 7}))
    };
    let chat = || async {
        let events: String = ["Hel", "lo, ", "world"]
            .iter()
            .map(|d| format!("data: {}\n\n", json!({ "delta": d })))
            .chain(["data: [DONE]\n\n".to_owned()])
            .collect();
        ([(header::CONTENT_TYPE, "text/event-stream")], events)
    };
    let app = axum::Router::new()
        .route("/customers", get(customers))
        .route("/chat/completions", post(chat));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}
