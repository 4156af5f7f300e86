//! The macro front end: `cargo run -p example-client-macro`.
//!
//! `server!` generates the payments API's `Api` trait and `router`,
//! `client!` its client; both audit the spec at compile time, and an audit
//! error is a compile error at the spec's `file:line:column`. This program
//! serves a one-method implementation on loopback and calls it.

mod client {
    idem_macros::client!("../../fixtures/payments.yaml");
}

mod server {
    idem_macros::server!("../../fixtures/payments.yaml");
}

use idem_runtime::server::support::Context;
use idem_runtime::server::{Fault, HeaderScope, IdemTx, Idempotency, StepError, Store};
use idem_runtime::sqlx::Sqlite;

/// Answers `GET /v1/charges/{id}`; the other operations refuse.
struct Demo;

fn unavailable() -> server::Problem {
    server::Problem {
        code: "not_implemented".into(),
        message: "this example implements GET /v1/charges/{charge_id} only".into(),
        field: None,
        retryable: Some(false),
    }
}

impl server::Api<Sqlite> for Demo {
    async fn get_charge(
        &self,
        _cx: Context,
        input: server::GetChargeInput,
    ) -> Result<server::GetChargeReply, Fault> {
        Ok(server::GetChargeReply::Ok(server::Charge {
            id: input.charge_id,
            order_id: "order-739".into(),
            amount: 1999,
            currency: server::ChargeCurrency::Eur,
            status: server::ChargeStatus::Succeeded,
            description: None,
        }))
    }

    async fn list_charges(
        &self,
        _cx: Context,
        _input: server::ListChargesInput,
    ) -> Result<server::ListChargesReply, Fault> {
        Ok(server::ListChargesReply::BadRequest(unavailable()))
    }

    async fn create_charge(
        &self,
        _cx: Context,
        _tx: IdemTx<Sqlite>,
        _input: server::CreateChargeInput,
    ) -> Result<server::CreateChargeReply, Fault> {
        // Refused before any write: nothing is recorded under the key.
        Ok(server::CreateChargeReply::BadRequest(unavailable()).unrecorded())
    }

    async fn create_legacy_charge(
        &self,
        _cx: Context,
        _input: server::CreateLegacyChargeInput,
    ) -> Result<server::CreateLegacyChargeReply, Fault> {
        Ok(server::CreateLegacyChargeReply::BadRequest(unavailable()))
    }

    async fn create_payout<'a>(
        &'a self,
        steps: server::CreatePayoutSteps<'a, Sqlite>,
        _input: server::CreatePayoutInput,
    ) -> Result<server::CreatePayoutDone, StepError> {
        Ok(steps.stop(server::CreatePayoutReply::PaymentRequired(unavailable())))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Store::open_sqlite("sqlite::memory:").await?;
    store.migrate().await?;
    let idem = Idempotency::builder(store)
        .scope(HeaderScope::new("x-account-id"))
        .build()?;
    let app = server::router(Demo, &idem)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { idem_runtime::axum::serve(listener, app).await });

    let api = client::Client::new(&base)?;
    let params = client::GetChargeParams {
        x_account_id: "acct-1".into(),
    };
    let charge = api.charges().get(42, &params).send().await?;
    println!(
        "charge {} for {}: {} {:?}",
        charge.id, charge.order_id, charge.amount, charge.currency
    );
    Ok(())
}
