//! The `build.rs` front end: audit a spec at build time, report findings as
//! `cargo:warning=` lines, and make Cargo re-run when any file the spec pulls
//! in changes.
//!
//! In `build.rs`:
//!
//! ```no_run
//! idem_codegen::build_script::audit("openapi.yaml").expect("openapi.yaml passes idem audit");
//! ```

use std::path::Path;

use crate::audit::{self, Severity};
use crate::load::Document;
use crate::model;

/// Why a build-time audit failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{0}")]
    Load(String),
    #[error("{errors} idempotency audit error(s) in {spec}; run `idem audit {spec}` for details")]
    Findings { spec: String, errors: usize },
}

/// Audit `spec`; print every finding as a `cargo:warning=` line and fail the
/// build script when any error-severity finding remains.
pub fn audit(spec: impl AsRef<Path>) -> Result<(), BuildError> {
    let spec = spec.as_ref();
    println!("cargo:rerun-if-changed={}", spec.display());
    let document = Document::load(spec)
        .map_err(|f| BuildError::Load(location_message(&f.sources, &f.error)))?;
    for file in 0..document.sources.len() {
        if let Some(f) = document.sources.get(crate::source::FileId(file as u32)) {
            println!("cargo:rerun-if-changed={}", f.path.display());
        }
    }
    let model = model::build(document, &audit::rule_names())
        .map_err(|f| BuildError::Load(location_message(&f.sources, &f.error)))?;
    let report = audit::audit(&model);
    let sources = &model.document.sources;
    for d in &report.diagnostics {
        println!(
            "cargo:warning={}:{}:{}: {}[{}] {}",
            sources.display(d.pos.file),
            d.pos.line,
            d.pos.column,
            d.severity.as_str(),
            d.code,
            d.message
        );
    }
    let errors = report
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    if errors > 0 {
        return Err(BuildError::Findings {
            spec: spec.display().to_string(),
            errors,
        });
    }
    Ok(())
}

/// `file:line:column: message` for a load error.
pub fn location_message(
    sources: &crate::source::SourceMap,
    error: &crate::load::LoadError,
) -> String {
    match error.pos() {
        Some(p) => format!(
            "{}:{}:{}: {error}",
            sources.display(p.file),
            p.line,
            p.column
        ),
        None => error.to_string(),
    }
}
