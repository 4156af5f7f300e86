#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! An API described in prose only (`fixtures/hotel.yaml`): its PUT says
//! "Each call adds `points` to the guest's balance" and its DELETE "refunds
//! the deposit". The client generated from it does not retry either once
//! the request may have arrived, while the PUT that only replaces is
//! retried as before: every handler here answers `503`, and counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_e2e::hotel;
use idem_runtime::server::support::{Context, empty};
use idem_runtime::server::{Fault, IdemTx, Idempotency, Store};
use idem_runtime::sqlx::Sqlite;

#[derive(Default)]
struct Runs {
    update: AtomicUsize,
    cancel: AtomicUsize,
    points: AtomicUsize,
}

struct Hotel(Arc<Runs>);

impl hotel::Api<Sqlite> for Hotel {
    async fn list_reservations(&self, _cx: Context) -> Result<hotel::ListReservationsReply, Fault> {
        Ok(hotel::ListReservationsReply::Ok(Vec::new()))
    }

    async fn create_reservation(
        &self,
        _cx: Context,
        _tx: IdemTx<Sqlite>,
        _input: hotel::CreateReservationInput,
    ) -> Result<hotel::CreateReservationReply, Fault> {
        Ok(hotel::CreateReservationReply::Undocumented(empty(503)))
    }

    async fn search_reservations(
        &self,
        _cx: Context,
        _input: hotel::SearchReservationsInput,
    ) -> Result<hotel::SearchReservationsReply, Fault> {
        Ok(hotel::SearchReservationsReply::Ok(Vec::new()))
    }

    async fn update_reservation(
        &self,
        _cx: Context,
        _input: hotel::UpdateReservationInput,
    ) -> Result<hotel::UpdateReservationReply, Fault> {
        self.0.update.fetch_add(1, Ordering::SeqCst);
        Ok(hotel::UpdateReservationReply::Undocumented(empty(503)))
    }

    async fn cancel_reservation(
        &self,
        _cx: Context,
        _input: hotel::CancelReservationInput,
    ) -> Result<hotel::CancelReservationReply, Fault> {
        self.0.cancel.fetch_add(1, Ordering::SeqCst);
        Ok(hotel::CancelReservationReply::Undocumented(empty(503)))
    }

    async fn add_loyalty_points(
        &self,
        _cx: Context,
        _input: hotel::AddLoyaltyPointsInput,
    ) -> Result<hotel::AddLoyaltyPointsReply, Fault> {
        self.0.points.fetch_add(1, Ordering::SeqCst);
        Ok(hotel::AddLoyaltyPointsReply::Undocumented(empty(503)))
    }
}

#[tokio::test]
async fn what_the_words_say_is_not_retried() {
    let store = Store::open_sqlite("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    let idem = Idempotency::builder(store)
        .global_scope_shared_by_all_callers()
        .build()
        .unwrap();
    let runs = Arc::new(Runs::default());
    let app = hotel::router(Hotel(Arc::clone(&runs)), &idem).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = hotel::Client::new(&format!("http://{addr}/v2")).unwrap();

    let stay = hotel::NewReservation {
        guest_email: "ana@example.com".into(),
        check_in: "2027-03-01".parse().unwrap(),
        check_out: "2027-03-04".parse().unwrap(),
    };
    // A replace is idempotent: retried on 503, three attempts in all.
    assert!(
        client
            .reservations()
            .update("r-1001", &stay)
            .send()
            .await
            .is_err()
    );
    assert_eq!(runs.update.load(Ordering::SeqCst), 3);
    // Its words say it refunds and adds: sent once, never again.
    assert!(client.reservations().cancel("r-1001").send().await.is_err());
    assert_eq!(runs.cancel.load(Ordering::SeqCst), 1);
    let points = hotel::AddLoyaltyPointsRequest { points: 500 };
    assert!(
        client
            .reservations()
            .add_loyalty_points("r-1001", &points)
            .send()
            .await
            .is_err()
    );
    assert_eq!(runs.points.load(Ordering::SeqCst), 1);
}
