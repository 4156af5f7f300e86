//! The generated client's method names, one operation per line, to review
//! naming across many documents and to diff them between two versions.
//!
//! ```text
//! cargo run --release -p idem-codegen --example client_names -- \
//!     [--dir DIR [--sample N --seed S]] [FILE…]
//! ```
//!
//! Prints tab-separated rows: the document (relative to `--dir`), the
//! method and path, the operationId, and the call as a user writes it
//! (`client.charges().create`). With `--sample N --seed S`, N documents
//! of `--dir`, the same N for the same seed on any machine.

mod bench_support;

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| bench_support::option(&args, name);
    let dir = value("--dir").map(PathBuf::from);
    let mut files: Vec<PathBuf> = Vec::new();
    let mut skip = false;
    for arg in &args {
        if skip {
            skip = false;
        } else if arg.starts_with("--") {
            skip = true;
        } else {
            files.push(PathBuf::from(arg));
        }
    }
    if let Some(dir) = &dir {
        let mut all = bench_support::documents(dir)?;
        all.sort();
        if let Some(n) = value("--sample").and_then(|n| n.parse().ok()) {
            let seed = value("--seed").and_then(|s| s.parse().ok()).unwrap_or(0);
            all = bench_support::sample(&all, n, seed);
        }
        files.extend(all);
    }
    anyhow::ensure!(
        !files.is_empty(),
        "usage: client_names [--dir DIR [--sample N --seed S]] [FILE…]"
    );
    let rules = idem_codegen::audit::rule_names();
    for file in files {
        let shown = dir
            .as_ref()
            .and_then(|d| file.strip_prefix(d).ok())
            .unwrap_or(&file)
            .display()
            .to_string();
        let model = match idem_codegen::load::Document::load(&file)
            .map_err(|f| f.error.to_string())
            .and_then(|d| idem_codegen::model::build(d, &rules).map_err(|f| f.error.to_string()))
        {
            Ok(model) => model,
            Err(error) => {
                eprintln!("{shown}: {error}");
                continue;
            }
        };
        let names = idem_codegen::generate::client_method_names(&model);
        for (op, (group, method)) in model.operations.iter().zip(names) {
            println!(
                "{shown}\t{} {}\t{}\tclient.{group}().{method}",
                op.method.as_str(),
                op.path,
                op.operation_id.as_deref().unwrap_or("-"),
            );
        }
    }
    Ok(())
}
