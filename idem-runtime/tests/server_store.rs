#![cfg(feature = "server")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Store conformance: every backend answers each protocol statement the same way.

mod support_server;

use std::str::FromStr;
use std::time::Duration;

use sqlx::{MySql, Postgres, Sqlite};

use idem_runtime::server::{
    Backend, BoxFuture, KeyState, NewClaim, Rescheduled, StepRecord, StepStatus, Store, StoreError,
    StoredRequest, StoredResponse,
};

/// Long enough that no claim in these tests gives up waiting.
const WAIT: Duration = Duration::from_secs(30);

fn claim<'a>(scope: &'a str, key: &'a str, fp: &'a str, now: i64) -> NewClaim<'a> {
    NewClaim {
        scope,
        key,
        fingerprint: fp,
        operation: None,
        request: None,
        now,
    }
}

/// A claim of the phased operation `checkout`, which the completer resumes.
fn phased_claim<'a>(scope: &'a str, key: &'a str, now: i64) -> NewClaim<'a> {
    static CHECKOUT: std::sync::LazyLock<StoredRequest> =
        std::sync::LazyLock::new(|| StoredRequest {
            method: "POST".to_owned(),
            path: "/checkout".to_owned(),
            body: b"{}".to_vec(),
        });
    NewClaim {
        operation: Some("checkout"),
        request: Some(&CHECKOUT),
        ..claim(scope, key, "fp", now)
    }
}

/// How many of 20 concurrent claims of `key` win, the `i`th claiming at
/// `at(i)`.
async fn winners<DB: Backend>(store: &Store<DB>, key: &'static str, at: fn(i64) -> i64) -> usize {
    let mut tasks = Vec::new();
    for i in 0..20 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = store.pool().begin().await.unwrap();
            let won = DB::claim(
                &mut tx,
                store.settings(),
                &claim("acct", key, "fp", at(i)),
                WAIT,
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            won
        }));
    }
    let mut winners = 0;
    for t in tasks {
        if t.await.unwrap().is_some() {
            winners += 1;
        }
    }
    winners
}

async fn claim_has_exactly_one_winner<DB: Backend>(store: Store<DB>) {
    // Migrating again is a no-op.
    store.migrate().await.unwrap();
    assert_eq!(winners(&store, "k1", |_| 1_000).await, 1);
    // Claims of one key at different times: still one winner (MariaDB's
    // rows are ordered by claim time, and a unique key keeps them one per
    // key).
    assert_eq!(winners(&store, "k2", |i| 1_000 + i).await, 1);
    // Another scope is another key.
    let mut tx = store.pool().begin().await.unwrap();
    assert_eq!(
        DB::claim(
            &mut tx,
            store.settings(),
            &claim("other", "k1", "fp", 1_000),
            WAIT
        )
        .await
        .unwrap(),
        Some(1)
    );
    let record = DB::load(&mut tx, store.settings(), "acct", "k1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state, KeyState::InFlight);
    assert_eq!(record.fingerprint, "fp");
    assert_eq!(record.lock_generation, 1);
    assert_eq!(record.locked_at, Some(1_000));
    assert!(record.response.is_none());
    assert!(
        DB::load(&mut tx, store.settings(), "acct", "missing")
            .await
            .unwrap()
            .is_none()
    );
    tx.commit().await.unwrap();
}
on_every_backend!(claim_has_exactly_one_winner);

async fn complete_is_fenced_by_generation<DB: Backend>(store: Store<DB>) {
    let mut tx = store.pool().begin().await.unwrap();
    let generation = DB::claim(&mut tx, store.settings(), &claim("a", "k", "fp", 10), WAIT)
        .await
        .unwrap()
        .unwrap();
    let response = StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body: bytes::Bytes::from_static(b"{\"id\":1}\x00\xff"),
    };
    assert!(
        !DB::complete(
            &mut tx,
            store.settings(),
            "a",
            "k",
            generation + 1,
            &response,
            20
        )
        .await
        .unwrap()
    );
    assert!(
        DB::complete(
            &mut tx,
            store.settings(),
            "a",
            "k",
            generation,
            &response,
            20
        )
        .await
        .unwrap()
    );
    // Complete is terminal.
    assert!(
        !DB::complete(
            &mut tx,
            store.settings(),
            "a",
            "k",
            generation,
            &response,
            30
        )
        .await
        .unwrap()
    );
    tx.commit().await.unwrap();
    let mut conn = store.pool().acquire().await.unwrap();
    let record = DB::load(&mut conn, store.settings(), "a", "k")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state, KeyState::Complete);
    assert_eq!(record.response, Some(response));
}
on_every_backend!(complete_is_fenced_by_generation);

async fn take_over_needs_a_stale_lock<DB: Backend>(store: Store<DB>) {
    let mut tx = store.pool().begin().await.unwrap();
    let generation = DB::claim(
        &mut tx,
        store.settings(),
        &claim("a", "k", "fp", 1_000),
        WAIT,
    )
    .await
    .unwrap()
    .unwrap();
    // Lock taken at 1000: a cutoff at or before it finds nothing to take.
    assert_eq!(
        DB::take_over(&mut tx, store.settings(), "a", "k", 1_000, 2_000)
            .await
            .unwrap(),
        None
    );
    let (taken, runs) = DB::take_over(&mut tx, store.settings(), "a", "k", 1_001, 2_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (taken, runs),
        (generation + 1, 2),
        "a takeover counts a run"
    );
    // The old holder is fenced off; the new one advances and refreshes the lock.
    assert!(
        !DB::advance(&mut tx, store.settings(), "a", "k", generation, "x", 2_100)
            .await
            .unwrap()
    );
    assert!(
        DB::advance(&mut tx, store.settings(), "a", "k", taken, "charged", 2_100)
            .await
            .unwrap()
    );
    let record = DB::load(&mut tx, store.settings(), "a", "k")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.recovery_point, "charged");
    assert_eq!(record.locked_at, Some(2_100));
    // Released: takeable at once.
    assert!(
        DB::release(&mut tx, store.settings(), "a", "k", taken)
            .await
            .unwrap()
    );
    assert_eq!(
        DB::take_over(&mut tx, store.settings(), "a", "k", 0, 2_200)
            .await
            .unwrap(),
        Some((taken + 1, 3))
    );
    tx.commit().await.unwrap();
}
on_every_backend!(take_over_needs_a_stale_lock);

async fn every_record_names_its_operation<DB: Backend>(store: Store<DB>) {
    let mut tx = store.pool().begin().await.unwrap();
    let response = StoredResponse {
        status: 201,
        headers: Vec::new(),
        body: bytes::Bytes::from_static(b"{}"),
    };
    // Single-phase, claimed at the start and at commit: named, no request.
    let single = NewClaim {
        operation: Some("createCharge"),
        ..claim("a", "single", "fp", 1_000)
    };
    let g = DB::claim(&mut tx, store.settings(), &single, WAIT)
        .await
        .unwrap()
        .unwrap();
    assert!(
        DB::complete(
            &mut tx,
            store.settings(),
            "a",
            "single",
            g,
            &response,
            1_100
        )
        .await
        .unwrap()
    );
    let at_commit = NewClaim {
        operation: Some("createRefund"),
        ..claim("a", "at-commit", "fp", 1_000)
    };
    DB::claim_complete(&mut tx, store.settings(), &at_commit, &response, WAIT)
        .await
        .unwrap()
        .unwrap();
    for (key, name) in [("single", "createCharge"), ("at-commit", "createRefund")] {
        let record = DB::load(&mut tx, store.settings(), "a", key)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.operation.as_deref(), Some(name));
        assert!(record.request.is_none());
    }
    // Phased: open, it keeps its request and is watched; complete, it lets
    // the request go and is not.
    let g = DB::claim(
        &mut tx,
        store.settings(),
        &phased_claim("a", "p", 1_000),
        WAIT,
    )
    .await
    .unwrap()
    .unwrap();
    let watched = DB::count_watched(&mut tx, store.settings(), 0, 2_000)
        .await
        .unwrap();
    assert_eq!((watched.in_flight, watched.exhausted), (1, 0));
    assert!(
        DB::load(&mut tx, store.settings(), "a", "p")
            .await
            .unwrap()
            .unwrap()
            .request
            .is_some()
    );
    assert!(
        DB::complete(&mut tx, store.settings(), "a", "p", g, &response, 1_200)
            .await
            .unwrap()
    );
    let record = DB::load(&mut tx, store.settings(), "a", "p")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.operation.as_deref(), Some("checkout"));
    assert!(record.request.is_none());
    let watched = DB::count_watched(&mut tx, store.settings(), 0, 2_000)
        .await
        .unwrap();
    assert_eq!(
        (watched.in_flight, watched.exhausted, watched.stale),
        (0, 0, 0)
    );
    tx.commit().await.unwrap();
}
on_every_backend!(every_record_names_its_operation);

async fn a_failed_run_is_due_later_and_the_bound_ends_it<DB: Backend>(store: Store<DB>) {
    let mut tx = store.pool().begin().await.unwrap();
    let g = DB::claim(
        &mut tx,
        store.settings(),
        &phased_claim("a", "p", 1_000),
        WAIT,
    )
    .await
    .unwrap()
    .unwrap();
    // The first run fails: due again at 1500, with 3 runs allowed in all.
    assert_eq!(
        DB::reschedule(&mut tx, store.settings(), "a", "p", g, 1_500, 3, 100_000)
            .await
            .unwrap(),
        Some(Rescheduled::At(1_500))
    );
    let record = DB::load(&mut tx, store.settings(), "a", "p")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((record.attempts, record.next_attempt_at), (1, Some(1_500)));
    assert_eq!(record.locked_at, None);
    // Not due: neither the completer's scan nor a takeover finds it.
    assert!(
        DB::abandoned(&mut tx, store.settings(), 1_400, 1_400, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        DB::take_over(&mut tx, store.settings(), "a", "p", 1_400, 1_400)
            .await
            .unwrap(),
        None
    );
    // Due: one takeover wins, a second one for the same due time does not.
    assert_eq!(
        DB::abandoned(&mut tx, store.settings(), 1_500, 1_500, 10)
            .await
            .unwrap(),
        vec![("a".to_owned(), "p".to_owned())]
    );
    let (g2, runs) = DB::take_over(&mut tx, store.settings(), "a", "p", 1_500, 1_500)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(runs, 2);
    assert_eq!(
        DB::take_over(&mut tx, store.settings(), "a", "p", 1_500, 1_500)
            .await
            .unwrap(),
        None
    );
    // The old holder's reschedule is fenced off.
    assert_eq!(
        DB::reschedule(&mut tx, store.settings(), "a", "p", g, 2_000, 3, 100_000)
            .await
            .unwrap(),
        None
    );
    DB::reschedule(&mut tx, store.settings(), "a", "p", g2, 2_000, 3, 100_000)
        .await
        .unwrap();
    let (g3, runs) = DB::take_over(&mut tx, store.settings(), "a", "p", 2_000, 2_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(runs, 3);
    // The third and last run fails: terminal, whatever the due time says.
    assert_eq!(
        DB::reschedule(&mut tx, store.settings(), "a", "p", g3, 2_500, 3, 100_000)
            .await
            .unwrap(),
        Some(Rescheduled::Exhausted { attempts: 3 })
    );
    let record = DB::load(&mut tx, store.settings(), "a", "p")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state, KeyState::Exhausted);
    assert!(
        DB::abandoned(&mut tx, store.settings(), 9_000, 9_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        DB::take_over(&mut tx, store.settings(), "a", "p", 9_000, 9_000)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        DB::count_exhausted(&mut tx, store.settings())
            .await
            .unwrap(),
        1
    );
    let listed = DB::exhausted(&mut tx, store.settings(), 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].key.as_str(), listed[0].attempts), ("p", 3));

    // The age bound: a next run past `give_up_after` from the claim ends it too.
    let g = DB::claim(
        &mut tx,
        store.settings(),
        &phased_claim("a", "old", 1_000),
        WAIT,
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        DB::reschedule(&mut tx, store.settings(), "a", "old", g, 5_001, 10, 4_000)
            .await
            .unwrap(),
        Some(Rescheduled::Exhausted { attempts: 1 })
    );
    // And a takeover that finds a record past its bound ends it without a run.
    let g = DB::claim(
        &mut tx,
        store.settings(),
        &phased_claim("a", "crashed", 1_000),
        WAIT,
    )
    .await
    .unwrap()
    .unwrap();
    let (g, _) = DB::take_over(&mut tx, store.settings(), "a", "crashed", 1_001, 2_000)
        .await
        .unwrap()
        .unwrap_or((g, 0));
    assert!(
        DB::exhaust(&mut tx, store.settings(), "a", "crashed", g)
            .await
            .unwrap()
    );
    let record = DB::load(&mut tx, store.settings(), "a", "crashed")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((record.state, record.attempts), (KeyState::Exhausted, 1));
    assert_eq!(
        DB::count_exhausted(&mut tx, store.settings())
            .await
            .unwrap(),
        3
    );
    tx.commit().await.unwrap();
}
on_every_backend!(a_failed_run_is_due_later_and_the_bound_ends_it);

async fn expired_records_are_reclaimed_once<DB: Backend>(store: Store<DB>) {
    let mut tx = store.pool().begin().await.unwrap();
    let g = DB::claim(
        &mut tx,
        store.settings(),
        &claim("a", "k", "old", 1_000),
        WAIT,
    )
    .await
    .unwrap()
    .unwrap();
    let response = StoredResponse {
        status: 200,
        headers: vec![],
        body: bytes::Bytes::from_static(b"old"),
    };
    assert!(
        DB::complete(&mut tx, store.settings(), "a", "k", g, &response, 1_000)
            .await
            .unwrap()
    );
    let fresh = claim("a", "k", "new", 5_000);
    // Not yet expired (cutoff before creation).
    assert_eq!(
        DB::reclaim_expired(&mut tx, store.settings(), &fresh, 900, 4_000)
            .await
            .unwrap(),
        None
    );
    let g2 = DB::reclaim_expired(&mut tx, store.settings(), &fresh, 2_000, 4_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g2, g + 1);
    let record = DB::load(&mut tx, store.settings(), "a", "k")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state, KeyState::InFlight);
    assert_eq!(record.fingerprint, "new");
    assert_eq!(record.created_at, 5_000);
    assert!(record.response.is_none());
    // Now fresh: a second reclaim finds nothing.
    assert_eq!(
        DB::reclaim_expired(&mut tx, store.settings(), &fresh, 2_000, 4_000)
            .await
            .unwrap(),
        None
    );
    tx.commit().await.unwrap();
}
on_every_backend!(expired_records_are_reclaimed_once);

async fn steps_requests_abandoned_and_reaping<DB: Backend>(store: Store<DB>) {
    let request = StoredRequest {
        method: "POST".into(),
        path: "/checkout?x=1".into(),
        body: b"{\"amount\":5}".to_vec(),
    };
    let mut tx = store.pool().begin().await.unwrap();
    let phased = NewClaim {
        scope: "a",
        key: "p",
        fingerprint: "fp",
        operation: Some("checkout"),
        request: Some(&request),
        now: 1_000,
    };
    let g = DB::claim(&mut tx, store.settings(), &phased, WAIT)
        .await
        .unwrap()
        .unwrap();
    let intent = StepRecord {
        step: "charge".into(),
        status: StepStatus::Intent,
        derived_key: Some("p:charge".into()),
        output: None,
    };
    DB::record_step(&mut tx, store.settings(), "a", "p", &intent, 1_000)
        .await
        .unwrap();
    let done = StepRecord {
        status: StepStatus::Done,
        output: Some("\"ch_1\"".into()),
        ..intent.clone()
    };
    DB::record_step(&mut tx, store.settings(), "a", "p", &done, 1_100)
        .await
        .unwrap();
    let steps = DB::load_steps(&mut tx, store.settings(), "a", "p")
        .await
        .unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].status, StepStatus::Done);
    assert_eq!(steps[0].output.as_deref(), Some("\"ch_1\""));
    let record = DB::load(&mut tx, store.settings(), "a", "p")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.request, Some(request.clone()));
    assert_eq!(record.operation.as_deref(), Some("checkout"));
    // A single-phase claim is never reported as abandoned: nothing could resume it.
    DB::claim(
        &mut tx,
        store.settings(),
        &claim("a", "single", "fp", 1_000),
        WAIT,
    )
    .await
    .unwrap()
    .unwrap();
    let c = DB::claim(
        &mut tx,
        store.settings(),
        &claim("a", "done", "fp", 1_000),
        WAIT,
    )
    .await
    .unwrap()
    .unwrap();
    let resp = StoredResponse {
        status: 200,
        headers: vec![],
        body: bytes::Bytes::new(),
    };
    assert!(
        DB::complete(&mut tx, store.settings(), "a", "done", c, &resp, 1_000)
            .await
            .unwrap()
    );
    assert_eq!(
        DB::abandoned(&mut tx, store.settings(), 2_000, 2_000, 10)
            .await
            .unwrap(),
        vec![("a".to_owned(), "p".to_owned())]
    );
    assert!(
        DB::abandoned(&mut tx, store.settings(), 1_000, 2_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let _ = g;
    // A younger phased record with a step: neither it nor its step is reaped.
    DB::claim(
        &mut tx,
        store.settings(),
        &phased_claim("a", "young", 2_000),
        WAIT,
    )
    .await
    .unwrap()
    .unwrap();
    DB::record_step(&mut tx, store.settings(), "a", "young", &intent, 2_000)
        .await
        .unwrap();
    // Reap everything claimed before 1500, in batches of two: three
    // records, two never finished.
    // Each batch starts where the last one ended.
    let mut reaped = DB::reap(&mut tx, store.settings(), 0, 1_500, 2)
        .await
        .unwrap();
    assert_eq!(reaped.len(), 2);
    let from = reaped.iter().map(|r| r.created_at).max().unwrap();
    assert_eq!(from, 1_000);
    assert!(
        DB::reap(&mut tx, store.settings(), 1_001, 1_500, 2)
            .await
            .unwrap()
            .is_empty()
    );
    reaped.extend(
        DB::reap(&mut tx, store.settings(), from, 1_500, 2)
            .await
            .unwrap(),
    );
    assert!(
        DB::reap(&mut tx, store.settings(), from, 1_500, 2)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        DB::load_steps(&mut tx, store.settings(), "a", "young")
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        DB::load(&mut tx, store.settings(), "a", "young")
            .await
            .unwrap()
            .is_some()
    );
    reaped.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(reaped.len(), 3);
    assert_eq!(reaped[0].state, KeyState::Complete);
    assert_eq!(reaped[1].state, KeyState::InFlight);
    assert_eq!(reaped[1].operation.as_deref(), Some("checkout"));
    assert_eq!(reaped[1].recovery_point, "started");
    assert!(
        DB::load_steps(&mut tx, store.settings(), "a", "p")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        DB::load(&mut tx, store.settings(), "a", "p")
            .await
            .unwrap()
            .is_none()
    );
    tx.commit().await.unwrap();
}
on_every_backend!(steps_requests_abandoned_and_reaping);

async fn setting(conn: &mut sqlx::PgConnection) -> String {
    sqlx::query_scalar("SELECT current_setting('lock_timeout')")
        .fetch_one(conn)
        .await
        .unwrap()
}

/// PostgreSQL bounds the claim's wait for an uncommitted duplicate with a
/// transaction-local `lock_timeout` set inside the claim, and a won claim
/// puts the transaction's own value back before the handler's statements.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_claim_wait_is_bounded_and_scoped_to_the_claim() {
    let Some((store, schema)) = support_server::postgres_with_schema("claim_wait_is_bounded").await
    else {
        return;
    };
    let bound = Duration::from_millis(200);
    // The application's pool sets its own lock timeout on every connection.
    let url = support_server::postgres_url("claim_wait_is_bounded").unwrap();
    let options = sqlx::postgres::PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", schema.as_str()), ("lock_timeout", "7s")]);
    let app = Store::new(
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .unwrap(),
    );

    // The holder: claims and keeps its transaction open.
    let mut holder = app.pool().begin().await.unwrap();
    let won = sqlx::Postgres::claim(
        &mut holder,
        store.settings(),
        &claim("a", "busy", "fp", 1_000),
        WAIT,
    )
    .await
    .unwrap();
    assert_eq!(won, Some(1));
    assert_eq!(setting(&mut holder).await, "7s");

    // The duplicate gives up after its bound instead of waiting for the holder.
    let mut duplicate = app.pool().begin().await.unwrap();
    let started = std::time::Instant::now();
    let refused = sqlx::Postgres::claim(
        &mut duplicate,
        store.settings(),
        &claim("a", "busy", "fp", 1_000),
        bound,
    )
    .await;
    assert!(
        matches!(refused, Err(StoreError::LockWaitExpired { waited }) if waited == bound),
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(7),
        "{:?}",
        started.elapsed()
    );
    drop(duplicate);

    // A transaction-local setting of the application's own survives too,
    // and a pool with none keeps the server default (no lock timeout).
    let mut local = app.pool().begin().await.unwrap();
    sqlx::query("SET LOCAL lock_timeout = '9s'")
        .execute(&mut *local)
        .await
        .unwrap();
    let won = sqlx::Postgres::claim(
        &mut local,
        store.settings(),
        &claim("a", "local", "fp", 1_000),
        bound,
    )
    .await
    .unwrap();
    assert_eq!(won, Some(1));
    assert_eq!(setting(&mut local).await, "9s");
    local.commit().await.unwrap();
    let mut other = store.pool().begin().await.unwrap();
    let won = sqlx::Postgres::claim(
        &mut other,
        store.settings(),
        &claim("a", "free", "fp", 1_000),
        bound,
    )
    .await
    .unwrap();
    assert_eq!(won, Some(1));
    assert_eq!(setting(&mut other).await, "0");
    other.commit().await.unwrap();

    // Once the holder commits, a bounded claim finds the row and does not
    // win; the bound stays for the statements that examine the record, and
    // lifting it puts the pool's value back.
    holder.commit().await.unwrap();
    let mut after = app.pool().begin().await.unwrap();
    let lost = sqlx::Postgres::claim(
        &mut after,
        store.settings(),
        &claim("a", "busy", "fp", 1_000),
        bound,
    )
    .await
    .unwrap();
    assert_eq!(lost, None);
    assert_eq!(setting(&mut after).await, "200ms");
    sqlx::Postgres::lift_claim_bound(&mut after, store.settings())
        .await
        .unwrap();
    assert_eq!(setting(&mut after).await, "7s");
    drop(after);

    // Lifting where no claim bounded anything changes nothing.
    let mut plain = app.pool().begin().await.unwrap();
    sqlx::Postgres::lift_claim_bound(&mut plain, store.settings())
        .await
        .unwrap();
    assert_eq!(setting(&mut plain).await, "7s");
}

/// The placeholder a bounded claim keeps the transaction's own
/// `lock_timeout` in: `None` where no claim on the connection ever set it.
async fn kept_aside(conn: &mut sqlx::PgConnection) -> Option<String> {
    sqlx::query_scalar("SELECT current_setting('idem.outer_lock_timeout', true)")
        .fetch_one(conn)
        .await
        .unwrap()
}

/// Connections opened with the duplicate wait as their `lock_timeout`
/// claim with the plain insert: the wait is bounded by the connection and
/// nothing is set. A claim with a bound of its own still carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_session_bound_claims_with_the_plain_insert() {
    let bound = Duration::from_millis(300);
    let Some(store) = support_server::postgres_bounded("session_bound_claim", bound).await else {
        return;
    };
    assert_eq!(store.session_lock_wait(), Some(bound));

    let mut holder = store.pool().begin().await.unwrap();
    assert_eq!(setting(&mut holder).await, "300ms");
    let won = sqlx::Postgres::claim(
        &mut holder,
        store.settings(),
        &claim("a", "busy", "fp", 1_000),
        bound,
    )
    .await
    .unwrap();
    assert_eq!(won, Some(1));
    assert_eq!(kept_aside(&mut holder).await, None);
    assert_eq!(setting(&mut holder).await, "300ms");

    // A duplicate whose wait lost a few microseconds to its key's turn is
    // still bounded by the connection: it gives up after 300ms.
    let mut duplicate = store.pool().begin().await.unwrap();
    let started = std::time::Instant::now();
    let refused = sqlx::Postgres::claim(
        &mut duplicate,
        store.settings(),
        &claim("a", "busy", "fp", 1_000),
        bound - Duration::from_micros(40),
    )
    .await;
    assert!(
        matches!(refused, Err(StoreError::LockWaitExpired { .. })),
        "{refused:?}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    drop(duplicate);

    // A claim with a longer bound of its own outwaits the connection's: the
    // holder commits after 800ms and the claim finds its record.
    let committer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        holder.commit().await.unwrap();
    });
    let mut patient = store.pool().begin().await.unwrap();
    let started = std::time::Instant::now();
    let lost = sqlx::Postgres::claim(
        &mut patient,
        store.settings(),
        &claim("a", "busy", "fp", 1_000),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert_eq!(lost, None);
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_eq!(setting(&mut patient).await, "20s");
    sqlx::Postgres::lift_claim_bound(&mut patient, store.settings())
        .await
        .unwrap();
    assert_eq!(setting(&mut patient).await, "300ms");
    committer.await.unwrap();
}

/// Puts a store back at schema version 1, with one phased record in flight,
/// as a deployment of the previous release left it.
trait AtVersion1: Backend {
    fn downgrade(store: &Store<Self>) -> BoxFuture<'_, ()>;
}

const V1_RECORD: &str = "INSERT INTO idem_keys (scope, idem_key, fingerprint, state, operation, \
     request_method, request_path, recovery_point, lock_generation, locked_at, created_at) \
     VALUES ('a', 'old', 'fp', 'in_flight', 'checkout', 'POST', '/checkout', 'charge:intent', 3, \
     NULL, 1000)";

macro_rules! at_version_1 {
    ($db:ty, $schema:literal) => {
        impl AtVersion1 for $db {
            fn downgrade(store: &Store<Self>) -> BoxFuture<'_, ()> {
                Box::pin(async move {
                    let pool = store.pool();
                    for sql in [
                        "DROP TABLE idem_keys",
                        "DROP TABLE idem_steps",
                        "DELETE FROM idem_schema_migrations WHERE version > 1",
                    ] {
                        sqlx::query(sql).execute(pool).await.unwrap();
                    }
                    sqlx::raw_sql(include_str!($schema))
                        .execute(pool)
                        .await
                        .unwrap();
                    sqlx::query(V1_RECORD).execute(pool).await.unwrap();
                })
            }
        }
    };
}

at_version_1!(Sqlite, "../migrations/sqlite/0001_idempotency_keys.sql");
at_version_1!(Postgres, "../migrations/postgres/0001_idempotency_keys.sql");
at_version_1!(MySql, "../migrations/mysql/0001_idempotency_keys.sql");

async fn a_version_1_store_upgrades_in_place<DB: AtVersion1>(store: Store<DB>) {
    DB::downgrade(&store).await;
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let mut tx = store.pool().begin().await.unwrap();
    let record = DB::load(&mut tx, store.settings(), "a", "old")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state, KeyState::InFlight);
    assert_eq!(record.recovery_point, "charge:intent");
    assert_eq!((record.attempts, record.next_attempt_at), (1, None));
    // The upgraded record is due, and its schedule works like a new one's.
    assert_eq!(
        DB::abandoned(&mut tx, store.settings(), 2_000, 2_000, 10)
            .await
            .unwrap(),
        vec![("a".to_owned(), "old".to_owned())]
    );
    let (g, runs) = DB::take_over(&mut tx, store.settings(), "a", "old", 2_000, 2_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((g, runs), (4, 2));
    assert_eq!(
        DB::reschedule(&mut tx, store.settings(), "a", "old", g, 3_000, 2, 100_000)
            .await
            .unwrap(),
        Some(Rescheduled::Exhausted { attempts: 2 })
    );
    tx.commit().await.unwrap();
    // Still one record per key after the upgrade: a later claim of the
    // old key loses.
    let mut tx = store.pool().begin().await.unwrap();
    assert_eq!(
        DB::claim(
            &mut tx,
            store.settings(),
            &claim("a", "old", "fp", 4_000),
            WAIT
        )
        .await
        .unwrap(),
        None
    );
    tx.commit().await.unwrap();
}
on_every_backend!(a_version_1_store_upgrades_in_place);

#[tokio::test]
async fn a_host_list_reaches_the_first_host_that_accepts_writes() {
    let Some(url) = support_server::postgres_url("host_list") else {
        return;
    };
    // `postgres://user@host:port/db`: a host that refuses connections
    // (port 1) listed before the real one.
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, hostpart) = rest.rsplit_once('@').unwrap_or(("", rest));
    let at = if userinfo.is_empty() { "" } else { "@" };
    let listed = format!("{scheme}://{userinfo}{at}127.0.0.1:1,{hostpart}");
    let store = Store::connect_postgres(&listed, 2).await.unwrap();
    let mut tx = store.begin_within(Duration::from_secs(2)).await.unwrap();
    let (read_only,): (String,) = sqlx::query_as("SHOW transaction_read_only")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(read_only, "off");
    tx.rollback().await.unwrap();

    // Every host read-only (as a standby, or a fenced primary, is):
    // connecting fails and says why.
    let separator = if listed.contains('?') { '&' } else { '?' };
    let fenced = format!("{listed}{separator}options=-c%20default_transaction_read_only%3Don");
    let refused = Store::connect_postgres(&fenced, 2).await.unwrap_err();
    assert!(refused.to_string().contains("accepts writes"), "{refused}");
    // A URL asking for a standby is refused: the store writes.
    let standby = format!("{listed}{separator}target_session_attrs=standby");
    let refused = Store::connect_postgres(&standby, 2).await.unwrap_err();
    assert!(
        refused.to_string().contains("needs the primary"),
        "{refused}"
    );
}

/// The statement a claim waiting on another connection sent, as the server
/// lists it.
async fn waiting_claim(store: &Store<MySql>) -> String {
    loop {
        let info: Option<String> = sqlx::query_scalar(
            "SELECT info FROM information_schema.processlist \
             WHERE info LIKE '%INTO idem_keys%' AND id <> CONNECTION_ID()",
        )
        .fetch_optional(store.pool())
        .await
        .unwrap();
        if let Some(info) = info {
            return info;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two stores of the MySQL family in one process, one on a server that
/// takes `SET STATEMENT` (MariaDB) and one told its server does not
/// (MySQL): each claim is written for its own store's server, seen in the
/// server's process list while it waits behind a held claim.
#[tokio::test]
async fn a_mysql_store_and_a_mariadb_store_keep_their_own_claims() {
    let Some((mariadb, url)) = support_server::mysql_with_url("own_claims").await else {
        return;
    };
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(2)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::Executor::execute(conn, "SET SESSION innodb_lock_wait_timeout = 1").await?;
                Ok(())
            })
        })
        .connect(&url)
        .await
        .unwrap();
    let mysql = Store::new(pool).without_set_statement();
    assert!(mariadb.settings().set_statement());
    assert!(!mysql.settings().set_statement());

    let mut holder = mariadb.pool().begin().await.unwrap();
    let won = MySql::claim(
        &mut holder,
        mariadb.settings(),
        &claim("a", "busy", "fp", 1_000),
        WAIT,
    )
    .await
    .unwrap();
    assert_eq!(won, Some(1));
    for (store, sent) in [
        (
            &mariadb,
            "SET STATEMENT innodb_lock_wait_timeout = 1 FOR INSERT",
        ),
        (&mysql, "INSERT INTO idem_keys"),
    ] {
        let mut duplicate = store.pool().begin().await.unwrap();
        let again = claim("a", "busy", "fp", 1_000);
        let (refused, info) = tokio::join!(
            MySql::claim(
                &mut duplicate,
                store.settings(),
                &again,
                Duration::from_secs(1),
            ),
            waiting_claim(&mariadb),
        );
        assert!(
            matches!(refused, Err(StoreError::LockWaitExpired { .. })),
            "{refused:?}"
        );
        assert!(info.starts_with(sent), "{info}");
        duplicate.rollback().await.unwrap();
    }
    holder.rollback().await.unwrap();
}
