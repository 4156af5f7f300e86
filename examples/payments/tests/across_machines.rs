#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! PostgreSQL across machines, short versions of `payments-demo pgbouncer`
//! and `payments-demo failover`:
//!
//! - three servers through one PgBouncer in transaction pooling mode (a
//!   pool of 4 server connections for 48 clients), every call sent to two
//!   servers at once with one key, PgBouncer killed midway: the command
//!   exits 0 only when idem's way of sending statements answered every
//!   probe query right and no charge was lost, duplicated or stuck;
//! - two servers given a primary and a streaming standby, the primary
//!   killed (the standby synchronous, then asynchronous, each cut off for
//!   half a second first) or fenced read-only, the standby promoted: the
//!   command exits 0 only when the synchronous standby lost nothing and
//!   nothing was done twice, no caller got a final answer, and both
//!   servers warned of the asynchronous standby and only of it.
//!
//! Each skips, saying so, without PostgreSQL's server binaries or
//! PgBouncer. The full-length runs are the same commands without the
//! shortening flags.

use std::process::{Command, Output};

fn run(args: &[&str]) -> (Output, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_payments-demo"))
        .args(args)
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    (out, stdout)
}

/// The cells of the table row that starts with `| {first}`.
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("| {first}")))
        .unwrap_or_else(|| panic!("no row for {first}:\n{table}"));
    line.trim_matches('|').split('|').map(str::trim).collect()
}

#[test]
fn three_servers_through_one_pgbouncer_charge_each_order_once() {
    let Some(pg_bin) = payments_demo::faults::find_pg_bin() else {
        eprintln!("skipped: no PostgreSQL server binaries (initdb, pg_ctl) on this machine");
        return;
    };
    let Some(pgbouncer) = payments_demo::pgbouncer::find_pgbouncer() else {
        eprintln!("skipped: no pgbouncer on this machine (Debian: apt-get install pgbouncer)");
        return;
    };
    let (out, stdout) = run(&[
        "pgbouncer",
        "--seconds",
        "3",
        "--workers",
        "8",
        "--pg-bin",
        &pg_bin.display().to_string(),
        "--pgbouncer",
        &pgbouncer.display().to_string(),
    ]);
    assert!(
        out.status.success(),
        "through PgBouncer, a charge was lost, duplicated or stuck, or idem's statements \
         were answered wrong (exit {:?}):\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let idem = row(&stdout, "unnamed, inside a transaction");
    assert_eq!((idem[2], idem[3]), ("0", "0"), "errors, wrong results");
    let killed = row(
        &stdout,
        "PgBouncer, 3 × 16 clients on 4 server connections, PgBouncer killed",
    );
    assert!(
        killed[1].parse::<usize>().unwrap() > 0,
        "no calls through PgBouncer"
    );
}

#[test]
fn a_synchronous_standby_takes_over_with_nothing_lost_or_done_twice() {
    let Some(pg_bin) = payments_demo::faults::find_pg_bin() else {
        eprintln!("skipped: no PostgreSQL server binaries (initdb, pg_ctl) on this machine");
        return;
    };
    let (out, stdout) = run(&[
        "failover",
        "--settle-secs",
        "2",
        "--workers",
        "6",
        "--payout-workers",
        "2",
        "--standby-lag-ms",
        "500",
        "--pg-bin",
        &pg_bin.display().to_string(),
    ]);
    assert!(
        out.status.success(),
        "a failover lost or repeated something it must not have (exit {:?}):\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let sync = row(&stdout, "sync standby, primary killed");
    assert_eq!((sync[2], sync[3]), ("0", "0"), "charges lost, duplicated");
    // The asynchronous standby, cut off for half a second, lacks charges
    // the primary acknowledged: the scenario sees loss where there is some.
    let lost: usize = row(&stdout, "async standby, primary killed")[2]
        .parse()
        .unwrap();
    assert!(
        lost > 0,
        "no acknowledged charge lost to the asynchronous standby:\n{stdout}"
    );
    row(&stdout, "sync standby, primary fenced");
}
