#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Keys a spec describes in words, end to end: the client generated from
//! `fixtures/described-keys.yaml` mints AWS's `ClientToken` into the body and
//! Google's `requestId` into the query, once per call, and the server
//! generated from the same spec reads them there, runs each key once and
//! replays it. Azure's tracing id is no key: its operation stays unkeyed.

use std::sync::Arc;
use std::sync::Mutex;

use idem_e2e::described_keys as api;
use idem_runtime::client::IdempotencyKey;
use idem_runtime::server::support::Context;
use idem_runtime::server::{Fault, IdemTx, Idempotency, Store};
use idem_runtime::sqlx::Sqlite;

/// What the handlers saw: each run, with the key it carried.
#[derive(Default, Clone)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

struct Api(Seen);

impl api::Api<Sqlite> for Api {
    async fn create_flow(
        &self,
        _cx: Context,
        _tx: IdemTx<Sqlite>,
        input: api::CreateFlowInput,
    ) -> Result<api::CreateFlowReply, Fault> {
        let token = input.body.client_token.unwrap_or_default();
        self.0.push(format!("flow {token}"));
        Ok(api::CreateFlowReply::Created(api::Flow {
            id: format!("flow-{}", self.0.all().len()),
            name: input.body.name,
        }))
    }

    async fn insert_instance(
        &self,
        _cx: Context,
        _tx: IdemTx<Sqlite>,
        input: api::InsertInstanceInput,
    ) -> Result<api::InsertInstanceReply, Fault> {
        let key = input.request_id.unwrap_or_default();
        self.0.push(format!("instance {key}"));
        Ok(api::InsertInstanceReply::Created(api::Flow {
            id: format!("instance-{}", self.0.all().len()),
            name: input.body.name,
        }))
    }

    async fn create_vault(
        &self,
        _cx: Context,
        _input: api::CreateVaultInput,
    ) -> Result<api::CreateVaultReply, Fault> {
        self.0.push("vault".to_owned());
        Ok(api::CreateVaultReply::Created)
    }
}

async fn serve() -> (api::Client, Seen, std::net::SocketAddr) {
    let store = Store::open_sqlite("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    let idem = Idempotency::builder(store)
        .global_scope_shared_by_all_callers()
        .build()
        .unwrap();
    let seen = Seen::default();
    let app = api::router(Api(seen.clone()), &idem).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = api::Client::new(&format!("http://{addr}")).unwrap();
    (client, seen, addr)
}

#[tokio::test]
async fn a_body_token_is_minted_once_and_replayed() {
    let (client, seen, _) = serve().await;
    let body = api::CreateFlowRequest {
        name: "nightly".into(),
        client_token: None,
    };
    // Minted by the client into `ClientToken`.
    let first = client
        .flows()
        .create(&body)
        .send_with_response()
        .await
        .unwrap();
    let minted = first.idempotency_key().unwrap().as_str().to_owned();
    assert_eq!(seen.all(), [format!("flow {minted}")]);

    // The same key again: one run, the stored answer replayed.
    let key = IdempotencyKey::new(minted.clone()).unwrap();
    let again = client
        .flows()
        .create(&body)
        .idempotency_key(key)
        .send_with_response()
        .await
        .unwrap();
    assert!(again.replayed());
    assert_eq!(again.value(), first.value());
    assert_eq!(seen.all().len(), 1);
}

#[tokio::test]
async fn a_query_request_id_is_minted_once_and_replayed() {
    let (client, seen, addr) = serve().await;
    let body = api::InsertInstanceRequest {
        name: "vm-1".into(),
    };
    let params = api::InsertInstanceParams::default();
    let key = IdempotencyKey::new("instance-739").unwrap();
    for _ in 0..2 {
        let answer = client
            .instances()
            .insert(&params, &body)
            .idempotency_key(key.clone())
            .send_with_response()
            .await
            .unwrap();
        assert_eq!(answer.value().id, "instance-1");
    }
    assert_eq!(seen.all(), ["instance instance-739"]);

    // Without a key of the caller's, one is minted into `requestId`.
    let minted = client
        .instances()
        .insert(&params, &body)
        .send_with_response()
        .await
        .unwrap();
    let minted = minted.idempotency_key().unwrap().as_str().to_owned();
    assert_eq!(seen.all().last().unwrap(), &format!("instance {minted}"));

    // The server reads the key from the query, and refuses two of them.
    let http = idem_runtime::reqwest::Client::new();
    let twice = http
        .post(format!("http://{addr}/instances?requestId=a&requestId=b"))
        .json(&serde_json::json!({ "name": "vm-2" }))
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status().as_u16(), 400);
    let error: serde_json::Value = twice.json().await.unwrap();
    assert_eq!(error["code"], "idempotency_key_invalid", "{error}");
}

#[tokio::test]
async fn a_tracing_id_is_no_key() {
    let (client, seen, addr) = serve().await;
    // No key travels, and the server runs every request it is sent.
    let params = api::CreateVaultParams {
        x_ms_client_request_id: Some("9C4D50EE-2D56-4CD3-8152-34347DC9F2B0".into()),
    };
    let answer = client
        .vaults()
        .create(&params)
        .send_with_response()
        .await
        .unwrap();
    assert!(answer.idempotency_key().is_none());
    let http = idem_runtime::reqwest::Client::new();
    for _ in 0..2 {
        let status = http
            .post(format!("http://{addr}/vaults"))
            .header("x-ms-client-request-id", "same-id")
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status.as_u16(), 201);
    }
    assert_eq!(seen.all(), ["vault", "vault", "vault"]);
}
