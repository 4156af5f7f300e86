//! The payments demo: idem's whole chain from one OpenAPI document.
//!
//! `fixtures/payments.yaml` is audited and turned, at build time, into the
//! server this crate runs ([`server`]), the client it charges through, and
//! the integrator docs page it writes out. `cargo run -p payments-demo`
//! charges 2,000 orders through a network that loses 15% of the replies,
//! SIGKILLs the server once mid-run, and prints what reached the database
//! ([`demo`]). `payments-demo outage` holds payouts while the bank is down
//! and shows the server's own retries keeping to their schedule
//! ([`outage`]). `payments-demo faults` restarts, crashes, stops, hangs and
//! terminates the PostgreSQL under keyed load and counts what callers saw
//! ([`faults`]).

pub mod bank;
mod cluster;
pub mod demo;
pub mod failover;
pub mod faults;
pub mod galera;
mod load;
pub mod outage;
pub mod patroni;
pub mod pgbouncer;
pub mod server;

/// The server, client and types generated from `fixtures/payments.yaml`.
pub mod api {
    idem_runtime::include_api!("payments");
}
