#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! `idem keys` against key stores that real requests wrote, on SQLite and,
//! when `IDEM_TEST_DATABASE_URL` names one, PostgreSQL: a complete record,
//! one in flight, a phased one stopped between steps, an exhausted one
//! resumed and finished by the completer, a credential-scoped one, and the
//! refusals (an unknown scope, a missing database, one without idem's
//! tables, an unknown schema version). The `idem` binary runs as a process.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use idem_runtime::axum::{self, Router, routing::post};
use idem_runtime::http::StatusCode;
use idem_runtime::server::{
    Backend, BoxFuture, Credential, HeaderScope, IdemTx, Idempotency, Operation, Reply,
    Requirement, ResumePolicy, Run, StepError, Store,
};
use idem_runtime::sqlx;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A payout of two foreign steps: `submit` (counted) and `notify`, which
/// fails while `down` is set and waits for `release` while `hold` is set.
#[derive(Clone, Default)]
struct Payout {
    submits: Arc<AtomicUsize>,
    down: Arc<AtomicBool>,
    hold: Arc<AtomicBool>,
    release: Arc<Notify>,
}

impl<DB: Backend> Operation<DB> for Payout {
    fn name(&self) -> &'static str {
        "createPayout"
    }

    fn run<'a>(&'a self, run: &'a mut Run<DB>) -> BoxFuture<'a, Result<Reply, StepError>> {
        Box::pin(async move {
            let submits = Arc::clone(&self.submits);
            let reference: String = run
                .foreign("submit", |_call| async move {
                    submits.fetch_add(1, Ordering::SeqCst);
                    Ok("ref-1".to_owned())
                })
                .await?;
            let this = self.clone();
            run.foreign("notify", |_call| async move {
                if this.hold.load(Ordering::SeqCst) {
                    this.release.notified().await;
                }
                if this.down.load(Ordering::SeqCst) {
                    return Err(StepError::Transient("the vendor is down".to_owned()));
                }
                Ok(true)
            })
            .await?;
            Ok(Reply::json(
                StatusCode::CREATED,
                &json!({"reference": reference, "notified": true}),
            ))
        })
    }
}

async fn charge<DB: Backend>(_tx: IdemTx<DB>, body: String) -> (StatusCode, String) {
    (StatusCode::CREATED, format!("{{\"charged\":{body}}}"))
}

const BEARER: &[Requirement] = &[&[("bearerAuth", Credential::Bearer)]];
const DIGEST_KEY: &str = "an operator's digest key of 32 bytes or more";

struct Deployment<DB: Backend> {
    idem: Idempotency<DB>,
    base: String,
    payout: Payout,
    http: reqwest::Client,
}

async fn deploy<DB: Backend>(store: Store<DB>) -> Deployment<DB> {
    store.migrate().await.unwrap();
    let idem = Idempotency::builder(store)
        .scope(HeaderScope::new("x-account-id"))
        .credential_digest_key(DIGEST_KEY)
        .resume_override(ResumePolicy {
            max_attempts: 2,
            base: Duration::from_millis(10),
            cap: Duration::from_millis(20),
            ..ResumePolicy::default()
        })
        .build()
        .unwrap();
    let payout = Payout::default();
    let by_credential = idem.scoped_by_credential(BEARER).unwrap();
    let app = Router::new()
        .route("/charges", post(charge::<DB>))
        .route_layer(idem.layer().operation("createCharge"))
        .merge(
            Router::new()
                .route("/tokens", post(charge::<DB>))
                .route_layer(by_credential.layer()),
        )
        .route("/payouts", post(idem.phased(payout.clone())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Deployment {
        idem,
        base: format!("http://{addr}"),
        payout,
        http: reqwest::Client::new(),
    }
}

impl<DB: Backend> Deployment<DB> {
    async fn post(&self, path: &str, key: &str, auth: (&str, &str)) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.base))
            .header(auth.0, auth.1)
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body("{\"amount\":5}")
            .send()
            .await
            .unwrap()
    }
}

/// `idem keys ARGS` on `url`: exit code, stdout, stderr.
fn keys(url: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .arg("keys")
        .args(args)
        .args(["--database-url", url])
        .env_remove("DATABASE_URL")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn show_json(url: &str, key: &str, scope: &str) -> Value {
    let (code, out, err) = keys(
        url,
        &["show", key, "--scope", scope, "--format", "json"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

async fn exercise<DB: Backend>(store: Store<DB>, url: &str) {
    let d = deploy(store).await;
    let acct = ("x-account-id", "acct_1");

    // A complete single-phase record: its stored response, as JSON.
    assert_eq!(d.post("/charges", "order-739", acct).await.status(), 201);
    let (code, out, err) = keys(url, &["show", "order-739", "--scope", "acct_1"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("state          complete"), "{out}");
    assert!(out.contains("operation      createCharge\n"), "{out}");
    assert!(out.contains("response       201 Created"), "{out}");
    assert!(out.contains("\"charged\""), "{out}");
    let shown = show_json(url, "order-739", "acct_1");
    assert_eq!(shown["response"]["body"]["value"]["charged"]["amount"], 5);
    assert_eq!(shown["lock_generation"], 1);
    assert_eq!(shown["operation"], "createCharge", "{shown}");
    // Without a scope: the one scope holding the key is shown.
    let (code, out, _) = keys(url, &["show", "order-739"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("acct_1"), "{out}");
    // The body is cut at --body-limit.
    let (_, out, _) = keys(
        url,
        &[
            "show",
            "order-739",
            "--scope",
            "acct_1",
            "--body-limit",
            "8",
        ],
        &[],
    );
    assert!(out.contains("more bytes; --body-limit"), "{out}");

    // In flight: a payout held inside its second step.
    d.payout.hold.store(true, Ordering::SeqCst);
    let held = {
        let d_http = d.http.clone();
        let base = d.base.clone();
        tokio::spawn(async move {
            d_http
                .post(format!("{base}/payouts"))
                .header("x-account-id", "acct_1")
                .header("idempotency-key", "payout-held")
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    let mut shown = Value::Null;
    for _ in 0..100 {
        let (code, out, _) = keys(
            url,
            &[
                "show",
                "payout-held",
                "--scope",
                "acct_1",
                "--format",
                "json",
            ],
            &[],
        );
        if code == 0 {
            shown = serde_json::from_str(&out).unwrap();
            if shown["steps"].as_array().is_some_and(|s| s.len() == 2) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(shown["state"], "in-flight", "{shown}");
    assert_eq!(shown["recovery_point"], "notify:intent", "{shown}");
    let step = |name: &str| {
        shown["steps"]
            .as_array()
            .and_then(|steps| steps.iter().find(|s| s["step"] == name))
            .map(|s| s["status"].clone())
    };
    assert_eq!(step("submit"), Some(json!("done")), "{shown}");
    assert_eq!(step("notify"), Some(json!("intent")), "{shown}");
    assert!(shown["locked"]["ms"].is_i64(), "{shown}");
    let (code, out, _) = keys(url, &["list", "--state", "in-flight"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("payout-held"), "{out}");
    let (_, out, _) = keys(url, &["stats"], &[]);
    assert!(out.contains("oldest in flight: payout-held"), "{out}");
    d.payout.hold.store(false, Ordering::SeqCst);
    d.payout.release.notify_waiters();
    assert_eq!(held.await.unwrap(), 201);

    // Stopped between steps: `notify` fails, the run is rescheduled.
    d.payout.down.store(true, Ordering::SeqCst);
    let r = d
        .http
        .post(format!("{}/payouts", d.base))
        .header("x-account-id", "acct_1")
        .header("idempotency-key", "payout-down")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let (code, out, err) = keys(url, &["show", "payout-down", "--scope", "acct_1"], &[]);
    assert_eq!(code, 0, "{err}");
    eprintln!("idem keys show payout-down --scope acct_1\n{out}");
    assert!(out.contains("state          in-flight"), "{out}");
    assert!(out.contains("recovery point notify:intent"), "{out}");
    assert!(
        out.contains("intent (called out; no result recorded)"),
        "{out}"
    );
    assert!(out.contains("completer      "), "{out}");

    // The completer's second run fails too: exhausted (2 runs).
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(30)).await;
        d.idem.complete_abandoned(10).await.unwrap();
        if show_json(url, "payout-down", "acct_1")["state"] == "exhausted" {
            break;
        }
    }
    let shown = show_json(url, "payout-down", "acct_1");
    assert_eq!(shown["state"], "exhausted", "{shown}");
    assert_eq!(shown["completer"]["terminal"], "exhausted");
    let (_, out, _) = keys(
        url,
        &[
            "list",
            "--state",
            "exhausted",
            "--operation",
            "createPayout",
        ],
        &[],
    );
    assert!(out.contains("payout-down"), "{out}");
    let (_, out, _) = keys(
        url,
        &["list", "--state", "exhausted", "--operation", "other"],
        &[],
    );
    assert!(out.contains("no records match"), "{out}");

    // Resume it; the completer finishes it without submitting again.
    let submits = d.payout.submits.load(Ordering::SeqCst);
    let (code, out, err) = keys(url, &["resume", "payout-down", "--scope", "acct_1"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("exhausted -> in-flight"), "{out}");
    assert!(out.contains("steps kept done  submit"), "{out}");
    d.payout.down.store(false, Ordering::SeqCst);
    for _ in 0..200 {
        d.idem.complete_abandoned(10).await.unwrap();
        if show_json(url, "payout-down", "acct_1")["state"] == "complete" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let shown = show_json(url, "payout-down", "acct_1");
    assert_eq!(shown["state"], "complete", "{shown}");
    assert_eq!(shown["response"]["status"], 201);
    assert!(shown["resumed"]["ms"].is_i64(), "{shown}");
    assert_eq!(
        d.payout.submits.load(Ordering::SeqCst),
        submits,
        "a finished step ran again"
    );
    // A second resume is refused: the record is complete now.
    let (code, _, err) = keys(url, &["resume", "payout-down", "--scope", "acct_1"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("is complete: only an exhausted phased record"),
        "{err}"
    );

    // Credential-scoped: found from the environment, never an argument.
    let bearer = ("authorization", "Bearer sk_test_42");
    assert_eq!(d.post("/tokens", "tok-1", bearer).await.status(), 201);
    let env = [
        ("IDEM_CREDENTIAL", "sk_test_42"),
        ("IDEM_CREDENTIAL_DIGEST_KEY", DIGEST_KEY),
    ];
    let (code, out, err) = keys(
        url,
        &["show", "tok-1", "--credential-from-env", "bearerAuth"],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("scope          cred:"), "{out}");
    // A layer without an operation name: the route it counts requests under.
    assert!(out.contains("operation      POST /tokens\n"), "{out}");
    assert!(
        !out.contains("sk_test_42"),
        "the credential is never printed: {out}"
    );
    let (code, _, err) = keys(
        url,
        &["show", "tok-1", "--credential-from-env", "bearerAuth"],
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains("IDEM_CREDENTIAL"), "{err}");
    let (code, out, _) = keys(url, &["show", "tok-1"], &[]);
    assert_eq!(code, 0, "the only scope holding it");
    assert!(out.contains("cred:"), "{out}");

    // Refusals.
    let (code, out, _) = keys(url, &["show", "order-739", "--scope", "acct_unknown"], &[]);
    assert_eq!(code, 1);
    assert!(
        out.contains("no record of order-739 under acct_unknown"),
        "{out}"
    );
    let (code, _, err) = keys(url, &["list", "--older-than", "ten minutes"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("not a duration"), "{err}");
    let (code, _, err) = keys(url, &["stats", "--format", "json"], &[]);
    assert_eq!(code, 0, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_keys_reads_what_requests_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.db");
    let store = Store::open_sqlite(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap();
    let url = format!("sqlite://{}", path.display());
    exercise(store.clone(), &url).await;

    // A schema newer than this idem: named, refused.
    sqlx::query("INSERT INTO idem_schema_migrations (version, description, applied_at) VALUES (99, 'future', 0)")
        .execute(store.pool())
        .await
        .unwrap();
    let (code, _, err) = keys(&url, &["stats"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("schema version 99, newer than this idem knows"),
        "{err}"
    );

    // A missing database is not created.
    let missing = format!("sqlite://{}", dir.path().join("missing.db").display());
    let (code, _, err) = keys(&missing, &["stats"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot open"), "{err}");
    assert!(!dir.path().join("missing.db").exists());
    // A database without idem's tables.
    let other = dir.path().join("other.db");
    let plain = Store::open_sqlite(&format!("sqlite://{}?mode=rwc", other.display()))
        .await
        .unwrap();
    sqlx::query("CREATE TABLE orders (id INTEGER)")
        .execute(plain.pool())
        .await
        .unwrap();
    let (code, _, err) = keys(&format!("sqlite://{}", other.display()), &["list"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("holds no idem key tables"), "{err}");
    let (code, _, err) = keys("redis://localhost/x", &["list"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("not a key store URL"), "{err}");

    // The same on MariaDB, in a fresh database.
    if let Some(server) = std::env::var("IDEM_TEST_MYSQL_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        let name = format!("keys_{:016x}", rand_u64());
        let admin = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(1)
            .connect(&server)
            .await
            .unwrap();
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        let url = match server.rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("IDEM_TEST_MYSQL_URL has no database name: {server}"),
        };
        let store = Store::connect_mysql(&url, 8).await.unwrap();
        exercise(store, &url).await;
    } else {
        eprintln!("skipped on MariaDB: IDEM_TEST_MYSQL_URL is not set");
    }

    let Some(admin) = std::env::var("IDEM_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("skipped on PostgreSQL: IDEM_TEST_DATABASE_URL is not set");
        return;
    };
    let name = format!("keys_{:016x}", rand_u64());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&admin)
        .await
        .unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&pool)
        .await
        .unwrap();
    let url = match admin.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{name}"),
        None => panic!("IDEM_TEST_DATABASE_URL has no database name: {admin}"),
    };
    let store = Store::connect_postgres(&url, 8).await.unwrap();
    exercise(store, &url).await;
    // PostgreSQL says how it replicates: here, to no standby.
    let (code, out, err) = keys(&url, &["stats"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("replication: not synchronous") && out.contains("standbys: none"),
        "{out}"
    );
    assert!(out.contains("server: 127.0.0.1:"), "{out}");
    assert!(out.contains("(timeline 1)"), "{out}");
    assert!(!out.contains("warning:"), "{out}");
    let (_, out, _) = keys(&url, &["stats", "--format", "json"], &[]);
    let stats: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        stats["replication"]["standbys"],
        serde_json::json!([]),
        "{out}"
    );
    assert_eq!(stats["replication"]["warning"], Value::Null, "{out}");
    assert_eq!(
        stats["replication"]["synchronous"],
        Value::Bool(false),
        "{out}"
    );
    assert_eq!(stats["server"]["timeline"], serde_json::json!(1), "{out}");
    assert_eq!(
        stats["server"]["managed_by_patroni"],
        Value::Bool(false),
        "{out}"
    );
    // A Patroni REST API that is not there is said so, and the rest
    // still prints.
    let (code, out, _) = keys(&url, &["stats", "--patroni", "http://127.0.0.1:1"], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("could not ask Patroni at http://127.0.0.1:1"),
        "{out}"
    );
    // A host list, its first host down, reaches the second.
    let listed = url.replacen("@", "@127.0.0.1:1,", 1);
    let (code, out, err) = keys(&listed, &["stats"], &[]);
    assert_eq!(code, 0, "{listed}: {err}");
    assert!(out.contains("replication:"), "{out}");
    let (code, _, err) = keys("postgres://postgres@127.0.0.1:1/none", &["list"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot reach"), "{err}");
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    hasher.finish()
}
