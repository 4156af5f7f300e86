//! Database faults under keyed load, on a private PostgreSQL cluster: a fast
//! restart, a crash, an outage, backends terminated, a hang, and phased
//! payouts in flight during a crash. `payments-demo faults` runs them with
//! short outages and exits 0 only when no charge was duplicated or lost, no
//! key was left in flight, no fault reached a caller as a final answer, no
//! answer came after its caller's deadline, every call that ended unknown
//! was settled with its key, and every payout made exactly one transfer.
//! The figures (refusal latency, recovery) are printed, not asserted; the
//! full-length run is `cargo run --release -p payments-demo -- faults`.

use std::process::Command;

#[test]
fn every_fault_keeps_the_protocol_and_reaches_no_caller_as_a_final_answer() {
    let Some(pg_bin) = payments_demo::faults::find_pg_bin() else {
        eprintln!(
            "skipped: no PostgreSQL server binaries (initdb, pg_ctl) on this machine; \
             install PostgreSQL or set IDEM_PG_BIN"
        );
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_payments-demo"))
        .args([
            "faults",
            "--outage-secs",
            "5",
            "--settle-secs",
            "2",
            "--pg-bin",
        ])
        .arg(&pg_bin)
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        stdout.contains("0 successes while every COMMIT returned unreplicated"),
        "{stdout}"
    );
    assert!(
        out.status.success(),
        "a fault broke the protocol (exit {:?}):\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    for fault in [
        "fast restart",
        "crash (SIGKILL)",
        "down, 5 s",
        "backends terminated",
        "hang (SIGSTOP), 5 s",
        "payouts in flight",
        "sync waits cancelled",
    ] {
        assert!(
            stdout.contains(&format!("| {fault}")),
            "no row for {fault}:\n{stdout}"
        );
    }
}
