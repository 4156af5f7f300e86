#![allow(
    clippy::expect_used,
    reason = "a benchmark: an unreadable input or a failed run should stop it"
)]
//! Whole-process benchmark of `idem audit` against a parse-only floor.
//!
//! ```text
//! cargo run --release -p idem-codegen --example audit_bench [-- RUNS FILE...]
//! ```
//!
//! For each file, runs RUNS fresh processes of each mode and prints the median
//! wall time and the median peak resident memory (VmHWM):
//! - `floor`: read the file and parse it into `saphyr::Yaml`, the plain value
//!   type of the YAML library idem uses — the least any tool on this parser
//!   can do;
//! - `audit`: `idem audit --format json FILE`, end to end (load, `$ref`s,
//!   model, every rule, JSON rendered and written), through the same
//!   `cli::run` the `idem` binary calls;
//! - `human`: `idem audit --format human --color never FILE`, the report a
//!   person reads, each finding with a snippet of its line: on a minified
//!   document (one line of megabytes) it should cost what JSON costs;
//! - `overlay` (Stripe only): the same with `--overlay
//!   examples/overlays/stripe.yaml`, which keys every POST: what applying
//!   an overlay adds to the audit's time.
//!
//! Defaults: 11 runs over the Stripe and GitHub documents of `../shared/specs`.

mod bench_support;

use bench_support::peak_rss_kib;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The example overlay measured with `file`, if there is one for it.
fn overlay_for(file: &Path) -> Option<PathBuf> {
    (file.file_name()? == "spec3.yaml")
        .then(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/overlays/stripe.yaml"))
}

fn child(mode: &str, file: &Path) -> i32 {
    let code = match mode {
        "floor" => {
            use saphyr::LoadableYamlNode;
            let text = std::fs::read_to_string(file).expect("readable file");
            let docs = saphyr::Yaml::load_from_str(&text).expect("parsable file");
            std::hint::black_box(&docs);
            0
        }
        "audit" | "overlay" | "human" => {
            let mut sink = std::io::sink();
            let format = if mode == "human" { "human" } else { "json" };
            let mut args = vec![
                "idem".to_owned(),
                "audit".to_owned(),
                "--format".to_owned(),
                format.to_owned(),
                "--color".to_owned(),
                "never".to_owned(),
                file.to_str().expect("utf-8 path").to_owned(),
            ];
            if mode == "overlay" {
                let overlay = overlay_for(file).expect("an overlay for this file");
                args.push("--overlay".to_owned());
                args.push(overlay.to_str().expect("utf-8 path").to_owned());
            }
            idem_codegen::cli::run(
                args,
                &mut std::io::BufWriter::new(&mut sink),
                &mut std::io::stderr(),
            )
        }
        other => panic!("unknown mode {other}"),
    };
    println!("{}", peak_rss_kib());
    code
}

fn median<T: Ord + Copy>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

fn measure(exe: &Path, mode: &str, file: &Path, runs: usize) -> (Duration, u64) {
    let mut times = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        let out = Command::new(exe)
            .args(["--child", mode])
            .arg(file)
            .output()
            .expect("spawn benchmark child");
        times.push(start.elapsed());
        let text = String::from_utf8_lossy(&out.stdout);
        rss.push(text.trim().parse::<u64>().unwrap_or(0));
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "{mode} {} failed: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (median(times), median(rss))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        std::process::exit(child(&args[2], Path::new(&args[3])));
    }
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(11);
    let specs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/specs");
    let mut files: Vec<PathBuf> = args.iter().skip(2).map(PathBuf::from).collect();
    if files.is_empty() {
        files = vec![
            specs.join("stripe/spec3.yaml"),
            specs.join("progenitor/api.github.com.json"),
        ];
    }
    let exe = std::env::current_exe().expect("own path");
    println!("{runs} runs per cell; median wall time, median peak RSS\n");
    println!(
        "{:<28} {:>9} {:>11} {:>9} {:>11} {:>7} {:>7} {:>9} {:>8} {:>9} {:>8}",
        "file",
        "floor",
        "floor RSS",
        "audit",
        "audit RSS",
        "time ×",
        "RSS ×",
        "+overlay",
        "overlay ×",
        "human",
        "human ×"
    );
    for file in &files {
        if !file.exists() {
            println!("{:<28} skipped: not found", file.display());
            continue;
        }
        let (ft, fm) = measure(&exe, "floor", file, runs);
        let (at, am) = measure(&exe, "audit", file, runs);
        let (ht, _) = measure(&exe, "human", file, runs);
        let overlaid = overlay_for(file).map(|_| measure(&exe, "overlay", file, runs).0);
        let name = file
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let (with_overlay, ratio) = overlaid.map_or_else(
            || ("-".to_owned(), "-".to_owned()),
            |ot| {
                (
                    format!("{:.0}ms", ot.as_secs_f64() * 1e3),
                    format!("{:.3}", ot.as_secs_f64() / at.as_secs_f64()),
                )
            },
        );
        println!(
            "{:<28} {:>7.0}ms {:>8.1} MB {:>7.0}ms {:>8.1} MB {:>7.2} {:>7.2} {:>9} {:>8} {:>7.0}ms {:>8.2}",
            name,
            ft.as_secs_f64() * 1e3,
            fm as f64 / 1024.0,
            at.as_secs_f64() * 1e3,
            am as f64 / 1024.0,
            at.as_secs_f64() / ft.as_secs_f64(),
            am as f64 / fm.max(1) as f64,
            with_overlay,
            ratio,
            ht.as_secs_f64() * 1e3,
            ht.as_secs_f64() / at.as_secs_f64(),
        );
    }
}
