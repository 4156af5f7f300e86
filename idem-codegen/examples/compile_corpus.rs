//! The corpus compile rate: generate the client and the server for every OpenAPI root
//! document in `../shared/specs` (or `IDEM_SPECS_DIR`), or for a seeded
//! sample of every document under a folder (APIs.guru's directory), type-check each
//! generated crate with warnings denied, and print a table.
//!
//! ```text
//! cargo run --release -p idem-codegen --example compile_corpus -- \
//!     [--dir DIR [--sample N --seed S]] [--out DIR] [--exclude SUBSTRING]…
//!     [--results FILE] [FILTER…]
//! ```
//!
//! Crates are written to `target/corpus/<name>` (or under `--out`) as one
//! workspace with one shared target dir, so dependencies compile once. `FILTER`s keep only
//! specs whose path contains one of them; `--exclude` (repeatable) leaves
//! out those whose path contains its value, and says so. `--dir` takes every `.json` and
//! `.yaml` under DIR instead of the corpus manifest; `--sample N --seed S`
//! checks N of them, the same N for the same seed on any machine.
//! `--results` also writes the table to FILE. Exits 1 when any spec fails.
//!
//! Beside each crate's result, the table counts the fields generated as
//! `serde_json::Value`, by reason: those the spec leaves free-form, and
//! those it describes but idem could not type.
//!
//! A spec whose generated code passes 20,000 lines is also checked as a
//! user of part of it would build it: filtered (the client of the first
//! operation's tag, or of its path's first resource), and as the gated
//! whole-API client crate with one resource-group feature alone, for the
//! first, the middle and the last group.

mod bench_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use idem_codegen::generate::{Generated, Options, generate};
use idem_codegen::model::{Model, Selection};
use idem_codegen::write::{Runtime, crate_files, write_if_changed};

struct Row {
    spec: String,
    result: String,
    lines: usize,
    /// Resource groups of the client (`client.charges()`).
    groups: usize,
    /// Names the generator had to number (`Error2`).
    numbered: usize,
    generate_ms: u128,
    check_ms: u128,
    /// Extra `cargo check` arguments (the features of a gated crate).
    check_args: Vec<String>,
    /// `serde_json::Value` fields by reason.
    untyped: BTreeMap<String, usize>,
}

impl Row {
    fn failed(spec: String, error: &str, generate_ms: u128) -> Self {
        Row {
            spec,
            result: format!("FAIL generate: {error}"),
            lines: 0,
            groups: 0,
            numbered: 0,
            generate_ms,
            check_ms: 0,
            check_args: Vec::new(),
            untyped: BTreeMap::new(),
        }
    }
}

/// One spec generated: its model, lines, groups, numbered names and
/// untyped fields by reason.
type Generation = (Model, usize, usize, usize, BTreeMap<String, usize>);

/// Generated code past this many lines is also checked filtered and gated.
const LARGE: usize = 20_000;

fn main() {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut option = |name: &str| {
        let i = args.iter().position(|a| a == name)?;
        let value = args.get(i + 1).cloned();
        args.drain(i..(i + 2).min(args.len()));
        value
    };
    let dir = option("--dir").map(PathBuf::from);
    let sample: Option<usize> = option("--sample").and_then(|n| n.parse().ok());
    let seed: u64 = option("--seed").and_then(|n| n.parse().ok()).unwrap_or(0);
    let results = option("--results").map(PathBuf::from);
    // Documents left out by name, said in the table (a document too large
    // to check on the machine at hand).
    let mut excluded = Vec::new();
    while let Some(skip) = option("--exclude") {
        excluded.push(skip);
    }
    let out = option("--out")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/corpus"));
    let filters = args;
    // (path relative to the specs folder, whether it is a root to generate)
    let Some((specs_dir, listed)) = listed_specs(&workspace, dir.as_ref(), sample, seed) else {
        return;
    };
    let mut members = Vec::new();
    let mut rows = Vec::new();
    for path in &listed {
        let path = path.as_str();
        if !filters.is_empty() && !filters.iter().any(|f| path.contains(f.as_str())) {
            continue;
        }
        if excluded.iter().any(|x| path.contains(x.as_str())) {
            println!("{path:<58} left out (--exclude)");
            continue;
        }
        // One `-` for each run of other characters: `Recurrence-(v1-.json`
        // would otherwise make a crate name with `__`, which is not snake
        // case.
        let words: Vec<String> = path
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
        let name = format!("corpus-{}", words.join("-"));
        let started = Instant::now();
        let runtime = Runtime::Path(workspace.join("idem-runtime"));
        let write = |name: &str, generated: &Generated, title: &str| -> Result<(), String> {
            for file in crate_files(generated, name, title, &runtime) {
                write_if_changed(&out.join(name).join(&file.path), &file.contents)
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        let result = (|| -> Result<Generation, String> {
            let document = idem_codegen::load::Document::load(&specs_dir.join(path))
                .map_err(|f| format!("load: {}", f.error))?;
            let model = idem_codegen::model::build(document, &idem_codegen::audit::rule_names())
                .map_err(|f| format!("model: {}", f.error))?;
            let generated = generate(
                &model,
                &Options {
                    client: true,
                    server: true,
                    feature_groups: false,
                },
            )
            .map_err(|e| e.to_string())?;
            write(&name, &generated, &model.title)?;
            Ok((
                model,
                generated.lines,
                groups(&generated.items),
                numbered(&generated.items),
                bench_support::untyped(&generated.items),
            ))
        })();
        let generate_ms = started.elapsed().as_millis();
        let model = match result {
            Ok((model, lines, groups, numbered, untyped)) => {
                members.push(name.clone());
                rows.push(Row {
                    spec: path.to_owned(),
                    result: name.clone(),
                    lines,
                    groups,
                    numbered,
                    generate_ms,
                    check_ms: 0,
                    check_args: Vec::new(),
                    untyped,
                });
                (lines > LARGE).then_some(model)
            }
            Err(e) => {
                rows.push(Row::failed(path.to_owned(), &e, generate_ms));
                None
            }
        };
        let Some(model) = model else { continue };
        // As a user of part of a large API builds it.
        let at = Large {
            specs_dir: &specs_dir,
            path,
            name: &name,
            model: &model,
        };
        parts(&at, &write, &mut members, &mut rows);
    }
    let members_toml: Vec<String> = members.iter().map(|m| format!("{m:?}")).collect();
    let root = format!(
        "[workspace]\nresolver = \"3\"\nmembers = [{}]\n",
        members_toml.join(", ")
    );
    if let Err(e) = write_if_changed(&out.join("Cargo.toml"), &root) {
        eprintln!("error: cannot write the corpus workspace: {e}");
        std::process::exit(2);
    }
    let failures = check(&out, &mut rows);
    let table = table(&rows, failures, dir.as_ref().zip(sample), seed);
    print!("{table}");
    if let Some(path) = &results
        && let Err(e) = std::fs::write(path, &table)
    {
        eprintln!("error: cannot write {}: {e}", path.display());
    }
    if failures > 0 {
        std::process::exit(1);
    }
}

#[derive(Clone, Copy)]
enum Part {
    Filtered,
    Gated,
}

/// What the filtered configuration of a spec keeps: the first operation's
/// first tag, or else the path up to its first resource segment.
fn selection_of(model: &Model) -> (String, Selection) {
    let Some(first) = model.operations.first() else {
        return ("nothing".to_owned(), Selection::default());
    };
    if let Some(tag) = first.tags.first() {
        return (format!("tag {tag}"), Selection::tags([tag.clone()]));
    }
    let mut prefix = String::new();
    for segment in first.path.split('/').filter(|s| !s.is_empty()) {
        prefix.push('/');
        prefix.push_str(segment);
        let version =
            segment.starts_with('v') && segment[1..].starts_with(|c: char| c.is_ascii_digit());
        if !version && segment != "api" && !segment.contains('{') {
            break;
        }
    }
    (
        format!("operations under {prefix}"),
        Selection::operations([prefix]),
    )
}

/// The client's resource groups: one handle type each.
fn groups(code: &str) -> usize {
    code.lines()
        .filter(|l| l.starts_with("pub struct ") && l.ends_with("Client<'a> {"))
        .count()
}

/// Distinct identifiers that are another identifier (or a name the
/// generated code reserves) plus a number from 2 to 99, as a `Namer`
/// numbers a collision: `Error2`, `new2`, `Order3`.
/// Comments are left out, so a spec's own `Oauth2` in a doc is not counted.
fn numbered(code: &str) -> usize {
    const RESERVED: &[&str] = &["Client", "Error", "Result", "Api", "new"];
    let mut idents = std::collections::BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") || line.starts_with("#[doc") {
            continue;
        }
        idents.extend(
            line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')),
        );
    }
    idents
        .iter()
        .filter(|w| {
            let stem = w.trim_end_matches(|c: char| c.is_ascii_digit());
            // What a `Namer` appends: 2, 3, …; not a status (`Response200`).
            let suffix = w[stem.len()..].parse::<u32>().unwrap_or(0);
            (2..100).contains(&suffix)
                && !stem.is_empty()
                && !stem.ends_with('_')
                && (idents.contains(stem) || RESERVED.contains(&stem))
        })
        .count()
}

/// The documents to generate, relative to the folder they are in: a seeded
/// sample of `--dir`, or the roots `../shared/specs` lists; `None` (said)
/// when there is no corpus.
fn listed_specs(
    workspace: &Path,
    dir: Option<&PathBuf>,
    sample: Option<usize>,
    seed: u64,
) -> Option<(PathBuf, Vec<String>)> {
    match dir {
        Some(dir) => match bench_support::documents(dir) {
            Ok(found) => {
                let relative: Vec<String> = found
                    .iter()
                    .filter_map(|p| p.strip_prefix(dir).ok())
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect();
                let chosen = match sample {
                    Some(n) => bench_support::sample(&relative, n, seed),
                    None => relative,
                };
                Some((dir.clone(), chosen))
            }
            Err(e) => {
                eprintln!("error: cannot read {}: {e}", dir.display());
                std::process::exit(2);
            }
        },
        None => {
            let specs_dir = std::env::var_os("IDEM_SPECS_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace.join("../shared/specs"));
            let manifest = match std::fs::read_to_string(specs_dir.join("MANIFEST.tsv")) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("skipped: no corpus at {} ({e})", specs_dir.display());
                    return None;
                }
            };
            let roots = manifest
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let columns: Vec<&str> = line.split('\t').collect();
                    let (path, version) = (columns.first()?, columns.get(5)?);
                    (version.starts_with("openapi 3") || version.starts_with("swagger 2"))
                        .then(|| (*path).to_owned())
                })
                .collect();
            Some((specs_dir, roots))
        }
    }
}

/// `cargo check`s every generated crate with warnings denied; the failures.
fn check(out: &Path, rows: &mut [Row]) -> usize {
    let mut failures = 0;
    for row in rows.iter_mut() {
        if row.result.starts_with("FAIL") {
            failures += 1;
            continue;
        }
        let started = Instant::now();
        let mut command = Command::new(env!("CARGO"));
        // The rustc beside this cargo: run outside `cargo run`, a rustup
        // proxy would otherwise pick a toolchain from each dependency's own
        // `rust-toolchain` file.
        let rustc = Path::new(env!("CARGO")).with_file_name("rustc");
        if std::env::var_os("RUSTC").is_none() && rustc.is_file() {
            command.env("RUSTC", rustc);
        }
        let status = command
            .args([
                "check",
                "--quiet",
                "--message-format=short",
                "-p",
                &row.result,
            ])
            .args(&row.check_args)
            .current_dir(out)
            .env("RUSTFLAGS", "-D warnings")
            .env("CARGO_TARGET_DIR", out.join("target"))
            .output();
        row.check_ms = started.elapsed().as_millis();
        row.result = match status {
            Ok(o) if o.status.success() => "ok".to_owned(),
            Ok(o) => {
                failures += 1;
                let stderr = String::from_utf8_lossy(&o.stderr);
                let first = stderr
                    .lines()
                    .find(|l| l.contains("error") || l.contains("warning"))
                    .unwrap_or("")
                    .to_owned();
                eprintln!(
                    "--- {}\n{}",
                    row.spec,
                    stderr.lines().take(40).collect::<Vec<_>>().join("\n")
                );
                format!("FAIL check: {first}")
            }
            Err(e) => {
                failures += 1;
                format!("FAIL check: {e}")
            }
        };
        eprintln!("{:<58} {}", row.spec, row.result);
    }
    failures
}

/// The results table: a row per crate, the untyped fields by reason, and
/// the count that compiles.
fn table(rows: &[Row], failures: usize, sampled: Option<(&PathBuf, usize)>, seed: u64) -> String {
    let mut table = String::from(
        "| spec | result | lines | groups | numbered names | untyped | free-form | generate ms | check ms |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let mut reasons: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for row in rows {
        let free = row
            .untyped
            .get(bench_support::FREE_FORM)
            .copied()
            .unwrap_or(0);
        let all: usize = row.untyped.values().sum();
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {free} | {} | {} |\n",
            row.spec,
            row.result,
            row.lines,
            row.groups,
            row.numbered,
            all - free,
            row.generate_ms,
            row.check_ms
        ));
        for (reason, n) in &row.untyped {
            let entry = reasons.entry(reason).or_default();
            entry.0 += n;
            entry.1 += 1;
        }
    }
    table.push_str(&format!(
        "\nnumbered names in all: {}\n",
        rows.iter().map(|r| r.numbered).sum::<usize>()
    ));
    let mut reasons: Vec<_> = reasons.into_iter().collect();
    reasons.sort_by_key(|(_, (n, _))| std::cmp::Reverse(*n));
    table.push_str(
        "\n| `serde_json::Value` fields, by reason | fields | crates |\n| --- | ---: | ---: |\n",
    );
    for (reason, (n, crates)) in &reasons {
        table.push_str(&format!("| {reason} | {n} | {crates} |\n"));
    }
    let total = rows.len();
    table.push_str(&format!(
        "\n{} of {total} compile with no warnings\n",
        total - failures
    ));
    if let Some((dir, n)) = sampled {
        table.push_str(&format!(
            "(a sample of {n} of the documents under {}, seed {seed})\n",
            dir.display()
        ));
    }
    table
}

/// A large document, generated whole; its filtered and gated crates are
/// generated beside it.
struct Large<'a> {
    specs_dir: &'a Path,
    path: &'a str,
    name: &'a str,
    model: &'a Model,
}

/// The large document as a user of part of it builds it: filtered to a few
/// operations, and whole with each group a feature (three checked alone).
fn parts(
    at: &Large<'_>,
    write: &dyn Fn(&str, &Generated, &str) -> Result<(), String>,
    members: &mut Vec<String>,
    rows: &mut Vec<Row>,
) {
    let Large {
        specs_dir,
        path,
        name,
        model,
    } = *at;
    for (suffix, what) in [("filtered", Part::Filtered), ("gated", Part::Gated)] {
        let started = Instant::now();
        let part_name = format!("{name}-{suffix}");
        let built = (|| -> Result<(String, Generated), String> {
            let (label, generated) = match what {
                Part::Filtered => {
                    // The model is narrowed in place: a fresh one.
                    let document = idem_codegen::load::Document::load(&specs_dir.join(path))
                        .map_err(|f| format!("load: {}", f.error))?;
                    let mut part =
                        idem_codegen::model::build(document, &idem_codegen::audit::rule_names())
                            .map_err(|f| format!("model: {}", f.error))?;
                    let (label, selection) = selection_of(&part);
                    selection.narrow(&mut part).map_err(|e| e.to_string())?;
                    let options = Options {
                        client: true,
                        server: false,
                        feature_groups: false,
                    };
                    (label, generate(&part, &options).map_err(|e| e.to_string())?)
                }
                Part::Gated => {
                    let options = Options {
                        client: true,
                        server: false,
                        feature_groups: true,
                    };
                    (
                        String::new(),
                        generate(model, &options).map_err(|e| e.to_string())?,
                    )
                }
            };
            write(&part_name, &generated, &model.title)?;
            Ok((label, generated))
        })();
        let generate_ms = started.elapsed().as_millis();
        match built {
            Ok((label, generated)) => {
                members.push(part_name.clone());
                let features = &generated.cargo_features;
                let configs: Vec<(String, Vec<String>)> = match what {
                    Part::Filtered => vec![(format!("{path} [{label}]"), Vec::new())],
                    Part::Gated => {
                        let mut picks: Vec<&String> = [
                            features.first(),
                            features.get(features.len() / 2),
                            features.last(),
                        ]
                        .into_iter()
                        .flatten()
                        .collect();
                        picks.dedup();
                        picks
                            .into_iter()
                            .map(|f| {
                                (
                                    format!("{path} [feature {f} alone]"),
                                    vec![
                                        "--no-default-features".to_owned(),
                                        "--features".to_owned(),
                                        f.clone(),
                                    ],
                                )
                            })
                            .collect()
                    }
                };
                for (spec, check_args) in configs {
                    rows.push(Row {
                        spec,
                        result: part_name.clone(),
                        lines: generated.lines,
                        groups: groups(&generated.items),
                        numbered: numbered(&generated.items),
                        generate_ms,
                        check_ms: 0,
                        check_args,
                        untyped: BTreeMap::new(),
                    });
                }
            }
            Err(e) => rows.push(Row::failed(format!("{path} [{suffix}]"), &e, generate_ms)),
        }
    }
}
