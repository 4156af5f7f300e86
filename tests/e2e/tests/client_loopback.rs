#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The client generated from `fixtures/shop.yaml`, driven against a real
//! axum server on loopback: every body encoding round-trips typed, errors
//! come back typed, keys are minted once per call and kept across
//! attempts, an unsafe POST is never re-sent, the deadline holds, and
//! `Retry-After` is honoured.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use idem_e2e::shop;
use idem_runtime::client::support::ApiError;
use idem_runtime::client::{GiveUp, IdempotencyKey, RetryClient, RetryError, RetryPolicy};

#[derive(Debug, Clone)]
struct Hit {
    method: String,
    path: String,
    query: String,
    headers: http::HeaderMap,
    body: Bytes,
    at: Instant,
}

/// A scripted answer: status, headers, body; or hang forever.
#[derive(Debug, Clone)]
enum Script {
    Reply(u16, Vec<(&'static str, &'static str)>, &'static str),
    Hang,
}

#[derive(Clone, Default)]
struct Server {
    hits: Arc<Mutex<Vec<Hit>>>,
    scripts: Arc<Mutex<HashMap<String, VecDeque<Script>>>>,
}

impl Server {
    fn script(&self, path: &str, replies: impl IntoIterator<Item = Script>) {
        self.scripts
            .lock()
            .unwrap()
            .entry(path.to_owned())
            .or_default()
            .extend(replies);
    }

    fn hits(&self, path: &str) -> Vec<Hit> {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.path == path)
            .cloned()
            .collect()
    }
}

fn header(hit: &Hit, name: &str) -> String {
    hit.headers
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// What the shop answers when nothing is scripted: an echo of the request
/// in the documented shape.
fn default_reply(hit: &Hit) -> Response {
    let json = |status: u16, body: serde_json::Value| {
        (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", "application/json")],
            body.to_string(),
        )
            .into_response()
    };
    let path = hit.path.strip_prefix("/v1").unwrap_or(&hit.path);
    match (hit.method.as_str(), path) {
        ("POST", "/orders") => {
            let order: serde_json::Value = serde_json::from_slice(&hit.body).unwrap();
            let mut body = order.clone();
            body["id"] = 7.into();
            body["status"] = "back-ordered".into();
            let mut response = json(201, body);
            response
                .headers_mut()
                .insert("x-request-cost", "3".parse().unwrap());
            response
        }
        ("GET", "/orders/7") => json(
            200,
            serde_json::json!({"id": 7, "status": "paid", "sku": "tea", "quantity": 1}),
        ),
        ("GET", path) if path.starts_with("/orders/") => {
            let mut response = json(
                404,
                serde_json::json!({"title": "no such order", "status": 404, "code": "order_missing"}),
            );
            response
                .headers_mut()
                .insert("x-correlation-id", "corr-404".parse().unwrap());
            response
        }
        ("POST", "/charges") => {
            let text = String::from_utf8_lossy(&hit.body).into_owned();
            json(
                200,
                serde_json::json!({"id": "ch_1", "amount": 2000, "received": {"form": text}}),
            )
        }
        ("POST", "/uploads") => json(
            201,
            serde_json::json!({"name": "report.pdf", "size": hit.body.len()}),
        ),
        ("PUT", _) => (StatusCode::NO_CONTENT, [("etag", "\"v1\"")]).into_response(),
        ("GET", path) if path.starts_with("/blobs/") => (
            StatusCode::OK,
            [("content-type", "application/octet-stream")],
            vec![0u8, 159, 146, 150],
        )
            .into_response(),
        ("POST", "/notes") => (
            StatusCode::CREATED,
            [("content-type", "text/plain")],
            format!("noted: {}", String::from_utf8_lossy(&hit.body)),
        )
            .into_response(),
        ("POST", "/refunds") => json(201, serde_json::json!({"order": 7, "amount": 500})),
        ("GET", "/health") => json(200, serde_json::json!({"ok": true})),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn record(State(server): State<Server>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let hit = Hit {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        headers: parts.headers,
        body,
        at: Instant::now(),
    };
    server.hits.lock().unwrap().push(hit.clone());
    let script = server
        .scripts
        .lock()
        .unwrap()
        .get_mut(&hit.path)
        .and_then(VecDeque::pop_front);
    match script {
        Some(Script::Reply(status, headers, body)) => {
            let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
        Some(Script::Hang) => std::future::pending().await,
        None => default_reply(&hit),
    }
}

async fn start() -> (shop::Client, Server) {
    let server = Server::default();
    let app = axum::Router::new()
        .fallback(record)
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = shop::Client::new(&format!("http://{addr}/v1"))
        .unwrap()
        .bearer_auth("tok_123");
    (client, server)
}

fn new_order() -> shop::NewOrder {
    shop::NewOrder {
        sku: "tea".into(),
        quantity: 2,
        gift: Some(true),
        note: None,
    }
}

#[tokio::test]
async fn json_bodies_round_trip_typed_with_documented_headers() {
    let (client, server) = start().await;
    let placed = client.orders().create(&new_order()).send().await.unwrap();
    assert_eq!(placed.body.id, 7);
    assert_eq!(placed.body.sku, "tea");
    assert_eq!(placed.body.status, shop::OrderStatus::BackOrdered);
    assert_eq!(placed.x_request_cost, Some(3));
    let hit = &server.hits("/v1/orders")[0];
    assert_eq!(header(hit, "authorization"), "Bearer tok_123");
    assert_eq!(header(hit, "content-type"), "application/json");
    let sent: serde_json::Value = serde_json::from_slice(&hit.body).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({"sku": "tea", "quantity": 2, "gift": true})
    );
    // No credential where the spec says none.
    let health = client.health().health().send().await.unwrap();
    assert_eq!(health.ok, Some(true));
    assert_eq!(header(&server.hits("/v1/health")[0], "authorization"), "");
}

#[tokio::test]
async fn parameters_are_encoded_by_their_style() {
    let (client, server) = start().await;
    let params = shop::GetOrderParams {
        expand: Some(vec!["items".into(), "customer".into()]),
        filter: Some(shop::GetOrderFilter {
            status: Some("paid".into()),
        }),
        x_trace: Some("trace-1".into()),
    };
    let order = client.orders().get(7, &params).send().await.unwrap();
    assert_eq!(order.status, shop::OrderStatus::Paid);
    let hit = &server.hits("/v1/orders/7")[0];
    assert_eq!(
        hit.query,
        "expand=items&expand=customer&filter%5Bstatus%5D=paid"
    );
    assert_eq!(header(hit, "x-trace"), "trace-1");
}

#[tokio::test]
async fn error_bodies_come_back_typed() {
    let (client, _) = start().await;
    let error = client
        .orders()
        .get(404, &shop::GetOrderParams::default())
        .send()
        .await
        .unwrap_err();
    // The header the spec declares for the request id, the attempts made.
    assert_eq!(error.request_id(), Some("corr-404"));
    assert_eq!(error.attempts(), Some(1));
    assert_eq!(error.idempotency_key(), None, "a GET sends no key");
    match error {
        ApiError::Status {
            status,
            body: shop::GetOrderError::NotFound(problem),
            ..
        } => {
            assert_eq!(status, StatusCode::NOT_FOUND);
            assert_eq!(problem.body.code.as_deref(), Some("order_missing"));
            assert_eq!(problem.body.title, "no such order");
            assert_eq!(problem.x_correlation_id.as_deref(), Some("corr-404"));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn nested_form_bodies_use_brackets() {
    let (client, server) = start().await;
    let charge = shop::NewCharge {
        amount: 2000,
        currency: "eur".into(),
        metadata: Some([("order".to_owned(), "739".to_owned())].into()),
        shipping: Some(shop::NewChargeShipping {
            name: Some("Ada Lovelace".into()),
            address: Some(shop::NewChargeShippingAddress {
                line1: None,
                city: Some("Paris".into()),
            }),
        }),
        expand: Some(vec!["customer".into()]),
    };
    let charged = client
        .charges()
        .create()
        .body(&charge)
        .send()
        .await
        .unwrap();
    assert_eq!(charged.id, "ch_1");
    let hit = &server.hits("/v1/charges")[0];
    assert_eq!(
        header(hit, "content-type"),
        "application/x-www-form-urlencoded"
    );
    let form = String::from_utf8_lossy(&hit.body).into_owned();
    assert_eq!(
        form,
        "amount=2000&currency=eur&expand%5B0%5D=customer&metadata%5Border%5D=739\
         &shipping%5Baddress%5D%5Bcity%5D=Paris&shipping%5Bname%5D=Ada+Lovelace"
    );
}

#[tokio::test]
async fn multipart_binary_and_text_bodies() {
    let (client, server) = start().await;
    let upload = shop::CreateUploadRequest {
        name: "report.pdf".into(),
        file: Bytes::from_static(b"%PDF-1.7 fake"),
    };
    let stored = client.uploads().create(&upload).send().await.unwrap();
    assert_eq!(stored.name, "report.pdf");
    let hit = &server.hits("/v1/uploads")[0];
    assert!(header(hit, "content-type").starts_with("multipart/form-data; boundary="));
    let body = String::from_utf8_lossy(&hit.body).into_owned();
    assert!(body.contains("name=\"name\"\r\n\r\nreport.pdf"), "{body}");
    assert!(body.contains("name=\"file\"; filename=\"file\""), "{body}");
    assert!(body.contains("%PDF-1.7 fake"), "{body}");

    let put = client
        .blobs()
        .put("a b/c", &Bytes::from_static(&[1, 2, 3]))
        .send()
        .await
        .unwrap();
    assert_eq!(put.e_tag.as_deref(), Some("\"v1\""));
    let hit = &server.hits("/v1/blobs/a%20b%2Fc")[0];
    assert_eq!(hit.body.as_ref(), &[1, 2, 3]);
    assert_eq!(header(hit, "content-type"), "application/octet-stream");
    let bytes = client.blobs().get("x").send().await.unwrap();
    assert_eq!(bytes.as_ref(), &[0, 159, 146, 150]);

    let noted = client
        .notes()
        .create(&shop::CreateNoteBody::Text("hello".into()))
        .send()
        .await
        .unwrap();
    assert_eq!(noted, "noted: hello");
    let json = client
        .notes()
        .create(&shop::CreateNoteBody::Json(shop::CreateNoteRequestJson {
            text: "hi".into(),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(json, "noted: {\"text\":\"hi\"}");
    let notes = server.hits("/v1/notes");
    assert_eq!(header(&notes[0], "content-type"), "text/plain");
    assert_eq!(header(&notes[1], "content-type"), "application/json");
}

#[tokio::test]
async fn one_key_per_call_sent_on_every_attempt() {
    let (client, server) = start().await;
    server.script(
        "/v1/orders",
        [
            Script::Reply(503, vec![], ""),
            Script::Reply(502, vec![], ""),
        ],
    );
    client.orders().create(&new_order()).send().await.unwrap();
    client.orders().create(&new_order()).send().await.unwrap();
    let keys: Vec<String> = server
        .hits("/v1/orders")
        .iter()
        .map(|h| header(h, "idempotency-key"))
        .collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(!keys[0].is_empty());
    assert_eq!(keys[0], keys[1]);
    assert_eq!(keys[1], keys[2], "the third attempt of the first call");
    assert_ne!(keys[2], keys[3], "a second logical call gets a fresh key");
    // A caller's own key is sent verbatim.
    let key = IdempotencyKey::derived(["order", "739", "place"]).unwrap();
    client
        .orders()
        .create(&new_order())
        .idempotency_key(key)
        .send()
        .await
        .unwrap();
    let last = server.hits("/v1/orders").pop().unwrap();
    assert_eq!(header(&last, "idempotency-key"), "order-739-place");
    // A keyed call that gives up carries its key for a later retry.
    server.script(
        "/v1/orders",
        std::iter::repeat_n(Script::Reply(503, vec![], ""), 3),
    );
    let error = failed_order(&client).await;
    let key = error
        .idempotency_key()
        .expect("the key travels with the error");
    let sent = server.hits("/v1/orders").pop().unwrap();
    assert_eq!(header(&sent, "idempotency-key"), key.as_str());
}

#[tokio::test]
async fn an_unsafe_post_is_never_resent_after_a_timeout() {
    let (client, server) = start().await;
    server.script("/v1/refunds", [Script::Hang]);
    let refund = shop::Refund {
        order: 7,
        amount: 500,
    };
    let error = client.refunds().create(&refund).send().await.unwrap_err();
    match &error {
        ApiError::Retry(retry @ RetryError::OutcomeUnknown { why, .. }) => {
            assert!(retry.is_outcome_unknown());
            assert!(why.contains("Each call refunds again"), "{why}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(server.hits("/v1/refunds").len(), 1);
    assert_eq!(
        header(&server.hits("/v1/refunds")[0], "idempotency-key"),
        ""
    );
}

#[tokio::test]
async fn the_deadline_holds_whatever_the_retry_count() {
    let (client, server) = start().await;
    let deadline = Duration::from_millis(400);
    for attempts in [1, 3, 20] {
        let retry = RetryClient::builder(reqwest_client())
            .policy(
                RetryPolicy::default()
                    .max_attempts(attempts)
                    .deadline(deadline),
            )
            .build();
        let client = shop::Client::with_retry_client(client.base_url(), retry).unwrap();
        server.script("/v1/health", std::iter::repeat_n(Script::Hang, 20));
        let started = Instant::now();
        let error = client.health().health().send().await.unwrap_err();
        let elapsed = started.elapsed();
        assert!(
            matches!(&error, ApiError::Retry(e) if e.is_deadline()),
            "{attempts} attempts: {error:?}"
        );
        // Twenty attempts without the deadline would take far longer; the
        // slack is for a loaded machine (client_engine.rs checks the exact
        // bound on a paused clock).
        assert!(
            elapsed <= deadline + Duration::from_secs(1),
            "{attempts} attempts: the call took {elapsed:?} against a {deadline:?} deadline"
        );
        server.scripts.lock().unwrap().clear();
    }
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let (client, server) = start().await;
    server.script(
        "/v1/health",
        [Script::Reply(503, vec![("retry-after", "1")], "")],
    );
    let health = client.health().health().send().await.unwrap();
    assert_eq!(health.ok, Some(true));
    let hits = server.hits("/v1/health");
    assert_eq!(hits.len(), 2);
    let waited = hits[1].at.duration_since(hits[0].at);
    assert!(waited >= Duration::from_secs(1), "retried after {waited:?}");
}

#[tokio::test]
async fn the_servers_retry_advice_is_followed() {
    let (client, server) = start().await;
    // `false`, in either spelling, stops a retry the status would allow.
    for header in ["stripe-should-retry", "x-should-retry"] {
        server.script(
            "/v1/orders",
            [Script::Reply(503, vec![(header, "false")], "")],
        );
        let before = server.hits("/v1/orders").len();
        let error = failed_order(&client).await;
        assert!(
            matches!(
                &error,
                ApiError::Retry(RetryError::GaveUp {
                    reason: GiveUp::ServerDeclined,
                    ..
                })
            ),
            "{header}: {error:?}"
        );
        assert_eq!(server.hits("/v1/orders").len(), before + 1, "{header}");
    }
    // `true` lets a keyed call retry an answer its status alone would not,
    // with the same key.
    server.script(
        "/v1/orders",
        [Script::Reply(
            400,
            vec![("stripe-should-retry", "true")],
            "",
        )],
    );
    let before = server.hits("/v1/orders").len();
    client.orders().create(&new_order()).send().await.unwrap();
    let hits = server.hits("/v1/orders");
    assert_eq!(hits.len(), before + 2);
    assert_eq!(
        header(&hits[before], "idempotency-key"),
        header(&hits[before + 1], "idempotency-key")
    );
    // Never for an unsafe call without a key.
    server.script(
        "/v1/refunds",
        [Script::Reply(
            503,
            vec![("stripe-should-retry", "true")],
            "",
        )],
    );
    let refund = shop::Refund {
        order: 7,
        amount: 500,
    };
    let error = client.refunds().create(&refund).send().await.unwrap_err();
    assert!(
        matches!(&error, ApiError::Retry(retry) if retry.is_outcome_unknown()),
        "{error:?}"
    );
    assert_eq!(server.hits("/v1/refunds").len(), 1);
}

/// The error of an order the scripted server refuses.
async fn failed_order(client: &shop::Client) -> ApiError<shop::CreateOrderError> {
    client
        .orders()
        .create(&new_order())
        .send()
        .await
        .unwrap_err()
}

fn reqwest_client() -> idem_runtime::reqwest::Client {
    idem_runtime::reqwest::Client::new()
}
