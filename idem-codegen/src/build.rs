//! The `build.rs` front end, in three layers (as prost-build has them):
//! [`compile`] for the common case, [`Config`] for options, and the pure
//! [`crate::generate::generate`] underneath, which does no I/O; and
//! [`audit`] for a crate that only gates on the audit.
//!
//! ```no_run
//! // build.rs
//! idem_codegen::build::compile("openapi.yaml").expect("openapi.yaml generates");
//! ```
//!
//! and in the crate:
//!
//! ```ignore
//! idem_runtime::include_api!();
//! ```
//!
//! The audit runs first: every finding is printed as a `cargo:warning=`
//! line and an error-severity finding fails the build. Every file the spec
//! loads gets a `cargo:rerun-if-changed`, and the output in `OUT_DIR` is
//! rewritten only when its content changes.

use std::path::{Path, PathBuf};

mod audit;

use crate::generate::{self, Options};
use crate::write::write_if_changed;
pub use audit::{AuditError, audit, location_message, warning_message};
use audit::{load_model, print_findings};

/// Why a build-time generation failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{0}")]
    Load(String),
    #[error(
        "{errors} idempotency audit error(s) in {spec}; run `idem audit {spec}` for details, or \
         `.allow_findings(true)` to generate anyway"
    )]
    Findings { spec: String, errors: usize },
    #[error("OUT_DIR is not set: call this from a build script, or set `.out_dir(…)`")]
    NoOutDir,
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Generate(#[from] generate::GenerateError),
    #[error(transparent)]
    Select(#[from] crate::model::SelectError),
}

/// Generates the client for `spec` into `OUT_DIR/idem_api.rs`, with the
/// defaults of [`Config::new`].
pub fn compile(spec: impl AsRef<Path>) -> Result<(), BuildError> {
    Config::new().compile(spec)
}

/// Options for generating from `build.rs`.
#[derive(Debug, Clone)]
pub struct Config {
    client: bool,
    server: bool,
    docs_dir: Option<PathBuf>,
    out_dir: Option<PathBuf>,
    file_name: String,
    allow_findings: bool,
    overlays: Vec<PathBuf>,
    only: crate::model::Selection,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            client: true,
            server: false,
            docs_dir: None,
            out_dir: None,
            file_name: "idem_api".to_owned(),
            allow_findings: false,
            overlays: Vec::new(),
            only: crate::model::Selection::all(),
        }
    }
}

impl Config {
    /// The client, into `OUT_DIR/idem_api.rs`, failing on audit errors.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether to generate the client (default `true`).
    ///
    /// ```
    /// let mut config = idem_codegen::build::Config::new();
    /// config.client(true);
    /// ```
    pub fn client(&mut self, on: bool) -> &mut Self {
        self.client = on;
        self
    }

    /// Whether to generate the server scaffolding: the `Api` trait, the
    /// typed inputs and replies, and `router` (default `false`).
    ///
    /// ```
    /// let mut config = idem_codegen::build::Config::new();
    /// config.server(true);
    /// ```
    pub fn server(&mut self, on: bool) -> &mut Self {
        self.server = on;
        self
    }

    /// Also writes the integrator docs page (`idempotency.md`,
    /// `idempotency.html`) into `dir`, for publishing.
    ///
    /// ```
    /// let mut config = idem_codegen::build::Config::new();
    /// config.docs_dir("target/doc/idempotency");
    /// ```
    pub fn docs_dir(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.docs_dir = Some(dir.into());
        self
    }

    /// Where to write, instead of `OUT_DIR`.
    ///
    /// ```
    /// let mut config = idem_codegen::build::Config::new();
    /// config.out_dir("target/idem");
    /// ```
    pub fn out_dir(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// The file's name without `.rs` (default `idem_api`); include it with
    /// `idem_runtime::include_api!("name")`.
    ///
    /// ```
    /// let mut config = idem_codegen::build::Config::new();
    /// config.file_name("payments");
    /// ```
    pub fn file_name(&mut self, name: impl Into<String>) -> &mut Self {
        self.file_name = name.into();
        self
    }

    /// Generate even when the audit reports errors (they are still printed).
    ///
    /// ```
    /// let mut config = idem_codegen::build::Config::new();
    /// config.allow_findings(true);
    /// ```
    pub fn allow_findings(&mut self, allow: bool) -> &mut Self {
        self.allow_findings = allow;
        self
    }

    /// Applies an OpenAPI Overlay 1.0 file to the spec as it loads, after
    /// any added before it; the path is relative to the manifest directory,
    /// like the spec's. Cargo re-runs the build script when it changes. Use
    /// it for a spec you do not own, such as one that says nothing of the
    /// keys its API accepts.
    ///
    /// ```
    /// let mut config = idem_codegen::build::Config::new();
    /// config.overlay("stripe.overlay.yaml");
    /// ```
    pub fn overlay(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.overlays.push(path.into());
        self
    }

    /// Generates only the operations `selection` chooses (by tag,
    /// operationId or path prefix), and only the schemas they reach; calls
    /// add up. The audit still covers the whole spec. An entry the spec
    /// does not have fails the build, with the closest name it does have.
    ///
    /// ```
    /// use idem_codegen::model::Selection;
    /// let mut config = idem_codegen::build::Config::new();
    /// config
    ///     .only(Selection::tags(["charges", "customers"]))
    ///     .only(Selection::operations(["createRefund", "/v1/products"]));
    /// ```
    pub fn only(&mut self, selection: crate::model::Selection) -> &mut Self {
        let current = std::mem::take(&mut self.only);
        self.only = current.and(selection);
        self
    }

    /// Audits and generates `spec` (relative to the crate's manifest
    /// directory, as build scripts run there).
    pub fn compile(&self, spec: impl AsRef<Path>) -> Result<(), BuildError> {
        let spec = spec.as_ref();
        let mut model = load_model(spec, &self.overlays).map_err(BuildError::Load)?;
        let errors = print_findings(&model);
        if errors > 0 && !self.allow_findings {
            return Err(BuildError::Findings {
                spec: spec.display().to_string(),
                errors,
            });
        }
        self.only.narrow(&mut model)?;
        if let Some(dir) = &self.docs_dir {
            let pages = crate::docs::render(&model).map_err(|e| BuildError::Load(e.to_string()))?;
            for (name, text) in pages.files() {
                let path = dir.join(name);
                write_if_changed(&path, text).map_err(|source| BuildError::Write {
                    path: path.display().to_string(),
                    source,
                })?;
            }
        }
        let generated = generate::generate(
            &model,
            &Options {
                client: self.client,
                server: self.server,
                // Included into the user's crate, whose features are its own.
                feature_groups: false,
            },
        )?;
        for note in &generated.notes {
            println!("cargo:warning={note}");
        }
        let out_dir = match &self.out_dir {
            Some(dir) => dir.clone(),
            None => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                .ok_or(BuildError::NoOutDir)?,
        };
        let path = out_dir.join(format!("{}.rs", self.file_name));
        // A name of its own, so the module never repeats the name of the
        // module the user includes it in.
        let module = format!(
            "generated_{}",
            generate::naming::snake(&self.file_name, "api").trim_start_matches("r#")
        );
        write_if_changed(&path, &generate::included(&generated, &module)).map_err(|source| {
            BuildError::Write {
                path: path.display().to_string(),
                source,
            }
        })?;
        Ok(())
    }
}
