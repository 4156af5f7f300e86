#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! `fixtures/constraints.yaml` served by its generated server, on SQLite
//! and (when `IDEM_TEST_DATABASE_URL` is set) PostgreSQL, and called by raw
//! HTTP, as a peer tester would: every validation keyword, typed format and
//! content-type rule is answered `400`/`415`/`406` naming the field, before
//! the key is claimed, so no key row is left; the generated client refuses
//! the same values without sending anything.

use idem_e2e::constraints as api;
use idem_runtime::client::support::ApiError;
use idem_runtime::reqwest;
use idem_runtime::server::support::Context;
use idem_runtime::server::{Backend, Fault, HeaderScope, IdemTx, Idempotency, Store};
use serde_json::{Value, json};

struct Orders;

fn order() -> api::Order {
    api::Order {
        id: idem_runtime::uuid::Uuid::nil(),
        lines: Vec::new(),
        created_at: idem_runtime::chrono::DateTime::UNIX_EPOCH,
    }
}

impl<DB: Backend> api::Api<DB> for Orders {
    async fn create_order(
        &self,
        _cx: Context,
        _tx: IdemTx<DB>,
        input: api::CreateOrderInput,
    ) -> Result<api::CreateOrderReply, Fault> {
        Ok(api::CreateOrderReply::Created(api::Order {
            lines: input.body.lines,
            ..order()
        }))
    }

    async fn list_orders(
        &self,
        _cx: Context,
        _input: api::ListOrdersInput,
    ) -> Result<api::ListOrdersReply, Fault> {
        Ok(api::ListOrdersReply::Ok(Vec::new()))
    }

    async fn get_order(
        &self,
        _cx: Context,
        input: api::GetOrderInput,
    ) -> Result<api::GetOrderReply, Fault> {
        Ok(api::GetOrderReply::Ok(api::Order {
            id: input.order_id,
            ..order()
        }))
    }

    async fn create_note(
        &self,
        _cx: Context,
        input: api::CreateNoteInput,
    ) -> Result<api::CreateNoteReply, Fault> {
        Ok(match input.body {
            api::CreateNoteRequestBody::Json(note) | api::CreateNoteRequestBody::Form(note) => {
                api::CreateNoteReply::Created(note)
            }
        })
    }
}

type Count = Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = i64>>>>;

struct Served {
    base: String,
    /// Rows in the key table.
    keys: Count,
}

async fn serve<DB: Backend>(store: Store<DB>) -> String {
    store.migrate().await.unwrap();
    let idem = Idempotency::builder(store)
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let app = api::router(Orders, &idem).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// Counts the rows of the key table in `pool` (either engine).
macro_rules! key_counter {
    ($pool:expr) => {{
        let pool = $pool;
        let count: Count = Box::new(move || {
            let pool = pool.clone();
            Box::pin(async move {
                idem_runtime::sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM idem_keys")
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            })
        });
        count
    }};
}

async fn stores() -> Vec<(&'static str, Served)> {
    let sqlite = Store::open_sqlite("sqlite::memory:").await.unwrap();
    let keys = key_counter!(sqlite.pool().clone());
    let mut out = vec![(
        "SQLite",
        Served {
            base: serve(sqlite).await,
            keys,
        },
    )];
    match std::env::var("IDEM_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        Some(url) => {
            let admin = Store::connect_postgres(&url, 1).await.unwrap();
            let name = format!(
                "constraints_{}",
                idem_runtime::uuid::Uuid::new_v4().simple()
            );
            idem_runtime::sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(admin.pool())
                .await
                .unwrap();
            let (server, _) = url.rsplit_once('/').unwrap();
            let store = Store::connect_postgres(&format!("{server}/{name}"), 8)
                .await
                .unwrap();
            let keys = key_counter!(store.pool().clone());
            out.push((
                "PostgreSQL",
                Served {
                    base: serve(store).await,
                    keys,
                },
            ));
        }
        None => eprintln!("skipped on PostgreSQL: IDEM_TEST_DATABASE_URL is not set"),
    }
    out
}

fn valid_order() -> Value {
    json!({
        "lines": [{"sku": "TEA-0001", "quantity": 2, "unit_price": 19.99}],
        "note": "日本語日本語日本語日",
        "gift": null,
        "ship_to": {"country": "DE", "ip": "192.0.2.1", "ip6": "2001:db8::1"},
        "payment": {"kind": "card", "last4": "4242"},
        "deliver_on": "2026-12-24",
        "labels": {"a": "x"},
        "contact": {"email": "a@b.c", "channel": "sms"},
        "backup_contact": {"email": "d@e.f"}
    })
}

/// `valid_order()` with the JSON pointer `at` set to `value`.
fn with(at: &str, value: Value) -> Value {
    let mut order = valid_order();
    let (parent, name) = at.rsplit_once('/').unwrap();
    match order.pointer_mut(parent).unwrap() {
        Value::Object(map) => {
            map.insert(name.to_owned(), value);
        }
        other => *other.get_mut(name.parse::<usize>().unwrap()).unwrap() = value,
    }
    order
}

async fn post(base: &str, key: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/v1/orders"))
        .header("x-account-id", "acct-1")
        .header("idempotency-key", key)
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn post_json(base: &str, key: &str, body: &Value) -> (u16, Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    post(base, key, &[("content-type", "application/json")], &bytes).await
}

#[tokio::test]
async fn every_keyword_is_a_400_naming_the_field_before_the_claim() {
    for (engine, served) in stores().await {
        let base = &served.base;
        let cases: Vec<(Value, &str, &str)> = vec![
            (with("/lines", json!([])), "body.lines", "minItems"),
            (
                with(
                    "/lines",
                    Value::Array(vec![valid_order()["lines"][0].clone(); 6]),
                ),
                "body.lines",
                "maxItems",
            ),
            (
                with("/lines/0/quantity", json!(0)),
                "body.lines[0].quantity",
                "minimum",
            ),
            (
                with("/lines/0/quantity", json!(1001)),
                "body.lines[0].quantity",
                "maximum",
            ),
            (
                with("/lines/0/sku", json!("tea-0001")),
                "body.lines[0].sku",
                "pattern",
            ),
            // ECMA-262 `\d` is ASCII: Arabic-Indic digits do not match it.
            (
                with("/lines/0/sku", json!("TEA-١٢٣٤")),
                "body.lines[0].sku",
                "pattern",
            ),
            (
                with("/lines/0/unit_price", json!(0)),
                "body.lines[0].unit_price",
                "exclusiveMinimum",
            ),
            (
                with("/lines/0/unit_price", json!(1.005)),
                "body.lines[0].unit_price",
                "multipleOf",
            ),
            (
                with("/note", json!("12345678901")),
                "body.note",
                "maxLength",
            ),
            (
                with("/ship_to/country", json!("DEU")),
                "body.ship_to.country",
                "maxLength",
            ),
            (
                with("/payment/last4", json!("42a2")),
                "body.payment.last4",
                "pattern",
            ),
            (
                with("/payment", json!({"kind": "voucher", "code": "abc"})),
                "body.payment.code",
                "minLength",
            ),
            (with("/labels", json!({})), "body.labels", "minProperties"),
            (
                with("/labels", json!({"a": "1", "b": "2", "c": "3"})),
                "body.labels",
                "maxProperties",
            ),
            (
                with("/labels/a", json!("123456")),
                "body.labels.a",
                "maxLength",
            ),
            // One struct for both, checked where each is.
            (
                with("/contact/email", json!("ab")),
                "body.contact.email",
                "minLength",
            ),
            (
                with("/backup_contact/email", json!("ab")),
                "body.backup_contact.email",
                "minLength",
            ),
        ];
        for (index, (body, field, keyword)) in cases.iter().enumerate() {
            let (status, answer) = post_json(base, &format!("k-{index}"), body).await;
            assert_eq!(status, 400, "{engine} {field} {keyword}: {answer}");
            assert_eq!(answer["code"], "invalid_request", "{engine}: {answer}");
            assert_eq!(answer["field"], *field, "{engine} {keyword}: {answer}");
        }
        // Decoded strictly: types, formats, nullability, closed objects.
        let decoded: Vec<(Value, &str)> = vec![
            (with("/note", Value::Null), "body.note"),
            (with("/ship_to/ip", json!("300.1.1.1")), "body.ship_to.ip"),
            (
                with("/ship_to/ip6", json!("2001:db8::g")),
                "body.ship_to.ip6",
            ),
            (with("/deliver_on", json!("2026-13-01")), "body.deliver_on"),
            (with("/lines/0/colour", json!("red")), "body.lines[0]"),
            (with("/payment/kind", json!("cash")), "body.payment"),
            (
                with("/backup_contact/channel", json!("fax")),
                "body.backup_contact",
            ),
            (with("/contact/channel", Value::Null), "body.contact"),
        ];
        for (index, (body, field)) in decoded.iter().enumerate() {
            let (status, answer) = post_json(base, &format!("d-{index}"), body).await;
            assert_eq!(status, 400, "{engine} {field}: {answer}");
            let named = answer["field"].as_str().unwrap_or_default();
            assert!(named.starts_with(field), "{engine} {field}: {answer}");
        }
        // A header parameter's pattern.
        let bytes = serde_json::to_vec(&valid_order()).unwrap();
        let (status, answer) = post(
            base,
            "h-1",
            &[("content-type", "application/json"), ("x-trace", "XYZ")],
            &bytes,
        )
        .await;
        assert_eq!(
            (status, answer["field"].clone()),
            (400, json!("header.X-Trace"))
        );
        assert_eq!(
            (served.keys)().await,
            0,
            "{engine}: a refused request left a key row"
        );

        // The valid order, with a 10-character (30-byte) note and a null
        // where the schema allows one, goes through and is recorded once.
        let (status, answer) = post_json(base, "ok-1", &valid_order()).await;
        assert_eq!(status, 201, "{engine}: {answer}");
        assert_eq!(answer["lines"][0]["sku"], "TEA-0001");
        assert_eq!((served.keys)().await, 1, "{engine}");
        // `2.0` is the integer 2, as JSON Schema counts.
        let whole = with("/lines/0/quantity", json!(2.0));
        let (status, answer) = post_json(base, "ok-2", &whole).await;
        assert_eq!(
            (status, answer["lines"][0]["quantity"].clone()),
            (201, json!(2))
        );
        let half = with("/lines/0/quantity", json!(2.5));
        let (status, answer) = post_json(base, "bad-2", &half).await;
        assert_eq!(
            (status, answer["field"].clone()),
            (400, json!("body.lines[0].quantity"))
        );
    }
}

#[tokio::test]
async fn content_types_are_negotiated() {
    for (engine, served) in stores().await {
        let base = &served.base;
        let bytes = serde_json::to_vec(&valid_order()).unwrap();
        for (index, content_type) in [
            "text/plain",
            "application/xml",
            "application/x-www-form-urlencoded",
        ]
        .iter()
        .enumerate()
        {
            let (status, answer) = post(
                base,
                &format!("ct-{index}"),
                &[("content-type", content_type)],
                &bytes,
            )
            .await;
            assert_eq!(status, 415, "{engine} {content_type}: {answer}");
            assert_eq!(answer["code"], "unsupported_media_type");
            assert!(
                answer["message"]
                    .as_str()
                    .unwrap()
                    .contains("application/json")
            );
        }
        let (status, answer) = post(base, "ct-none", &[], &bytes).await;
        assert_eq!(
            (status, answer["code"].clone()),
            (415, json!("unsupported_media_type"))
        );
        let (status, answer) = post(base, "ct-bad", &[("content-type", "json")], &bytes).await;
        assert_eq!(
            (status, answer["field"].clone()),
            (400, json!("header.Content-Type"))
        );
        // Parameters of the media type are fine.
        let (status, _) = post(
            base,
            "ct-charset",
            &[("content-type", "application/json; charset=utf-8")],
            &bytes,
        )
        .await;
        assert_eq!(status, 201, "{engine}");
        assert_eq!(
            (served.keys)().await,
            1,
            "{engine}: only the accepted request is recorded"
        );

        // Two request types, two response types: `Accept` is honoured.
        let http = reqwest::Client::new();
        let note = |content_type: &'static str, accept: &'static str| {
            http.post(format!("{base}/v1/notes"))
                .header("x-account-id", "acct-1")
                .header("content-type", content_type)
                .header("accept", accept)
                .body(r#"{"text":"hi"}"#)
                .send()
        };
        let statuses = [
            note("application/json", "application/json")
                .await
                .unwrap()
                .status(),
            note("application/vnd.idem.note+json", "*/*")
                .await
                .unwrap()
                .status(),
            note("application/json", "text/*").await.unwrap().status(),
            note("application/json", "image/png")
                .await
                .unwrap()
                .status(),
            note("application/merge-patch+json", "*/*")
                .await
                .unwrap()
                .status(),
        ];
        let statuses: Vec<u16> = statuses.iter().map(|s| s.as_u16()).collect();
        assert_eq!(statuses, [201, 201, 201, 406, 415], "{engine}");
        // Each media type's body is held to the schema.
        let form = |text: &'static str| {
            http.post(format!("{base}/v1/notes"))
                .header("x-account-id", "acct-1")
                .header("content-type", "application/x-www-form-urlencoded")
                .body(text)
                .send()
        };
        assert_eq!(
            form("text=hi").await.unwrap().status().as_u16(),
            201,
            "{engine}"
        );
        let empty: Value = form("text=").await.unwrap().json().await.unwrap();
        assert_eq!(empty["field"], "body.text", "{engine}: {empty}");
    }
}

#[tokio::test]
async fn parameters_are_checked_and_typed() {
    for (engine, served) in stores().await {
        let base = &served.base;
        let http = reqwest::Client::new();
        let get = |path: String| {
            http.get(format!("{base}{path}"))
                .header("x-account-id", "acct-1")
                .send()
        };
        let cases = [
            ("/v1/orders?limit=0", "query.limit"),
            ("/v1/orders?limit=101", "query.limit"),
            ("/v1/orders?after=yesterday", "query.after"),
            ("/v1/orders?tags=a", "query.tags[0]"),
            ("/v1/orders?tags=ab&tags=ab", "query.tags"),
            ("/v1/orders?tags=ab&tags=cd&tags=ef&tags=gh", "query.tags"),
            ("/v1/orders/not-a-uuid", "path.order_id"),
        ];
        for (path, field) in cases {
            let response = get(path.to_owned()).await.unwrap();
            let status = response.status().as_u16();
            let answer: Value = response.json().await.unwrap();
            assert_eq!(status, 400, "{engine} {path}: {answer}");
            assert_eq!(answer["field"], field, "{engine} {path}: {answer}");
        }
        let ok =
            get("/v1/orders?limit=100&after=2026-12-02T10:00:00%2B01:00&tags=ab&tags=cd".into())
                .await
                .unwrap();
        assert_eq!(ok.status().as_u16(), 200, "{engine}");
        let id = "6f1d1e7c-5b9e-4c43-9d0c-3a3c2d1e0f00";
        let one: Value = get(format!("/v1/orders/{id}"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(one["id"], id);
        assert_eq!(one["created_at"], "1970-01-01T00:00:00Z");

        // The caller's scope on a route without a key: as on keyed routes.
        let missing = http.get(format!("{base}/v1/orders")).send().await.unwrap();
        let empty = http
            .get(format!("{base}/v1/orders"))
            .header("x-account-id", "")
            .send()
            .await
            .unwrap();
        let (missing, empty) = (missing.status().as_u16(), empty);
        let empty_status = empty.status().as_u16();
        let empty: Value = empty.json().await.unwrap();
        assert_eq!(missing, 401, "{engine}");
        assert_eq!(
            (empty_status, empty["code"].clone()),
            (400, json!("caller_scope_invalid")),
            "{engine}"
        );
    }
}

#[tokio::test]
async fn the_client_refuses_what_the_server_would_without_sending() {
    // Nothing listens here: a request that left the process would fail
    // with a transport error instead.
    let client = api::Client::new("http://127.0.0.1:9").unwrap();
    let body: api::NewOrder = serde_json::from_value(with("/lines/0/quantity", json!(0))).unwrap();
    let params = api::CreateOrderParams {
        x_account_id: "acct-1".into(),
        x_trace: None,
        dry_run: None,
    };
    match client.orders().create(&params, &body).send().await {
        Err(ApiError::Invalid(violations)) => {
            let first = violations.first();
            assert_eq!(first.field, "body.lines[0].quantity");
            assert_eq!(first.keyword, "minimum");
            assert_eq!(first.message, "must be at least 1");
        }
        other => panic!("expected a refusal before sending, got {other:?}"),
    }
    let params = api::ListOrdersParams {
        x_account_id: "acct-1".into(),
        limit: Some(0),
        after: None,
        tags: None,
    };
    match client.orders().list(&params).send().await {
        Err(ApiError::Invalid(violations)) => assert_eq!(violations.first().field, "query.limit"),
        other => panic!("expected a refusal before sending, got {other:?}"),
    }
    // In whichever media type the caller picks.
    let params = api::CreateNoteParams {
        x_account_id: "acct-1".into(),
    };
    let note = api::CreateNoteBody::Form(api::Note {
        text: String::new(),
    });
    match client.notes().create(&params, &note).send().await {
        Err(ApiError::Invalid(violations)) => assert_eq!(violations.first().field, "body.text"),
        other => panic!("expected a refusal before sending, got {other:?}"),
    }
}
