#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! `fixtures/bearer.yaml` (`x-idempotency.scope: credential`) served by its
//! generated router on SQLite and (when `IDEM_TEST_DATABASE_URL` is set)
//! PostgreSQL, with no scope extractor written: the router derives each
//! key's scope from the request's bearer token (or its `api_key` query
//! parameter) and stores a keyed digest of it. Keys sent under two tokens
//! never meet, a request without a credential is a `401` that stores
//! nothing, and no token's text is anywhere in the database's bytes. The
//! same fixture holds the first-call shapes of the generated client: a body
//! that can only be `{}` is no argument, and an optional body is set on the
//! call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idem_e2e::bearer as api;
use idem_runtime::reqwest;
use idem_runtime::server::support::Context;
use idem_runtime::server::{Backend, ConfigError, Fault, HeaderScope, IdemTx, Idempotency, Store};
use serde_json::{Value, json};

const TOKEN_A: &str = "tok_live_alpha_4f1c9e2b7d";
const TOKEN_B: &str = "tok_live_bravo_8a3d6f0e1c";
const QUERY_KEY: &str = "qk_charlie_5b2e9d7a4f";
const DIGEST_KEY: &[u8; 32] = b"0123456789abcdef0123456789abcdef";

#[derive(Default)]
struct Ledger {
    posted: Arc<AtomicU64>,
    /// `id:reason` of each voided entry.
    voided: Arc<std::sync::Mutex<Vec<String>>>,
}

impl<DB: Backend> api::Api<DB> for Ledger {
    async fn create_entry(
        &self,
        _cx: Context,
        _tx: IdemTx<DB>,
        input: api::CreateEntryInput,
    ) -> Result<api::CreateEntryReply, Fault> {
        let n = self.posted.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(api::CreateEntryReply::Created(api::Entry {
            id: format!("entry-{n}"),
            amount: input.body.amount,
            memo: input.body.memo,
        }))
    }

    async fn create_export(
        &self,
        _cx: Context,
        _tx: IdemTx<DB>,
    ) -> Result<api::CreateExportReply, Fault> {
        Ok(api::CreateExportReply::Created)
    }

    async fn list_entries(
        &self,
        _cx: Context,
        _input: api::ListEntriesInput,
    ) -> Result<api::ListEntriesReply, Fault> {
        Ok(api::ListEntriesReply::Ok(Vec::new()))
    }

    async fn void_entry(
        &self,
        _cx: Context,
        input: api::VoidEntryInput,
    ) -> Result<api::VoidEntryReply, Fault> {
        let reason = input.body.and_then(|b| b.reason).unwrap_or_default();
        self.voided
            .lock()
            .unwrap()
            .push(format!("{}:{reason}", input.id));
        Ok(api::VoidEntryReply::NoContent)
    }
}

struct Served {
    engine: &'static str,
    base: String,
    posted: Arc<AtomicU64>,
    /// Every byte the database holds for idem, as text.
    dump: Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = String>>>>,
    /// Rows in the key table.
    rows: Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = i64>>>>,
    _dir: Option<tempfile::TempDir>,
}

async fn serve<DB: Backend>(store: Store<DB>) -> (String, Arc<AtomicU64>) {
    let (base, ledger) = serve_ledger(store).await;
    (base, ledger.posted)
}

async fn serve_ledger<DB: Backend>(store: Store<DB>) -> (String, Ledger) {
    store.migrate().await.unwrap();
    let idem = Idempotency::builder(store)
        .credential_digest_key(DIGEST_KEY)
        .build()
        .unwrap();
    let ledger = Ledger::default();
    let app = api::router(
        Ledger {
            posted: Arc::clone(&ledger.posted),
            voided: Arc::clone(&ledger.voided),
        },
        &idem,
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), ledger)
}

async fn stores() -> Vec<Served> {
    use idem_runtime::sqlx;
    // A file, not memory: the check reads the database's own bytes
    // (pages, free pages and the write-ahead log alike).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.db");
    let sqlite = Store::open_sqlite(&format!("sqlite://{}?mode=rwc", file.display()))
        .await
        .unwrap();
    let pool = sqlite.pool().clone();
    let (base, posted) = serve(sqlite).await;
    let dir_path = dir.path().to_owned();
    let mut out = vec![Served {
        engine: "SQLite",
        base,
        posted,
        dump: Box::new(move || {
            let dir = dir_path.clone();
            Box::pin(async move {
                let mut all = Vec::new();
                for entry in std::fs::read_dir(&dir).unwrap() {
                    all.extend(std::fs::read(entry.unwrap().path()).unwrap());
                }
                String::from_utf8_lossy(&all).into_owned()
            })
        }),
        rows: Box::new(move || {
            let pool = pool.clone();
            Box::pin(async move {
                sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM idem_keys")
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            })
        }),
        _dir: Some(dir),
    }];
    match std::env::var("IDEM_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        Some(url) => {
            let admin = Store::connect_postgres(&url, 1).await.unwrap();
            let name = format!("bearer_{}", idem_runtime::uuid::Uuid::new_v4().simple());
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(admin.pool())
                .await
                .unwrap();
            let (server, _) = url.rsplit_once('/').unwrap();
            let store = Store::connect_postgres(&format!("{server}/{name}"), 8)
                .await
                .unwrap();
            let pool = store.pool().clone();
            let rows_pool = pool.clone();
            let (base, posted) = serve(store).await;
            out.push(Served {
                engine: "PostgreSQL",
                base,
                posted,
                // Every row of every table, as PostgreSQL prints it.
                dump: Box::new(move || {
                    let pool = pool.clone();
                    Box::pin(async move {
                        let tables: Vec<String> = sqlx::query_scalar(
                            "SELECT table_name::text FROM information_schema.tables \
                             WHERE table_schema = 'public'",
                        )
                        .fetch_all(&pool)
                        .await
                        .unwrap();
                        assert!(tables.iter().any(|t| t == "idem_keys"), "{tables:?}");
                        let mut all = String::new();
                        for table in tables {
                            let rows: Vec<String> =
                                sqlx::query_scalar(&format!("SELECT t::text FROM \"{table}\" t"))
                                    .fetch_all(&pool)
                                    .await
                                    .unwrap();
                            all.push_str(&rows.join("\n"));
                        }
                        all
                    })
                }),
                rows: Box::new(move || {
                    let pool = rows_pool.clone();
                    Box::pin(async move {
                        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM idem_keys")
                            .fetch_one(&pool)
                            .await
                            .unwrap()
                    })
                }),
                _dir: None,
            });
        }
        None => eprintln!("skipped on PostgreSQL: IDEM_TEST_DATABASE_URL is not set"),
    }
    out
}

async fn post(
    base: &str,
    credential: Option<&str>,
    query: &str,
    key: &str,
    body: &Value,
) -> (u16, Option<String>, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/v1/entries{query}"))
        .header("idempotency-key", key)
        .json(body);
    if let Some(token) = credential {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .map(|v| v.to_str().unwrap().to_owned());
    (
        status,
        replayed,
        response.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn keys_are_scoped_by_a_digest_of_the_credential() {
    for served in stores().await {
        let engine = served.engine;
        let base = &served.base;
        let body = json!({"amount": 250, "memo": "rent"});

        // The same key under one token: the second request is a replay.
        let (status, replayed, first) = post(base, Some(TOKEN_A), "", "key-1", &body).await;
        assert_eq!(status, 201, "{engine}: {first}");
        assert_eq!(replayed, None, "{engine}");
        let (status, replayed, again) = post(base, Some(TOKEN_A), "", "key-1", &body).await;
        assert_eq!(
            (status, replayed.as_deref()),
            (201, Some("true")),
            "{engine}"
        );
        assert_eq!(again, first, "{engine}");

        // The same key under another token is another caller's key: a new
        // entry, not the first caller's stored response.
        let (status, replayed, other) = post(base, Some(TOKEN_B), "", "key-1", &body).await;
        assert_eq!((status, replayed), (201, None), "{engine}");
        assert_ne!(other["id"], first["id"], "{engine}");

        // A different body under token B's key is a mismatch for B alone.
        let (status, _, reused) =
            post(base, Some(TOKEN_B), "", "key-1", &json!({"amount": 1})).await;
        assert_eq!(status, 409, "{engine}: {reused}");
        assert_eq!(reused["code"], "idempotency_key_reused", "{engine}");

        // The other alternative of the operation's `security`: the API key
        // in the query string is a credential of its own.
        let query = format!("?api_key={QUERY_KEY}");
        let (status, replayed, by_query) = post(base, None, &query, "key-1", &body).await;
        assert_eq!((status, replayed), (201, None), "{engine}: {by_query}");
        let (status, replayed, _) = post(base, None, &query, "key-1", &body).await;
        assert_eq!(
            (status, replayed.as_deref()),
            (201, Some("true")),
            "{engine}"
        );
        assert_eq!(served.posted.load(Ordering::SeqCst), 3, "{engine}");
        assert_eq!((served.rows)().await, 3, "{engine}");

        // No credential at all: the declared 401, before anything is stored.
        for (credential, what) in [(None, "none"), (Some(""), "an empty bearer token")] {
            let (status, _, refused) = post(base, credential, "", "key-2", &body).await;
            assert_eq!(status, 401, "{engine}, {what}: {refused}");
            assert_eq!(refused["code"], "caller_unidentified", "{engine}");
        }
        assert_eq!((served.rows)().await, 3, "{engine}: a refusal stored a row");

        // Two credentials where one goes: refused, nothing stored.
        let refused = reqwest::Client::new()
            .post(format!("{base}/v1/entries"))
            .header("idempotency-key", "key-3")
            .header("authorization", format!("Bearer {TOKEN_A}"))
            .header("authorization", format!("Bearer {TOKEN_B}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status().as_u16(), 400, "{engine}");
        let refused: Value = refused.json().await.unwrap();
        assert_eq!(refused["code"], "caller_scope_invalid", "{engine}");
        assert_eq!((served.rows)().await, 3, "{engine}: a refusal stored a row");

        // The raw database: digests only, no token's text.
        let dump = (served.dump)().await;
        assert!(
            dump.contains("key-1"),
            "{engine}: the dump reads no key rows"
        );
        assert!(dump.contains("cred:"), "{engine}: no digest scope stored");
        for secret in [TOKEN_A, TOKEN_B, QUERY_KEY] {
            assert!(!dump.contains(secret), "{engine}: {secret} is stored");
        }
    }
}

#[tokio::test]
async fn the_generated_client_authenticates_and_its_key_is_scoped() {
    let store = Store::open_sqlite("sqlite::memory:").await.unwrap();
    let (base, posted) = serve(store).await;
    let alpha = api::Client::new(&base).unwrap().bearer_auth(TOKEN_A);
    let bravo = api::Client::new(&base).unwrap().bearer_auth(TOKEN_B);
    let body = api::CreateEntryRequest {
        amount: 10,
        memo: None,
    };
    let key = idem_runtime::client::IdempotencyKey::derived(["entry", "42"]).unwrap();
    let first = alpha
        .entries()
        .create(&body)
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    let replay = alpha
        .entries()
        .create(&body)
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    let other = bravo
        .entries()
        .create(&body)
        .idempotency_key(key)
        .send()
        .await
        .unwrap();
    assert_eq!(first, replay);
    assert_ne!(first, other);
    assert_eq!(posted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_key_status_resource_answers_in_the_credential_scope() {
    let store = Store::open_sqlite("sqlite::memory:").await.unwrap();
    let (base, _) = serve(store).await;
    let http = reqwest::Client::new();
    let started = http
        .post(format!("{base}/v1/exports"))
        .header("idempotency-key", "export-1")
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status().as_u16(), 201);
    let status = |token: Option<&'static str>| {
        let mut request = http.get(format!("{base}/idempotency-keys/export-1"));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    // The owner reads its stored answer; another token's scope has no such
    // key; no credential is no caller.
    assert_eq!(status(Some(TOKEN_A)).await, 201);
    assert_eq!(status(Some(TOKEN_B)).await, 404);
    assert_eq!(status(None).await, 401);
}

#[tokio::test]
async fn a_credential_scoped_router_needs_a_digest_key_of_32_bytes() {
    let store = Store::open_sqlite("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    let short = Idempotency::builder(store.clone())
        .credential_digest_key(b"short")
        .build();
    assert!(matches!(
        short,
        Err(ConfigError::DigestKeyTooShort { len: 5, min: 32 })
    ));
    // An account extractor alone does not serve credential-scoped routes.
    let idem = Idempotency::builder(store)
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let ledger = Ledger::default();
    let refused = api::router(ledger, &idem).err();
    assert!(
        matches!(refused, Some(ConfigError::MissingDigestKey { min: 32 })),
        "{refused:?}"
    );
    // An operation with no credential to read cannot be scoped by one.
    let keyed = Idempotency::builder(Store::open_sqlite("sqlite::memory:").await.unwrap())
        .credential_digest_key(DIGEST_KEY)
        .build()
        .unwrap();
    let mtls_only: &'static [idem_runtime::server::Requirement] = &[&[]];
    assert!(matches!(
        keyed.scoped_by_credential(mtls_only).err(),
        Some(ConfigError::NoCredentialToScopeBy)
    ));
}

#[tokio::test]
async fn optional_and_empty_bodies_are_not_arguments() {
    let store = Store::open_sqlite("sqlite::memory:").await.unwrap();
    let (base, ledger) = serve_ledger(store).await;
    let client = api::Client::new(&base).unwrap().bearer_auth(TOKEN_A);
    // A body that can only be `{}` is no parameter at all.
    let listed = client.entries().list().send().await.unwrap();
    assert!(listed.is_empty());
    // A DELETE body is kept, and set on the call only when wanted.
    client.entries().void("e-1").send().await.unwrap();
    let reason = api::VoidEntryRequest {
        reason: Some("duplicate".into()),
    };
    client
        .entries()
        .void("e-2")
        .body(&reason)
        .send()
        .await
        .unwrap();
    // The optional body is checked like any input: nothing is sent.
    let too_long = api::VoidEntryRequest {
        reason: Some("x".repeat(41)),
    };
    let refused = client.entries().void("e-3").body(&too_long).send().await;
    match refused {
        Err(idem_runtime::client::support::ApiError::Invalid(v)) => {
            assert!(v.to_string().contains("body.reason"), "{v}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert_eq!(
        *ledger.voided.lock().unwrap(),
        ["e-1:", "e-2:duplicate"],
        "e-3 must never reach the server"
    );
}
