#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Shapes from APIs.guru's directory, each a fixture of
//! `fixtures/directory/`: an `allOf` with a `oneOf` part, a `oneOf` beside
//! an `allOf`, a value of several JSON types and a mixed enum under one
//! type are typed and read and write their JSON unchanged
//! (`combined-types.yaml`); FastAPI's operationIds give short names
//! (`fastapi-names.yaml`).

use idem_e2e::directory::combined_types as api;
use idem_runtime::validate::check;
use serde_json::{Value, json};

/// `value` read as `T` and written back.
fn round_trip<T>(value: &Value) -> T
where
    T: idem_runtime::serde::de::DeserializeOwned + idem_runtime::serde::Serialize,
{
    let typed: T = serde_json::from_value(value.clone()).expect("reads");
    assert_eq!(&serde_json::to_value(&typed).unwrap(), value);
    typed
}

#[test]
fn an_all_of_with_a_one_of_part_is_an_enum_of_whole_objects() {
    let card = json!({"id": "pm_1", "created": 7, "kind": "card", "last4": "4242"});
    match round_trip::<api::PaymentMethod>(&card) {
        api::PaymentMethod::Card(card) => {
            assert_eq!((card.id.as_str(), card.last4.as_str()), ("pm_1", "4242"));
            assert_eq!(card.created, Some(7));
        }
        other => panic!("a card read as {other:?}"),
    }
    let bank = json!({"id": "pm_2", "kind": "bank", "iban": "DE89"});
    assert!(matches!(
        round_trip::<api::PaymentMethod>(&bank),
        api::PaymentMethod::Bank(b) if b.iban == "DE89" && b.id == "pm_2"
    ));
    // The base's required field is required of every variant.
    let no_id = json!({"kind": "bank", "iban": "DE89"});
    assert!(serde_json::from_value::<api::PaymentMethod>(no_id).is_err());
    // The tag picks the variant: a card without its own field is refused.
    let wrong = json!({"id": "pm_3", "kind": "card", "iban": "DE89"});
    assert!(serde_json::from_value::<api::PaymentMethod>(wrong).is_err());
}

#[test]
fn a_one_of_beside_an_all_of_keeps_the_shared_fields() {
    let saved = json!({"id": "pm_5", "kind": "bank", "iban": "NL91"});
    assert!(matches!(
        round_trip::<api::SavedMethod>(&saved),
        api::SavedMethod::Bank(b) if b.id == "pm_5"
    ));
}

#[test]
fn variants_that_only_constrain_leave_one_object() {
    let contact = json!({"email": "a@example.com"});
    let typed = round_trip::<api::Contact>(&contact);
    assert_eq!(typed.email.as_deref(), Some("a@example.com"));
    // The children of a parent that lists them are not given a sibling's
    // shape: they read any JSON, as before.
    let cat = json!({"petType": "Cat", "indoor": true});
    assert_eq!(round_trip::<api::Cat>(&cat), cat);
}

#[test]
fn a_value_of_several_types_is_an_untagged_enum() {
    let label = json!({"code": 42, "legacy": "old", "band": 2.4});
    let typed = round_trip::<api::Label>(&label);
    assert_eq!(typed.band, Some(2.4));
    assert!(matches!(typed.code, api::LabelCode::Integer(42)));
    assert!(matches!(typed.legacy, Some(api::LabelLegacy::String(ref s)) if s == "old"));
    let named = round_trip::<api::Label>(&json!({"code": "gold"}));
    assert!(matches!(named.code, api::LabelCode::String(ref s) if s == "gold"));
    // Neither a string nor an integer.
    assert!(serde_json::from_value::<api::Label>(json!({"code": 1.5})).is_err());
    // The string's bound applies to the string.
    let long: api::Label = serde_json::from_value(json!({"code": "x".repeat(17)})).unwrap();
    assert!(check("body", &long).is_err(), "a 17-character code passed");
}

/// `fixtures/directory/fastapi-names.yaml`: FastAPI's operationIds give
/// path-shaped names, and they reach a loopback server.
#[tokio::test]
async fn fastapi_operation_ids_give_short_names() {
    use idem_e2e::directory::fastapi_names::Client;
    let app = axum::Router::new()
        .route(
            "/api/v1/app/",
            axum::routing::get(|| async { axum::Json(json!([{"id": "app_1", "name": "a"}])) }),
        )
        .route(
            "/api/v1/app/{app_id}/msg/{msg_id}/",
            axum::routing::get(
                |axum::extract::Path((app, msg)): axum::extract::Path<(String, String)>| async move {
                    axum::Json(json!({"id": format!("{app}/{msg}")}))
                },
            ),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = Client::new(&base).unwrap();
    let apps = client.application().list().send().await.unwrap();
    assert_eq!(apps[0].id, "app_1");
    let message = client.message().get("app_1", "msg_2").send().await.unwrap();
    assert_eq!(message.id, "app_1/msg_2");
}
