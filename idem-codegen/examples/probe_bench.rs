//! What a probe run costs: wall time and requests, over repeated runs.
//!
//! ```text
//! cargo run --release -p idem-codegen --example probe_bench -- [--runs N] [SPEC URL [HEADER]]
//! ```
//!
//! With no SPEC and URL it starts the tests' orders server
//! (`tests/probe_support/orders_server.py`, needs python3) twice, answering
//! at once and after 50 ms per request, and probes `fixtures/probe.yaml` on
//! each; with them, it probes URL against SPEC (HEADER, `NAME: VALUE`, is sent
//! as the caller's identity, and the same name with `-2` appended to the
//! value as the second caller's).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut runs = 5;
    if let Some(i) = args.iter().position(|a| a == "--runs") {
        runs = args.get(i + 1).and_then(|n| n.parse().ok()).unwrap_or(5);
        args.drain(i..(i + 2).min(args.len()));
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    println!(
        "{:<36} {:>5} {:>9} {:>11} {:>11} {:>11}",
        "target", "runs", "requests", "min", "median", "max"
    );
    if let [spec, url, rest @ ..] = args.as_slice() {
        let header = rest
            .first()
            .cloned()
            .unwrap_or_else(|| "X-Account-Id: acct-bench".into());
        row(url, spec, url, &header, runs);
        return;
    }
    let spec = format!("{root}/fixtures/probe.yaml");
    for delay in ["0", "50"] {
        let mut child = match Command::new("python3")
            .arg(format!(
                "{root}/idem-codegen/tests/probe_support/orders_server.py"
            ))
            .args(["--delay-ms", delay])
            .stdout(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                eprintln!("skipped: cannot run python3 ({e})");
                return;
            }
        };
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let port = line
            .trim()
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_owned();
        let url = format!("http://127.0.0.1:{port}");
        let label = format!("orders server, +{delay} ms per request");
        row(&label, &spec, &url, "X-Account-Id: acct-bench", runs);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Probe `url` `runs` times and print one row.
fn row(label: &str, spec: &str, url: &str, header: &str, runs: usize) {
    let runs = runs.max(1);
    let second = format!("{header}-2");
    let mut seconds = Vec::new();
    let mut requests = 0;
    for _ in 0..runs {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = idem_codegen::cli::run(
            [
                "idem",
                "probe",
                spec,
                "--base-url",
                url,
                "--allow-writes",
                "--header",
                header,
                "--second-caller",
                &second,
                "--format",
                "json",
            ],
            &mut out,
            &mut err,
        );
        let report: serde_json::Value = serde_json::from_slice(&out).unwrap_or_default();
        if code != 0 {
            eprintln!(
                "{label}: exit {code}: {}",
                String::from_utf8_lossy(&err).trim()
            );
        }
        seconds.push(report["seconds"].as_f64().unwrap_or(f64::NAN));
        requests = report["requests"]["sent"].as_u64().unwrap_or(0);
    }
    seconds.sort_by(f64::total_cmp);
    let ms = |s: f64| format!("{:.0} ms", s * 1000.0);
    println!(
        "{:<36} {:>5} {:>9} {:>11} {:>11} {:>11}",
        label,
        runs,
        requests,
        ms(seconds[0]),
        ms(seconds[seconds.len() / 2]),
        ms(seconds[seconds.len() - 1])
    );
}
