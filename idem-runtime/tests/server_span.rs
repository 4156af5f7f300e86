#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Each keyed request runs in one `idem.request` span that names its
//! operation, key, scope digest, lock generation and outcome, and no field
//! of any span or event holds the caller's credential.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::post;
use http::StatusCode;
use idem_runtime::server::{Credential, IdemTx, Idempotency, Requirement, Store, scope_digest};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

type Fields = BTreeMap<String, String>;

/// Every span's fields by its id, and every event's fields.
#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<BTreeMap<u64, (String, Fields)>>>,
    events: Arc<Mutex<Vec<Fields>>>,
}

struct Collect<'a>(&'a mut Fields);

impl Visit for Collect<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut Collect(&mut fields));
        self.spans
            .lock()
            .unwrap()
            .insert(id.into_u64(), (attrs.metadata().name().to_owned(), fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some((_, fields)) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Collect(fields));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut Collect(&mut fields));
        self.events.lock().unwrap().push(fields);
    }
}

async fn create(_tx: IdemTx<sqlx::Sqlite>, body: String) -> (StatusCode, String) {
    (StatusCode::CREATED, body)
}

const BEARER: &[Requirement] = &[&[("bearerAuth", Credential::Bearer)]];
const TOKEN: &str = "sk_live_secret_token_1234";

#[tokio::test]
async fn a_keyed_request_has_one_span_with_its_outcome_and_no_credential() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry()
        .with(capture.clone())
        .with(tracing_subscriber::filter::LevelFilter::DEBUG);
    let _guard = tracing::subscriber::set_default(subscriber);

    let store = Store::open_sqlite("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    let idem = Idempotency::builder(store)
        .credential_digest_key([9u8; 32])
        .build()
        .unwrap()
        .scoped_by_credential(BEARER)
        .unwrap();
    let app: Router = Router::new()
        .route("/charges", post(create))
        .route_layer(idem.layer().operation("createCharge"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let http = reqwest::Client::new();
    for _ in 0..2 {
        let r = http
            .post(format!("{base}/charges"))
            .bearer_auth(TOKEN)
            .header("idempotency-key", "order-739")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }

    let spans: Vec<Fields> = capture
        .spans
        .lock()
        .unwrap()
        .values()
        .filter(|(name, _)| name == "idem.request")
        .map(|(_, fields)| fields.clone())
        .collect();
    assert_eq!(spans.len(), 2, "one span per request: {spans:?}");
    let scope =
        idem_runtime::server::credential_digest(&[9u8; 32], &[("bearerAuth", TOKEN.as_bytes())]);
    for (span, outcome) in spans.iter().zip(["executed", "replayed"]) {
        assert_eq!(span["operation"], "createCharge");
        assert_eq!(span["key"], "order-739");
        assert_eq!(span["scope_digest"], scope_digest(&scope));
        assert_eq!(span["outcome"], outcome, "{span:?}");
    }
    assert_eq!(
        spans[0]["generation"], "1",
        "the executed request held generation 1"
    );
    let everything = format!(
        "{:?} {:?}",
        capture.spans.lock().unwrap(),
        capture.events.lock().unwrap()
    );
    assert!(
        !everything.contains(TOKEN),
        "a credential was logged: {everything}"
    );
    assert!(
        !everything.contains(&scope),
        "the stored scope itself is not logged"
    );
}
