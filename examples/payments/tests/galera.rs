#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! A three-node MariaDB Galera cluster on loopback, a short version of
//! `payments-demo galera`: every charge sent 20 times at once over the
//! three nodes, a node SIGKILLed under load and rejoining, and payouts
//! whose node dies between their phases. The command exits 0 only when no
//! charge was duplicated or lost, no key was left in flight, no payout was
//! transferred twice, no caller got a final answer for a fault, and every
//! call left unknown was settled with its key.
//!
//! Skips, saying so, without `mariadbd` or the Galera provider (Debian:
//! `apt-get install mariadb-server galera-4 rsync`).

use std::process::Command;

#[test]
fn three_galera_nodes_take_concurrent_duplicates_with_one_effect() {
    let (Some(mariadbd), Some(galera)) = (
        payments_demo::galera::find_mariadbd(),
        payments_demo::galera::find_galera(),
    ) else {
        eprintln!("skipped: no mariadbd or Galera provider on this machine");
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_payments-demo"))
        .args(["galera", "--seconds", "3", "--workers", "6", "--mariadbd"])
        .arg(&mariadbd)
        .arg("--galera")
        .arg(&galera)
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "a Galera scenario duplicated, lost or stranded something (exit {:?}):\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let galera_row = stdout
        .lines()
        .find(|l| l.contains("20 copies") && l.contains("Galera, 3 nodes"))
        .expect("a row for the duplicates on Galera");
    let cells: Vec<&str> = galera_row
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .collect();
    assert!(
        cells[2].parse::<usize>().unwrap() > 0,
        "no calls: {galera_row}"
    );
    for scenario in ["node 3 SIGKILLed", "payouts, their node killed"] {
        assert!(
            stdout.contains(scenario),
            "no row for {scenario}:\n{stdout}"
        );
    }
}
