#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The shop's generated client against the shop's generated server, both
//! from `fixtures/shop.yaml`, over loopback on an embedded SQLite store:
//! every body encoding decodes on the server into the types the client
//! sent, replies decode back typed, keyed operations replay, and errors
//! arrive as the typed error bodies.

use std::collections::BTreeMap;

use bytes::Bytes;
use idem_e2e::shop;
use idem_runtime::client::IdempotencyKey;
use idem_runtime::client::support::ApiError;
use idem_runtime::server::support::Context;
use idem_runtime::server::{Fault, IdemTx, Idempotency, ScopeExtractor, ScopeRejection, Store};
use idem_runtime::sqlx::Sqlite;

/// An echo of each request in the documented reply shape.
struct Shop;

impl shop::Api<Sqlite> for Shop {
    async fn get_blob(
        &self,
        _cx: Context,
        input: shop::GetBlobInput,
    ) -> Result<shop::GetBlobReply, Fault> {
        Ok(shop::GetBlobReply::Ok(Bytes::from(format!(
            "blob {}",
            input.name
        ))))
    }

    async fn put_blob(
        &self,
        _cx: Context,
        input: shop::PutBlobInput,
    ) -> Result<shop::PutBlobReply, Fault> {
        let len = input.body.bytes().await.map_or(0, |b| b.len());
        Ok(shop::PutBlobReply::NoContent(shop::PutBlobReplyNoContent {
            e_tag: Some(format!("\"{}-{}\"", input.name, len)),
        }))
    }

    async fn create_charge(
        &self,
        _cx: Context,
        _tx: IdemTx<Sqlite>,
        input: shop::CreateChargeInput,
    ) -> Result<shop::CreateChargeReply, Fault> {
        let Some(body) = input.body else {
            return Ok(
                shop::CreateChargeReply::UnprocessableEntity(problem("no body")).unrecorded(),
            );
        };
        let mut received = BTreeMap::new();
        received.insert("decoded".to_owned(), serde_json::json!(format!("{body:?}")));
        Ok(shop::CreateChargeReply::Ok(shop::Charge {
            id: format!("ch_{}", body.amount),
            amount: body.amount,
            received: Some(received),
        }))
    }

    async fn health(&self, _cx: Context) -> Result<shop::HealthReply, Fault> {
        Ok(shop::HealthReply::Ok(shop::HealthResponse200 {
            ok: Some(true),
        }))
    }

    async fn create_note(
        &self,
        _cx: Context,
        _tx: IdemTx<Sqlite>,
        input: shop::CreateNoteInput,
    ) -> Result<shop::CreateNoteReply, Fault> {
        let text = match input.body {
            shop::CreateNoteRequestBody::Json(note) => format!("json: {}", note.text),
            shop::CreateNoteRequestBody::Text(text) => format!("text: {text}"),
        };
        Ok(shop::CreateNoteReply::Created(text))
    }

    async fn create_order(
        &self,
        _cx: Context,
        mut tx: IdemTx<Sqlite>,
        input: shop::CreateOrderInput,
    ) -> Result<shop::CreateOrderReply, Fault> {
        // The effect, in the key's transaction.
        let id: i64 = idem_runtime::sqlx::query_scalar(
            "INSERT INTO shop_orders (sku) VALUES ($1) RETURNING id",
        )
        .bind(&input.body.sku)
        .fetch_one(&mut *tx)
        .await?;
        let order = input.body;
        Ok(shop::CreateOrderReply::Created(
            shop::CreateOrderReplyCreated {
                body: shop::Order {
                    sku: order.sku,
                    quantity: order.quantity,
                    gift: order.gift,
                    note: order.note,
                    id,
                    status: shop::OrderStatus::Pending,
                    created: None,
                },
                x_request_cost: Some(3),
            },
        ))
    }

    async fn get_order(
        &self,
        _cx: Context,
        input: shop::GetOrderInput,
    ) -> Result<shop::GetOrderReply, Fault> {
        if input.id == 404 {
            return Ok(shop::GetOrderReply::NotFound(shop::GetOrderReplyNotFound {
                body: problem("no such order"),
                x_correlation_id: Some(format!("corr-{}", input.id)),
            }));
        }
        Ok(shop::GetOrderReply::Ok(shop::Order {
            sku: format!(
                "expand={:?} filter={:?} trace={:?}",
                input.expand, input.filter, input.x_trace
            ),
            quantity: 1,
            gift: None,
            note: None,
            id: input.id,
            status: shop::OrderStatus::Shipped,
            created: None,
        }))
    }

    async fn create_refund(
        &self,
        _cx: Context,
        input: shop::CreateRefundInput,
    ) -> Result<shop::CreateRefundReply, Fault> {
        Ok(shop::CreateRefundReply::Created(input.body))
    }

    async fn create_upload(
        &self,
        _cx: Context,
        _tx: IdemTx<Sqlite>,
        input: shop::CreateUploadInput,
    ) -> Result<shop::CreateUploadReply, Fault> {
        Ok(shop::CreateUploadReply::Created(shop::Upload {
            name: input.body.name,
            size: i64::try_from(input.body.file.len()).unwrap(),
        }))
    }
}

/// The shop's callers are their bearer tokens.
struct BearerScope;

impl ScopeExtractor for BearerScope {
    fn scope(&self, parts: &http::request::Parts) -> Result<String, ScopeRejection> {
        parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned)
            .ok_or_else(|| ScopeRejection::unauthenticated("a bearer token is required"))
    }
}

fn problem(title: &str) -> shop::Problem {
    shop::Problem {
        r#type: None,
        title: title.to_owned(),
        status: None,
        code: None,
    }
}

async fn serve() -> shop::Client {
    serve_with_pool().await.0
}

/// The shop on loopback, its store's pool, and its address.
async fn serve_with_pool() -> (
    shop::Client,
    idem_runtime::sqlx::Pool<Sqlite>,
    std::net::SocketAddr,
) {
    let store = Store::open_sqlite("sqlite::memory:").await.unwrap();
    let pool = store.pool().clone();
    store.migrate().await.unwrap();
    idem_runtime::sqlx::query(
        "CREATE TABLE shop_orders (id INTEGER PRIMARY KEY AUTOINCREMENT, sku TEXT NOT NULL)",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let idem = Idempotency::builder(store)
        .scope(BearerScope)
        .build()
        .unwrap();
    // `router` serves under the spec's base path, `/v1`, as the client calls it.
    let app = shop::router(Shop, &idem).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = shop::Client::new(&format!("http://{addr}/v1"))
        .unwrap()
        .bearer_auth("token-1");
    (client, pool, addr)
}

/// One HTTP/1.1 request on a fresh connection: status, lowercased headers, body.
async fn raw(addr: std::net::SocketAddr, request: String) -> (u16, String, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    let body = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    (status, head.to_ascii_lowercase(), body)
}

/// A database error inside a keyed handler, `?`'d into a `Fault`: the
/// protocol's retryable `503` with `Retry-After`, without the database's
/// text, and nothing recorded, so the same key runs the order once the
/// database is back.
#[tokio::test]
async fn a_database_fault_is_a_retryable_503_and_the_key_runs_again() {
    let (_, pool, addr) = serve_with_pool().await;
    let order = r#"{"sku":"tea","quantity":1}"#;
    let request = format!(
        "POST /v1/orders HTTP/1.1\r\nHost: shop\r\nAuthorization: Bearer token-1\r\n\
         Idempotency-Key: fault-1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{order}",
        order.len()
    );
    // The table the handler writes to is gone: its statement fails.
    idem_runtime::sqlx::query("ALTER TABLE shop_orders RENAME TO shop_orders_away")
        .execute(&pool)
        .await
        .unwrap();
    let (status, head, body) = raw(addr, request.clone()).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "idempotency_store_unavailable", "{body}");
    assert_eq!(body["retryable"], true, "{body}");
    assert!(head.contains("\r\nretry-after: 2"), "{head}");
    assert!(
        !body.to_string().contains("shop_orders"),
        "the database's text leaked: {body}"
    );
    // Nothing was recorded under the key.
    let keys: i64 = idem_runtime::sqlx::query_scalar("SELECT COUNT(*) FROM idem_keys")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(keys, 0);
    // The database is back: the same key runs the order, once.
    idem_runtime::sqlx::query("ALTER TABLE shop_orders_away RENAME TO shop_orders")
        .execute(&pool)
        .await
        .unwrap();
    let (status, _, first) = raw(addr, request.clone()).await;
    assert_eq!(status, 201, "{first}");
    let (status, head, again) = raw(addr, request).await;
    assert_eq!((status, &again), (201, &first));
    assert!(head.contains("idempotent-replayed: true"), "{head}");
    let orders: i64 = idem_runtime::sqlx::query_scalar("SELECT COUNT(*) FROM shop_orders")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(orders, 1);
}

#[tokio::test]
async fn json_bodies_round_trip_and_keyed_calls_replay() {
    let client = serve().await;
    let order = shop::NewOrder {
        sku: "tea".into(),
        quantity: 2,
        gift: Some(true),
        note: Some("ribbon".into()),
    };
    let key = IdempotencyKey::new("order-739").unwrap();
    let first = client
        .orders()
        .create(&order)
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(first.body.sku, "tea");
    assert_eq!(first.body.gift, Some(true));
    assert_eq!(first.x_request_cost, Some(3));
    // The same key: the stored reply, not a second order.
    let again = client
        .orders()
        .create(&order)
        .idempotency_key(key)
        .send()
        .await
        .unwrap();
    assert_eq!(again, first);
    let other = client.orders().create(&order).send().await.unwrap();
    assert_ne!(other.body.id, first.body.id);
}

#[tokio::test]
async fn nested_form_bodies_decode_into_the_same_types() {
    let client = serve().await;
    let charge = shop::NewCharge {
        amount: 2000,
        currency: "usd".into(),
        metadata: Some(BTreeMap::from([("order".to_owned(), "739".to_owned())])),
        shipping: Some(shop::NewChargeShipping {
            name: Some("Ada".into()),
            address: Some(shop::NewChargeShippingAddress {
                line1: Some("1 Main St".into()),
                city: Some("Paris".into()),
            }),
        }),
        expand: Some(vec!["customer".into(), "invoice".into()]),
    };
    let answer = client
        .charges()
        .create()
        .body(&charge)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.id, "ch_2000");
    let decoded = answer.received.unwrap()["decoded"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        decoded,
        format!("{charge:?}"),
        "the server decoded what the client encoded"
    );
}

#[tokio::test]
async fn multipart_binary_and_text_bodies_round_trip() {
    let client = serve().await;
    let upload = shop::CreateUploadRequest {
        name: "photo.png".into(),
        file: Bytes::from_static(&[0, 159, 146, 150, 255]),
    };
    let stored = client.uploads().create(&upload).send().await.unwrap();
    assert_eq!((stored.name.as_str(), stored.size), ("photo.png", 5));

    let put = client
        .blobs()
        .put("a b", &Bytes::from_static(b"\x00\x01\x02"))
        .send()
        .await
        .unwrap();
    assert_eq!(put.e_tag.as_deref(), Some("\"a b-3\""));
    let blob = client.blobs().get("x").send().await.unwrap();
    assert_eq!(blob, Bytes::from_static(b"blob x"));

    let json = client
        .notes()
        .create(&shop::CreateNoteBody::Json(shop::CreateNoteRequestJson {
            text: "hi".into(),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(json, "json: hi");
    let text = client
        .notes()
        .create(&shop::CreateNoteBody::Text("plain".into()))
        .send()
        .await
        .unwrap();
    assert_eq!(text, "text: plain");
}

#[tokio::test]
async fn parameters_decode_and_errors_arrive_typed() {
    let client = serve().await;
    let params = shop::GetOrderParams {
        expand: Some(vec!["items".into(), "customer".into()]),
        filter: Some(shop::GetOrderFilter {
            status: Some("paid".into()),
        }),
        x_trace: Some("t-1".into()),
    };
    let order = client.orders().get(7, &params).send().await.unwrap();
    assert_eq!(order.id, 7);
    assert_eq!(
        order.sku,
        "expand=Some([\"items\", \"customer\"]) filter=Some(GetOrderFilter { status: Some(\"paid\") }) trace=Some(\"t-1\")"
    );
    match client.orders().get(404, &params).send().await {
        Err(error @ ApiError::Status { .. }) => {
            // The spec names `X-Correlation-Id` as this answer's request id.
            assert_eq!(error.request_id(), Some("corr-404"));
            assert_eq!(
                error.body(),
                Some(&shop::GetOrderError::NotFound(
                    shop::GetOrderErrorNotFound {
                        body: problem("no such order"),
                        x_correlation_id: Some("corr-404".into()),
                    }
                ))
            );
        }
        other => panic!("expected the typed 404, got {other:?}"),
    }
    let health = client.health().health().send().await.unwrap();
    assert_eq!(health.ok, Some(true));
}

/// An order of one tea, no gift, no note.
fn one_tea() -> shop::NewOrder {
    shop::NewOrder {
        sku: "tea".into(),
        quantity: 1,
        gift: None,
        note: None,
    }
}

#[tokio::test]
async fn the_answer_says_whether_it_was_a_replay() {
    let client = serve().await;
    let order = one_tea();
    let key = IdempotencyKey::new("order-740").unwrap();
    let first = client
        .orders()
        .create(&order)
        .idempotency_key(key.clone())
        .send_with_response()
        .await
        .unwrap();
    assert!(!first.replayed(), "the first answer ran the operation");
    assert_eq!(first.status(), 201);
    assert_eq!(first.attempts(), 1);
    assert_eq!(first.idempotency_key(), Some(&key));
    let again = client
        .orders()
        .create(&order)
        .idempotency_key(key.clone())
        .send_with_response()
        .await
        .unwrap();
    assert!(again.replayed(), "the same key: the stored answer");
    assert_eq!(again.value(), first.value());
    // The same key with another order: refused, and the error says which
    // key it sent and how many attempts it made.
    let mut other = one_tea();
    other.quantity += 1;
    let refused = client
        .orders()
        .create(&other)
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("idempotency_key_reused"),
        "{refused}"
    );
    assert_eq!(refused.idempotency_key(), Some(&key));
    assert_eq!(refused.attempts(), Some(1));
    assert!(!refused.replayed());
    // A minted key is reported too.
    let minted = client
        .orders()
        .create(&order)
        .send_with_response()
        .await
        .unwrap();
    assert!(minted.idempotency_key().is_some());
    assert!(!minted.replayed());
}

/// A shop whose `POST /v1/orders` answers `503` (or hangs, with `hang`),
/// recording the key of every attempt.
async fn unavailable_shop(
    hang: bool,
) -> (shop::Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::http::{HeaderMap, StatusCode};
    let keys: std::sync::Arc<std::sync::Mutex<Vec<String>>> = std::sync::Arc::default();
    let seen = std::sync::Arc::clone(&keys);
    let app = axum::Router::new().route(
        "/v1/orders",
        axum::routing::post(move |headers: HeaderMap| {
            let seen = std::sync::Arc::clone(&seen);
            async move {
                let key = headers
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                seen.lock().unwrap().push(key);
                if hang {
                    tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                }
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [("retry-after", "0"), ("x-request-id", "req-42")],
                    "{}",
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = shop::Client::new(&format!("http://{addr}/v1"))
        .unwrap()
        .bearer_auth("token-1");
    (client, keys)
}

#[tokio::test]
async fn per_call_options_bound_the_attempts_and_the_deadline() {
    use std::time::{Duration, Instant};
    let order = one_tea();
    let (client, keys) = unavailable_shop(false).await;
    let error = client
        .orders()
        .create(&order)
        .max_attempts(2)
        .send()
        .await
        .unwrap_err();
    let sent = keys.lock().unwrap().clone();
    assert_eq!(sent.len(), 2, "two attempts: {sent:?}");
    assert_eq!(sent[0], sent[1], "one key for every attempt of the call");
    assert_eq!(
        error.idempotency_key().map(IdempotencyKey::as_str),
        Some(sent[0].as_str())
    );
    keys.lock().unwrap().clear();
    client
        .orders()
        .create(&order)
        .max_attempts(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(keys.lock().unwrap().len(), 1, "1 means no retry");

    // A server that hangs: each attempt is cut at its timeout, and the
    // call ends by its own deadline, far before the server would answer.
    let (client, keys) = unavailable_shop(true).await;
    let started = Instant::now();
    client
        .orders()
        .create(&order)
        .attempt_timeout(Duration::from_millis(200))
        .max_attempts(3)
        .deadline(Duration::from_secs(20))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        keys.lock().unwrap().len(),
        3,
        "three attempts of 200ms each"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    keys.lock().unwrap().clear();
    let started = Instant::now();
    client
        .orders()
        .create(&order)
        .deadline(Duration::from_millis(500))
        .send()
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(!keys.lock().unwrap().is_empty());
}
