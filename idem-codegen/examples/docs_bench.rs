#![allow(
    clippy::expect_used,
    reason = "a benchmark: an unreadable input or a failed run should stop it"
)]
//! How long the docs page takes on a large real API.
//!
//! ```text
//! cargo run --release -p idem-codegen --example docs_bench [-- RUNS FILE...]
//! ```
//!
//! For each file (default: Stripe's `spec3.yaml` from `../shared/specs`),
//! RUNS times (default 11) in one process: load and model the document, run
//! the audit (what `idem docs` prints), and render both pages with
//! `docs::render`. Prints the median of each phase, the page sizes and the
//! process's peak resident memory. A file that is absent is skipped, saying
//! so.

mod bench_support;

use bench_support::peak_rss_kib;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idem_codegen::{audit, docs, load::Document, model};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(11)
        .max(1);
    let mut files: Vec<PathBuf> = args.iter().skip(2).map(PathBuf::from).collect();
    if files.is_empty() {
        files.push(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/specs/stripe/spec3.yaml"),
        );
    }
    println!("{runs} runs per file, in one process; medians\n");
    println!(
        "{:<16} {:>6} {:>11} {:>9} {:>10} {:>9} {:>9} {:>9}",
        "file", "ops", "load+model", "audit", "docs page", "md", "html", "peak RSS"
    );
    for file in &files {
        let name = file
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if !file.exists() {
            println!("{name:<16} skipped: {} not found", file.display());
            continue;
        }
        let (mut load, mut check, mut render) = (Vec::new(), Vec::new(), Vec::new());
        let mut sizes = (0, 0, 0);
        for _ in 0..runs {
            let start = Instant::now();
            let document = Document::load(file).expect("the file loads");
            let model = model::build(document, &audit::rule_names()).expect("the file models");
            load.push(start.elapsed());

            let start = Instant::now();
            let report = audit::audit(&model);
            check.push(start.elapsed());
            std::hint::black_box(&report);

            let start = Instant::now();
            let pages = docs::render(&model).expect("the page renders");
            render.push(start.elapsed());
            sizes = (
                model.operations.len(),
                pages.markdown.len(),
                pages.html.len(),
            );
        }
        println!(
            "{name:<16} {:>6} {:>9.1}ms {:>7.1}ms {:>8.1}ms {:>6.0} KB {:>6.0} KB {:>6.1} MB",
            sizes.0,
            ms(median(load)),
            ms(median(check)),
            ms(median(render)),
            sizes.1 as f64 / 1024.0,
            sizes.2 as f64 / 1024.0,
            peak_rss_kib() as f64 / 1024.0,
        );
    }
}
