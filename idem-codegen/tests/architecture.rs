#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "helpers of a test binary: a failed unwrap is a failed test"
)]
//! The layering `docs/architecture.md` describes, checked on the source:
//! the emitters (the client, the server, the docs page) and the probe read
//! one operation record (`model::shape`) and never each other.

use std::path::{Path, PathBuf};

/// Every `.rs` file of a module: `src/<name>.rs` and everything under
/// `src/<name>/`.
fn module_files(name: &str) -> Vec<PathBuf> {
    let src = Path::new("src");
    let mut files = vec![src.join(format!("{name}.rs"))];
    let mut dirs = vec![src.join(name)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.retain(|f| f.is_file());
    assert!(!files.is_empty(), "no module {name}");
    files
}

/// The paths of `module`'s code that name one of `forbidden`.
fn naming(module: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for file in module_files(module) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for path in forbidden {
                if code.contains(path) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn no_emitter_reads_another() {
    let cases: &[(&str, &[&str])] = &[
        (
            "generate/client",
            &[
                "generate::server",
                "super::server",
                "crate::docs",
                "crate::probe",
            ],
        ),
        (
            "generate/server",
            &[
                "generate::client",
                "super::client",
                "crate::docs",
                "crate::probe",
            ],
        ),
        ("docs", &["crate::generate", "crate::probe"]),
        ("probe", &["crate::generate", "crate::docs"]),
    ];
    for (module, forbidden) in cases {
        let found = naming(module, forbidden);
        assert!(
            found.is_empty(),
            "{module} reads another emitter:\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn the_model_reads_no_emitter() {
    let found = naming(
        "model",
        &[
            "crate::generate",
            "crate::docs",
            "crate::probe",
            "crate::audit",
        ],
    );
    assert!(found.is_empty(), "{}", found.join("\n"));
}
