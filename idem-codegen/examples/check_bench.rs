//! What a generated client costs the crate that builds it: `cargo check` of
//! the generated crate alone (dependencies built, then `touch src/lib.rs`),
//! wall time and the largest RSS of any process in cargo's tree, for
//!
//! - Stripe's whole client, every feature on (the default);
//! - Stripe's five core resources (charges, customers, payment intents,
//!   refunds, products) as features of that crate;
//! - the same five chosen with `--operations` instead;
//! - the whole clients of GitHub and Oxide's nexus, and nexus's `cargo
//!   check` and `cargo build` beside progenitor's, when `cargo progenitor`
//!   is installed (`cargo install cargo-progenitor`).
//!
//! ```text
//! cargo run --release -p idem-codegen --example check_bench [-- --runs N] [--idem BIN --out DIR]
//! ```
//!
//! Crates go to `target/check-bench/` (or `--out`), sharing one target dir.
//! `--idem` generates with another build of the CLI, to compare versions. Specs come
//! from `../shared/specs` (or `IDEM_SPECS_DIR`); a missing one is skipped,
//! saying so.

mod bench_support;

use std::path::{Path, PathBuf};
use std::process::Command;

const FIVE: &[&str] = &[
    "charges",
    "customers",
    "payment_intents",
    "refunds",
    "products",
];

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(3);
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let specs = std::env::var_os("IDEM_SPECS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("../shared/specs"));
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(PathBuf::from)
    };
    let out = flag("--out").unwrap_or_else(|| workspace.join("target/check-bench"));
    let target = out.join("target");
    let idem = flag("--idem").unwrap_or_else(|| workspace.join("target/release/idem"));
    if !idem.is_file() {
        anyhow::bail!(
            "build the CLI first: cargo build --release -p idem-codegen ({} is missing)",
            idem.display()
        );
    }
    let runtime = workspace.join("idem-runtime");
    let generate = |spec: &str, name: &str, extra: &[&str]| -> anyhow::Result<Option<PathBuf>> {
        let path = specs.join(spec);
        if !path.is_file() {
            println!("skipped {spec}: not in {}", specs.display());
            return Ok(None);
        }
        let dir = out.join(name);
        let status = Command::new(&idem)
            .arg("generate")
            .arg(&path)
            .args(["--client", "--allow-findings", "--name", name, "--out"])
            .arg(&dir)
            .arg("--runtime-path")
            .arg(&runtime)
            .args(extra)
            .stderr(std::process::Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "idem generate {spec} failed");
        Ok(Some(dir))
    };
    println!(
        "| crate | configuration | lines | cargo check after touch: s (each run) | peak RSS MB |\n\
         | --- | --- | ---: | --- | ---: |"
    );
    let stripe = generate("stripe/spec3.yaml", "stripe-whole", &[])?;
    if let Some(dir) = &stripe {
        row(dir, &target, "whole client, default features", &[], runs)?;
        let five = FIVE.join(",");
        row(
            dir,
            &target,
            "5 resources as features",
            &["--no-default-features", "--features", &five],
            runs,
        )?;
    }
    let prefixes: Vec<String> = FIVE.iter().map(|r| format!("/v1/{r}")).collect();
    let filtered = generate(
        "stripe/spec3.yaml",
        "stripe-five",
        &["--operations", &prefixes.join(",")],
    )?;
    if let Some(dir) = &filtered {
        row(dir, &target, "5 resources with --operations", &[], runs)?;
    }
    for (spec, name) in [
        ("progenitor/api.github.com.json", "github-whole"),
        ("progenitor/nexus.json", "nexus-whole"),
    ] {
        if let Some(dir) = generate(spec, name, &[])? {
            row(&dir, &target, "whole client", &[], runs)?;
        }
    }
    progenitor(&specs, &out, &target, runs)?;
    Ok(())
}

/// Lines of `dir/src/lib.rs`.
fn lines(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("src/lib.rs"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn cargo(dir: &Path, target: &Path, verb: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO"));
    command
        .arg(verb)
        .arg("--quiet")
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    command
}

/// One configuration: a first check builds the dependencies (and warms the
/// incremental cache), then `runs` checks each after `touch src/lib.rs`.
fn row(dir: &Path, target: &Path, what: &str, args: &[&str], runs: usize) -> anyhow::Result<()> {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let (_, _, ok) = bench_support::measured(&mut cargo(dir, target, "check", args))?;
    anyhow::ensure!(ok, "{name} ({what}) does not check");
    let (times, peak) = touched(dir, target, "check", args, runs)?;
    println!(
        "| {name} | {what} | {} | {} | {} |",
        lines(dir),
        times,
        peak / 1024
    );
    Ok(())
}

/// `runs` timings of `cargo VERB` after touching the crate's root, and
/// the largest peak RSS among them.
fn touched(
    dir: &Path,
    target: &Path,
    verb: &str,
    args: &[&str],
    runs: usize,
) -> anyhow::Result<(String, u64)> {
    let mut times = Vec::new();
    let mut peak = 0;
    for _ in 0..runs {
        let lib = dir.join("src/lib.rs");
        let text = std::fs::read(&lib)?;
        std::fs::write(&lib, text)?;
        let (took, rss, ok) = bench_support::measured(&mut cargo(dir, target, verb, args))?;
        anyhow::ensure!(ok, "{} failed in {}", verb, dir.display());
        times.push(format!("{:.1}", took.as_secs_f64()));
        peak = peak.max(rss);
    }
    Ok((times.join(", "), peak))
}

/// nexus through progenitor's generator, checked and built the same way,
/// beside idem's crate for nexus.
fn progenitor(specs: &Path, out: &Path, target: &Path, runs: usize) -> anyhow::Result<()> {
    let spec = specs.join("progenitor/nexus.json");
    let available = Command::new(env!("CARGO"))
        .args(["progenitor", "--help"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !available || !spec.is_file() {
        println!(
            "\nprogenitor comparison skipped: {}",
            if available {
                "no nexus spec"
            } else {
                "`cargo progenitor` is not installed (cargo install cargo-progenitor)"
            }
        );
        return Ok(());
    }
    let dir = out.join("nexus-progenitor");
    let status = Command::new(env!("CARGO"))
        .args(["progenitor", "-i"])
        .arg(&spec)
        .arg("-o")
        .arg(&dir)
        .args(["-n", "nexus-progenitor", "-v", "0.1.0"])
        .stdout(std::process::Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "cargo progenitor failed on nexus");
    // A workspace of its own, as idem's crates are.
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)?;
    if !text.contains("[workspace]") {
        std::fs::write(&manifest, format!("{text}\n[workspace]\n"))?;
    }
    println!(
        "\n| nexus | cargo check after touch: s | cargo build after touch: s | peak RSS MB (build) |\n| --- | --- | --- | ---: |"
    );
    for (label, dir) in [
        ("idem", out.join("nexus-whole")),
        ("progenitor", dir.clone()),
    ] {
        bench_support::measured(&mut cargo(&dir, target, "check", &[]))?;
        bench_support::measured(&mut cargo(&dir, target, "build", &[]))?;
        let (check, _) = touched(&dir, target, "check", &[], runs)?;
        let (build, peak) = touched(&dir, target, "build", &[], runs)?;
        println!("| {label} | {check} | {build} | {} |", peak / 1024);
    }
    Ok(())
}
