#![cfg(feature = "server")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Store conformance: every backend answers each protocol statement the same way.

mod support_server;

use std::time::Duration;

use idem_runtime::server::{
    Backend, KeyState, NewClaim, StepRecord, StepStatus, Store, StoreError, StoredRequest,
    StoredResponse,
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

async fn claim_has_exactly_one_winner<DB: Backend>(store: Store<DB>) {
    // Migrating again is a no-op.
    store.migrate().await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = store.pool().begin().await.unwrap();
            let won = DB::claim(&mut tx, &claim("acct", "k1", "fp", 1_000), WAIT)
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
    assert_eq!(winners, 1);
    // Another scope is another key.
    let mut tx = store.pool().begin().await.unwrap();
    assert_eq!(
        DB::claim(&mut tx, &claim("other", "k1", "fp", 1_000), WAIT)
            .await
            .unwrap(),
        Some(1)
    );
    let record = DB::load(&mut tx, "acct", "k1").await.unwrap().unwrap();
    assert_eq!(record.state, KeyState::InFlight);
    assert_eq!(record.fingerprint, "fp");
    assert_eq!(record.lock_generation, 1);
    assert_eq!(record.locked_at, Some(1_000));
    assert!(record.response.is_none());
    assert!(
        DB::load(&mut tx, "acct", "missing")
            .await
            .unwrap()
            .is_none()
    );
    tx.commit().await.unwrap();
}
on_every_backend!(claim_has_exactly_one_winner);

async fn complete_is_fenced_by_generation<DB: Backend>(store: Store<DB>) {
    let mut tx = store.pool().begin().await.unwrap();
    let generation = DB::claim(&mut tx, &claim("a", "k", "fp", 10), WAIT)
        .await
        .unwrap()
        .unwrap();
    let response = StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body: bytes::Bytes::from_static(b"{\"id\":1}\x00\xff"),
    };
    assert!(
        !DB::complete(&mut tx, "a", "k", generation + 1, &response, 20)
            .await
            .unwrap()
    );
    assert!(
        DB::complete(&mut tx, "a", "k", generation, &response, 20)
            .await
            .unwrap()
    );
    // Complete is terminal.
    assert!(
        !DB::complete(&mut tx, "a", "k", generation, &response, 30)
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
    let mut conn = store.pool().acquire().await.unwrap();
    let record = DB::load(&mut conn, "a", "k").await.unwrap().unwrap();
    assert_eq!(record.state, KeyState::Complete);
    assert_eq!(record.response, Some(response));
}
on_every_backend!(complete_is_fenced_by_generation);

async fn take_over_needs_a_stale_lock<DB: Backend>(store: Store<DB>) {
    let mut tx = store.pool().begin().await.unwrap();
    let generation = DB::claim(&mut tx, &claim("a", "k", "fp", 1_000), WAIT)
        .await
        .unwrap()
        .unwrap();
    // Lock taken at 1000: a cutoff at or before it finds nothing to take.
    assert_eq!(
        DB::take_over(&mut tx, "a", "k", 1_000, 2_000)
            .await
            .unwrap(),
        None
    );
    let taken = DB::take_over(&mut tx, "a", "k", 1_001, 2_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken, generation + 1);
    // The old holder is fenced off; the new one advances and refreshes the lock.
    assert!(
        !DB::advance(&mut tx, "a", "k", generation, "x", 2_100)
            .await
            .unwrap()
    );
    assert!(
        DB::advance(&mut tx, "a", "k", taken, "charged", 2_100)
            .await
            .unwrap()
    );
    let record = DB::load(&mut tx, "a", "k").await.unwrap().unwrap();
    assert_eq!(record.recovery_point, "charged");
    assert_eq!(record.locked_at, Some(2_100));
    // Released: takeable at once.
    assert!(DB::release(&mut tx, "a", "k", taken).await.unwrap());
    assert_eq!(
        DB::take_over(&mut tx, "a", "k", 0, 2_200).await.unwrap(),
        Some(taken + 1)
    );
    tx.commit().await.unwrap();
}
on_every_backend!(take_over_needs_a_stale_lock);

async fn expired_records_are_reclaimed_once<DB: Backend>(store: Store<DB>) {
    let mut tx = store.pool().begin().await.unwrap();
    let g = DB::claim(&mut tx, &claim("a", "k", "old", 1_000), WAIT)
        .await
        .unwrap()
        .unwrap();
    let response = StoredResponse {
        status: 200,
        headers: vec![],
        body: bytes::Bytes::from_static(b"old"),
    };
    assert!(
        DB::complete(&mut tx, "a", "k", g, &response, 1_000)
            .await
            .unwrap()
    );
    let fresh = claim("a", "k", "new", 5_000);
    // Not yet expired (cutoff before creation).
    assert_eq!(
        DB::reclaim_expired(&mut tx, &fresh, 900, 4_000)
            .await
            .unwrap(),
        None
    );
    let g2 = DB::reclaim_expired(&mut tx, &fresh, 2_000, 4_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g2, g + 1);
    let record = DB::load(&mut tx, "a", "k").await.unwrap().unwrap();
    assert_eq!(record.state, KeyState::InFlight);
    assert_eq!(record.fingerprint, "new");
    assert_eq!(record.created_at, 5_000);
    assert!(record.response.is_none());
    // Now fresh: a second reclaim finds nothing.
    assert_eq!(
        DB::reclaim_expired(&mut tx, &fresh, 2_000, 4_000)
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
    let g = DB::claim(&mut tx, &phased, WAIT).await.unwrap().unwrap();
    let intent = StepRecord {
        step: "charge".into(),
        status: StepStatus::Intent,
        derived_key: Some("p:charge".into()),
        output: None,
    };
    DB::record_step(&mut tx, "a", "p", &intent, 1_000)
        .await
        .unwrap();
    let done = StepRecord {
        status: StepStatus::Done,
        output: Some("\"ch_1\"".into()),
        ..intent.clone()
    };
    DB::record_step(&mut tx, "a", "p", &done, 1_100)
        .await
        .unwrap();
    let steps = DB::load_steps(&mut tx, "a", "p").await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].status, StepStatus::Done);
    assert_eq!(steps[0].output.as_deref(), Some("\"ch_1\""));
    let record = DB::load(&mut tx, "a", "p").await.unwrap().unwrap();
    assert_eq!(record.request, Some(request.clone()));
    assert_eq!(record.operation.as_deref(), Some("checkout"));
    // A single-phase claim is never reported as abandoned: nothing could resume it.
    DB::claim(&mut tx, &claim("a", "single", "fp", 1_000), WAIT)
        .await
        .unwrap()
        .unwrap();
    let c = DB::claim(&mut tx, &claim("a", "done", "fp", 1_000), WAIT)
        .await
        .unwrap()
        .unwrap();
    let resp = StoredResponse {
        status: 200,
        headers: vec![],
        body: bytes::Bytes::new(),
    };
    assert!(
        DB::complete(&mut tx, "a", "done", c, &resp, 1_000)
            .await
            .unwrap()
    );
    assert_eq!(
        DB::abandoned(&mut tx, 2_000, 10).await.unwrap(),
        vec![("a".to_owned(), "p".to_owned())]
    );
    assert!(DB::abandoned(&mut tx, 1_000, 10).await.unwrap().is_empty());
    let _ = g;
    // Reap everything claimed before 1500: three records, two never finished.
    let mut reaped = DB::reap(&mut tx, 1_500).await.unwrap();
    reaped.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(reaped.len(), 3);
    assert_eq!(reaped[0].state, KeyState::Complete);
    assert_eq!(reaped[1].state, KeyState::InFlight);
    assert_eq!(reaped[1].operation.as_deref(), Some("checkout"));
    assert_eq!(reaped[1].recovery_point, "started");
    assert!(DB::load_steps(&mut tx, "a", "p").await.unwrap().is_empty());
    assert!(DB::load(&mut tx, "a", "p").await.unwrap().is_none());
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
/// transaction-local `lock_timeout`, and puts the setting back afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_claim_wait_is_bounded_and_scoped_to_the_claim() {
    let Some(store) = support_server::postgres("claim_wait_is_bounded").await else {
        return;
    };
    // The holder: claims and keeps its transaction open.
    let mut holder = store.pool().begin().await.unwrap();
    // A setting of the application's own survives the claim.
    sqlx::query("SET LOCAL lock_timeout = '7s'")
        .execute(&mut *holder)
        .await
        .unwrap();
    let won = sqlx::Postgres::claim(&mut holder, &claim("a", "busy", "fp", 1_000), WAIT)
        .await
        .unwrap();
    assert_eq!(won, Some(1));
    assert_eq!(setting(&mut holder).await, "7s");

    // The duplicate gives up after its bound instead of waiting for the holder.
    let mut duplicate = store.pool().begin().await.unwrap();
    let refused = sqlx::Postgres::claim(
        &mut duplicate,
        &claim("a", "busy", "fp", 1_000),
        Duration::from_millis(200),
    )
    .await;
    assert!(
        matches!(refused, Err(StoreError::LockWaitExpired { waited }) if waited == Duration::from_millis(200)),
        "{refused:?}"
    );
    drop(duplicate);

    // Another key does not wait at all, and its transaction keeps the
    // server default (no lock timeout) for the statements after the claim.
    let mut other = store.pool().begin().await.unwrap();
    let won = sqlx::Postgres::claim(
        &mut other,
        &claim("a", "free", "fp", 1_000),
        Duration::from_millis(200),
    )
    .await
    .unwrap();
    assert_eq!(won, Some(1));
    assert_eq!(setting(&mut other).await, "0");
    other.commit().await.unwrap();

    // Once the holder commits, a bounded claim finds the row and does not win.
    holder.commit().await.unwrap();
    let mut after = store.pool().begin().await.unwrap();
    let lost = sqlx::Postgres::claim(
        &mut after,
        &claim("a", "busy", "fp", 1_000),
        Duration::from_millis(200),
    )
    .await
    .unwrap();
    assert_eq!(lost, None);
    assert_eq!(setting(&mut after).await, "0");
}
