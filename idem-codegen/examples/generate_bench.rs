//! Generation as whole processes: time and peak memory of `idem generate`
//! for the client and for the server of Stripe, GitHub and progenitor's
//! nexus, each phase timed; then the generated nexus client's `cargo
//! build`, clean with its dependencies and of the crate alone.
//!
//! ```text
//! cargo run --release -p idem-codegen --example generate_bench [-- --no-build]
//! ```
//!
//! Each generation runs in a fresh child process (this binary, re-executed)
//! that goes through the CLI's own code path and reports its own peak RSS
//! (`VmHWM`). Build memory is the largest RSS of any process in cargo's
//! tree, sampled every 20 ms. Specs come from `../shared/specs` (or
//! `IDEM_SPECS_DIR`); missing ones are skipped, saying so.

mod bench_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use idem_codegen::generate::{Options, generate};

const SPECS: &[&str] = &[
    "stripe/spec3.yaml",
    "progenitor/api.github.com.json",
    "progenitor/nexus.json",
];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn specs_dir() -> PathBuf {
    std::env::var_os("IDEM_SPECS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("../shared/specs"))
}

/// The child: one generation, phases timed, then the whole CLI path.
fn child(spec: &Path, what: &str, out: &Path) -> anyhow::Result<()> {
    let t = Instant::now();
    let document =
        idem_codegen::load::Document::load(spec).map_err(|f| anyhow::anyhow!("{}", f.error))?;
    let load = t.elapsed();
    let t = Instant::now();
    let model = idem_codegen::model::build(document, &idem_codegen::audit::rule_names())
        .map_err(|f| anyhow::anyhow!("{}", f.error))?;
    let modelled = t.elapsed();
    let t = Instant::now();
    let report = idem_codegen::audit::audit(&model);
    let audit = t.elapsed();
    let t = Instant::now();
    let options = Options {
        client: what == "client",
        server: what == "server",
        feature_groups: false,
    };
    let generated = generate(&model, &options)?;
    let emit = t.elapsed();
    drop((model, report, generated));
    // The whole command, as a user runs it (load, audit and its report,
    // generation, writing).
    let t = Instant::now();
    let mut sink = Vec::new();
    let code = idem_codegen::cli::run(
        [
            "idem",
            "generate",
            &spec.to_string_lossy(),
            &format!("--{what}"),
            "--out",
            &out.to_string_lossy(),
            "--allow-findings",
            "--runtime-path",
            &workspace().join("idem-runtime").to_string_lossy(),
        ],
        &mut sink,
        &mut Vec::new(),
    );
    let total = t.elapsed();
    let lines = String::from_utf8_lossy(&sink)
        .split(", ")
        .find_map(|p| {
            p.strip_suffix(" lines")
                .and_then(|n| n.parse::<usize>().ok())
        })
        .unwrap_or(0);
    println!(
        "{code} {} {} {} {} {} {lines} {}",
        total.as_millis(),
        load.as_millis(),
        modelled.as_millis(),
        audit.as_millis(),
        emit.as_millis(),
        bench_support::peak_rss_kib()
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let (Some("--one"), Some(spec), Some(what), Some(out)) = (
        args.get(1).map(String::as_str),
        args.get(2),
        args.get(3),
        args.get(4),
    ) {
        return child(Path::new(spec), what, Path::new(out));
    }
    let exe = std::env::current_exe()?;
    let scratch = workspace().join("target/generate-bench");
    println!(
        "{:<32} {:<7} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>9}",
        "spec", "part", "lines", "total ms", "load", "model", "audit", "emit", "peak MB"
    );
    for spec in SPECS {
        let path = specs_dir().join(spec);
        if !path.exists() {
            println!("{spec:<32} skipped: not found at {}", path.display());
            continue;
        }
        for what in ["client", "server"] {
            let out = scratch.join(format!("{}-{what}", spec.replace(['/', '.'], "-")));
            let output = Command::new(&exe)
                .args([
                    "--one",
                    &path.to_string_lossy(),
                    what,
                    &out.to_string_lossy(),
                ])
                .output()?;
            let text = String::from_utf8_lossy(&output.stdout);
            let f: Vec<u64> = text
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            match f.as_slice() {
                [0, total, load, model, audit, emit, lines, rss] => println!(
                    "{spec:<32} {what:<7} {lines:>8} {total:>8} {load:>7} {model:>7} {audit:>7} {emit:>7} {:>9.1}",
                    *rss as f64 / 1024.0
                ),
                _ => println!(
                    "{spec:<32} {what:<7} failed: {}{}",
                    text.trim(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
            }
        }
    }
    if args.iter().any(|a| a == "--no-build") {
        return Ok(());
    }
    // The nexus client, built as a user's crate would be.
    let nexus = scratch.join("progenitor-nexus-json-client");
    if !nexus.join("Cargo.toml").exists() {
        println!("nexus build skipped: its client was not generated");
        return Ok(());
    }
    // A workspace of its own, so it has its own (cold) target dir.
    let manifest = std::fs::read_to_string(nexus.join("Cargo.toml"))?;
    if !manifest.contains("[workspace]") {
        std::fs::write(
            nexus.join("Cargo.toml"),
            format!("{manifest}\n[workspace]\n"),
        )?;
    }
    let target = nexus.join("target");
    let _ = std::fs::remove_dir_all(&target);
    println!("\nbuilding the generated nexus client (cargo build, dev profile)…");
    let build = || {
        let mut c = Command::new(env!("CARGO"));
        c.arg("build")
            .arg("--quiet")
            .current_dir(&nexus)
            .env("CARGO_TARGET_DIR", &target);
        c
    };
    let (clean, clean_peak, ok) = bench_support::measured(&mut build())?;
    println!(
        "nexus clean, with dependencies: {:>6.1} s  peak {:>6.1} MB  {}",
        clean.as_secs_f64(),
        clean_peak as f64 / 1024.0,
        if ok { "ok" } else { "FAILED" }
    );
    // The crate alone: its source changed, dependencies built.
    let lib = nexus.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib)?;
    std::fs::write(&lib, format!("{source}\n"))?;
    let (alone, alone_peak, ok) = bench_support::measured(&mut build())?;
    std::fs::write(&lib, source)?;
    println!(
        "nexus crate alone:              {:>6.1} s  peak {:>6.1} MB  {}",
        alone.as_secs_f64(),
        alone_peak as f64 / 1024.0,
        if ok { "ok" } else { "FAILED" }
    );
    Ok(())
}
