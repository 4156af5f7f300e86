#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Client and server generated from one spec agree on where each operation
//! lives (`fixtures/staybright.yaml`): the server's first URL has the base
//! path `/v2`, which `router` serves under and the client calls, and
//! `DELETE /holds/{id}` declares no `id`, which the client sends and the
//! server's handler receives.

use std::sync::{Arc, Mutex};

use idem_e2e::staybright;
use idem_runtime::server::support::Context;
use idem_runtime::server::{Fault, IdemTx, Idempotency, Store};
use idem_runtime::sqlx::Sqlite;

#[derive(Default)]
struct Desk {
    released: Mutex<Vec<String>>,
    booked: Mutex<usize>,
}

struct Hotel(Arc<Desk>);

fn reservation(body: staybright::NewReservation) -> staybright::Reservation {
    staybright::Reservation {
        guest_email: body.guest_email,
        room: body.room,
        check_in: body.check_in,
        check_out: body.check_out,
        id: "r-1".into(),
        created_at: "2027-01-01T00:00:00Z".parse().unwrap(),
    }
}

impl staybright::Api<Sqlite> for Hotel {
    async fn release_hold(
        &self,
        _cx: Context,
        input: staybright::ReleaseHoldInput,
    ) -> Result<staybright::ReleaseHoldReply, Fault> {
        self.0.released.lock().unwrap().push(input.id);
        Ok(staybright::ReleaseHoldReply::NoContent)
    }

    async fn list_reservations(
        &self,
        _cx: Context,
    ) -> Result<staybright::ListReservationsReply, Fault> {
        Ok(staybright::ListReservationsReply::Ok(Vec::new()))
    }

    async fn create_reservation(
        &self,
        _cx: Context,
        _tx: IdemTx<Sqlite>,
        input: staybright::CreateReservationInput,
    ) -> Result<staybright::CreateReservationReply, Fault> {
        *self.0.booked.lock().unwrap() += 1;
        Ok(staybright::CreateReservationReply::Created(reservation(
            input.body,
        )))
    }

    async fn get_reservation(
        &self,
        _cx: Context,
        input: staybright::GetReservationInput,
    ) -> Result<staybright::GetReservationReply, Fault> {
        Ok(staybright::GetReservationReply::NotFound(
            staybright::ErrorBody {
                code: "not_found".into(),
                message: format!("no reservation {}", input.reservation_id),
            },
        ))
    }

    async fn update_reservation(
        &self,
        _cx: Context,
        input: staybright::UpdateReservationInput,
    ) -> Result<staybright::UpdateReservationReply, Fault> {
        Ok(staybright::UpdateReservationReply::Ok(reservation(
            input.body,
        )))
    }

    async fn add_loyalty_points(
        &self,
        _cx: Context,
        _tx: IdemTx<Sqlite>,
        input: staybright::AddLoyaltyPointsInput,
    ) -> Result<staybright::AddLoyaltyPointsReply, Fault> {
        Ok(staybright::AddLoyaltyPointsReply::Ok(staybright::Balance {
            points: input.body.points,
        }))
    }

    async fn list_rooms(
        &self,
        _cx: Context,
        _input: staybright::ListRoomsInput,
    ) -> Result<staybright::ListRoomsReply, Fault> {
        Ok(staybright::ListRoomsReply::Ok(Vec::new()))
    }
}

async fn idempotency() -> Idempotency<Sqlite> {
    let store = Store::open_sqlite("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    Idempotency::builder(store)
        .global_scope_shared_by_all_callers()
        .build()
        .unwrap()
}

async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test]
async fn client_and_server_agree_on_the_base_path_and_an_undeclared_segment() {
    assert_eq!(staybright::BASE_PATH, "/v2");
    assert!(staybright::DEFAULT_BASE_URL.ends_with(staybright::BASE_PATH));
    let desk = Arc::new(Desk::default());
    let idem = idempotency().await;
    let origin = serve(staybright::router(Hotel(Arc::clone(&desk)), &idem).unwrap()).await;
    let client = staybright::Client::new(&format!("{origin}{}", staybright::BASE_PATH)).unwrap();

    // The undeclared `{id}`: sent by the client, received by the handler.
    client.holds().release("hold 7/a").send().await.unwrap();
    assert_eq!(*desk.released.lock().unwrap(), ["hold 7/a"]);

    // A keyed call through the base path.
    let stay = staybright::NewReservation {
        guest_email: "ana@example.com".into(),
        room: "204".into(),
        check_in: "2027-03-01".parse().unwrap(),
        check_out: "2027-03-04".parse().unwrap(),
    };
    let booked = client.reservations().create(&stay).send().await.unwrap();
    assert_eq!(booked.room, "204");
    assert_eq!(*desk.booked.lock().unwrap(), 1);

    // Outside the base path there is nothing.
    let http = idem_runtime::reqwest::Client::new();
    let outside = http
        .delete(format!("{origin}/holds/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(outside.status(), 404);
    assert_eq!(
        outside.json::<serde_json::Value>().await.unwrap()["code"],
        "not_found"
    );
    // Another method on a served path is a JSON 405 under the base path too.
    let wrong = http
        .patch(format!("{origin}/v2/holds/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 405);
}

#[tokio::test]
async fn router_at_serves_where_it_is_told() {
    let desk = Arc::new(Desk::default());
    let idem = idempotency().await;
    // Behind a proxy that strips `/v2` before it forwards.
    let origin = serve(staybright::router_at("", Hotel(Arc::clone(&desk)), &idem).unwrap()).await;
    let client = staybright::Client::new(&origin).unwrap();
    client.holds().release("h-1").send().await.unwrap();
    assert_eq!(*desk.released.lock().unwrap(), ["h-1"]);
}
