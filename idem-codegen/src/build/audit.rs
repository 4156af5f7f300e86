//! The audit alone at build time, for a crate that generates nothing:
//! findings as `cargo:warning=` lines, errors failing the build, and Cargo
//! re-running when any file the spec pulls in changes.
//!
//! In `build.rs`:
//!
//! ```no_run
//! idem_codegen::build::audit("openapi.yaml").expect("openapi.yaml passes idem audit");
//! ```

use std::path::{Path, PathBuf};

use crate::audit::{self, Severity};
use crate::load::Document;
use crate::model;

/// Why a build-time audit failed.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("{0}")]
    Load(String),
    #[error("{errors} idempotency audit error(s) in {spec}; run `idem audit {spec}` for details")]
    Findings { spec: String, errors: usize },
}

/// Audit `spec`; print every finding as a `cargo:warning=` line and fail the
/// build script when any error-severity finding remains.
pub fn audit(spec: impl AsRef<Path>) -> Result<(), AuditError> {
    let spec = spec.as_ref();
    let model = load_model(spec, &[]).map_err(AuditError::Load)?;
    let errors = print_findings(&model);
    if errors > 0 {
        return Err(AuditError::Findings {
            spec: spec.display().to_string(),
            errors,
        });
    }
    Ok(())
}

/// Loads and models `spec` with `overlays` applied, telling Cargo to re-run
/// when any file it loads changes; the error is `file:line:column: message`,
/// and each overlay warning a `cargo:warning=` line.
pub(crate) fn load_model(spec: &Path, overlays: &[PathBuf]) -> Result<model::Model, String> {
    println!("cargo:rerun-if-changed={}", spec.display());
    for overlay in overlays {
        println!("cargo:rerun-if-changed={}", overlay.display());
    }
    let document = Document::load_overlaid(spec, overlays, &crate::tree::Limits::default())
        .map_err(|f| location_message(&f.sources, &f.error))?;
    for w in &document.warnings {
        println!("cargo:warning={}", warning_message(&document.sources, w));
    }
    for file in 0..document.sources.len() {
        let id = crate::source::FileId(u32::try_from(file).unwrap_or(u32::MAX));
        if let Some(f) = document.sources.get(id) {
            println!("cargo:rerun-if-changed={}", f.path.display());
        }
    }
    model::build(document, &audit::rule_names()).map_err(|f| location_message(&f.sources, &f.error))
}

/// Prints every finding of the audit as a `cargo:warning=` line; returns
/// how many are errors.
pub(crate) fn print_findings(model: &model::Model) -> usize {
    let report = audit::audit(model);
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
    report
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count()
}

/// `file:line:column: warning: message` for a load warning.
pub fn warning_message(
    sources: &crate::source::SourceMap,
    warning: &crate::load::Warning,
) -> String {
    format!(
        "{}:{}:{}: warning: {}",
        sources.display(warning.pos.file),
        warning.pos.line,
        warning.pos.column,
        warning.message
    )
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
