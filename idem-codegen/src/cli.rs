//! The `idem` command line. `main.rs` is a shim over [`run`], so tests and
//! `build.rs` call the same code.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::audit::{self, RULES, Rule, Severity};
use crate::baseline::Baseline;
use crate::output::{self, Format};

pub mod keys;
pub(crate) mod shared;

pub use crate::probe::cli::{ProbeArgs, ProbeFormat};
pub use shared::{ColorChoice, EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, Terminals};
pub(crate) use shared::{load_model, use_color};

#[derive(Debug, Parser)]
#[command(
    name = "idem",
    version,
    about = "Make retries safe by construction: audit an OpenAPI document's retry contract and generate from it"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Audit every operation of SPEC; exit 1 on findings at or above the threshold.
    Audit(AuditArgs),
    /// Generate a crate from SPEC: the typed client, the server scaffolding
    /// and the integrator docs page (all three unless --client, --server or
    /// --docs narrows it).
    Generate(GenerateArgs),
    /// Check a running service against the key contract SPEC declares:
    /// replays, concurrent duplicates, mismatched bodies, missing and
    /// malformed keys, caller isolation, refusals that must not be stored.
    /// Exit 1 when a check fails or cannot decide.
    Probe(ProbeArgs),
    /// Write an OpenAPI Overlay 1.0 document that declares what the audit
    /// can decide for SPEC: effects and keys read from its words (each
    /// quoted), a key on every other unkeyed unsafe write, the key
    /// conflicts, Retry-After, a failure-replay decision. Review it, commit
    /// it beside the spec, and pass it with --overlay.
    Suggest(SuggestArgs),
    /// List the rules.
    Rules,
    /// Print a rule's page, or a probe check's, by code (IDEM001, PROBE001)
    /// or slug (unkeyed-unsafe-write, replay).
    Explain {
        /// Code or slug.
        rule: String,
    },
    /// Write the integrator docs page of SPEC (idempotency.md and
    /// idempotency.html) into DIR. Audit findings are printed and do not
    /// stop it: the page lists the endpoints that are unsafe to retry.
    Docs(DocsArgs),
    /// Print the GitHub Actions workflow that runs the audit on every push
    /// and pull request (findings in code scanning), publishes the docs page
    /// and, once STAGING_URL is set, probes staging:
    /// `idem workflow --spec api/openapi.yaml > .github/workflows/idem.yml`.
    Workflow(WorkflowArgs),
    /// Read a deployment's key store: what happened to a key (`show`), the
    /// records to look at (`list`), counts (`stats`), and make an exhausted
    /// phased record due again (`resume`). Exit 1 when the record is not
    /// found, 2 on bad input or a store that cannot be read.
    Keys(keys::KeysArgs),
}

#[derive(Debug, clap::Args)]
pub struct SuggestArgs {
    /// The OpenAPI document (YAML or JSON).
    pub spec: PathBuf,
    /// Overlays already in use, applied first (repeatable): the suggestion
    /// adds to them.
    #[arg(long = "overlay", value_name = "FILE")]
    pub overlays: Vec<PathBuf>,
    /// Write the overlay to FILE instead of printing it.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

fn run_suggest(
    args: &SuggestArgs,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    color: bool,
) -> std::io::Result<i32> {
    let Some(model) = load_model(&args.spec, &args.overlays, stderr, color)? else {
        return Ok(EXIT_ERROR);
    };
    let suggestion = crate::suggest::suggest(&model);
    let Some(out) = &args.out else {
        return write_out(stdout, &suggestion.text);
    };
    match crate::write::write_if_changed(out, &suggestion.text) {
        Ok(_) => {
            writeln!(
                stderr,
                "wrote {}: {} action(s){}; review it, then `idem audit {} --overlay {}` \
                 (and `idem workflow --overlay` for CI)",
                out.display(),
                suggestion.actions,
                if suggestion.unreachable.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {} left for a person (see its comments)",
                        suggestion.unreachable.len()
                    )
                },
                args.spec.display(),
                out.display()
            )?;
            Ok(EXIT_CLEAN)
        }
        Err(e) => {
            writeln!(stderr, "error: cannot write {}: {e}", out.display())?;
            Ok(EXIT_ERROR)
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct WorkflowArgs {
    /// The spec's path from the repository's root, as the workflow reads it.
    #[arg(long, value_name = "PATH", default_value = "openapi.yaml")]
    pub spec: String,
    /// The overlay every job applies to the spec (`idem suggest`'s), by its
    /// path from the repository's root.
    #[arg(long, value_name = "PATH")]
    pub overlay: Option<String>,
    /// Write the workflow to FILE (creating its directory) instead of
    /// printing it.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// With --out, replace a FILE that holds something else.
    #[arg(long, requires = "out")]
    pub force: bool,
}

/// The example workflow, as `docs/ci.md` describes it and CI checks it.
pub const WORKFLOW: &str = include_str!("../ci/idem.yml");

/// A path as a YAML scalar: plain where it can be, else double-quoted.
fn yaml_scalar(path: &str) -> String {
    let plain = !path.is_empty()
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
        && !path.starts_with(['-', '.']);
    if plain {
        path.to_owned()
    } else {
        // A YAML double-quoted scalar reads JSON's escapes.
        serde_json::Value::String(path.to_owned()).to_string()
    }
}

/// [`WORKFLOW`] reading the spec at `spec` with the overlay at `overlay`,
/// and installing the commit this `idem` was built from when it knows it.
pub fn workflow(spec: &str, overlay: Option<&str>) -> String {
    let mut text = WORKFLOW.replacen(
        "  IDEM_SPEC: openapi.yaml\n",
        &format!("  IDEM_SPEC: {}\n", yaml_scalar(spec)),
        1,
    );
    if let Some(overlay) = overlay {
        text = text.replacen(
            "  IDEM_OVERLAY: \"\"\n",
            &format!("  IDEM_OVERLAY: {}\n", yaml_scalar(overlay)),
            1,
        );
    }
    match BUILD_COMMIT {
        "" => text,
        commit => text.replacen(
            &format!("  IDEM_REV: {WORKFLOW_REV}\n"),
            &format!("  IDEM_REV: {commit}\n"),
            1,
        ),
    }
}

/// The commit this `idem` was built from, when it was built from a git
/// checkout; empty otherwise (a packaged crate).
pub const BUILD_COMMIT: &str = env!("IDEM_BUILD_COMMIT");

/// The revision [`WORKFLOW`] installs until `idem workflow` pins its own.
pub const WORKFLOW_REV: &str = "v0.1.0";

fn run_workflow(
    args: &WorkflowArgs,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> std::io::Result<i32> {
    if !std::path::Path::new(&args.spec).exists() {
        writeln!(
            stderr,
            "note: there is no {} here; the workflow reads IDEM_SPEC from the repository's root",
            args.spec
        )?;
    }
    if let Some(overlay) = &args.overlay
        && !std::path::Path::new(overlay).exists()
    {
        writeln!(
            stderr,
            "note: there is no {overlay} here; the workflow reads IDEM_OVERLAY from the repository's root"
        )?;
    }
    let text = workflow(&args.spec, args.overlay.as_deref());
    let Some(out) = &args.out else {
        return write_out(stdout, &text);
    };
    if !args.force
        && let Ok(old) = std::fs::read_to_string(out)
        && old != text
    {
        writeln!(
            stderr,
            "error: {} holds another workflow; pass --force to replace it",
            out.display()
        )?;
        return Ok(EXIT_ERROR);
    }
    match crate::write::write_if_changed(out, &text) {
        Ok(written) => {
            let what = if written { "wrote" } else { "unchanged:" };
            writeln!(stdout, "{what} {}", out.display())?;
            Ok(EXIT_CLEAN)
        }
        Err(e) => {
            writeln!(stderr, "error: cannot write {}: {e}", out.display())?;
            Ok(EXIT_ERROR)
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct DocsArgs {
    /// The OpenAPI document (YAML or JSON, 3.0 / 3.1 / 3.2).
    pub spec: PathBuf,
    /// Apply an OpenAPI Overlay 1.0 file to the spec as it loads; repeatable,
    /// applied in order.
    #[arg(long = "overlay", value_name = "FILE")]
    pub overlays: Vec<PathBuf>,
    /// Directory to write the pages into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Colour of the findings on stderr: auto, always or never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The API description (YAML or JSON; OpenAPI 3.0 / 3.1 / 3.2 or Swagger 2.0).
    pub spec: PathBuf,
    /// Apply an OpenAPI Overlay 1.0 file to the spec as it loads; repeatable,
    /// applied in order.
    #[arg(long = "overlay", value_name = "FILE")]
    pub overlays: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Fail on warnings too.
    #[arg(long, value_name = "LEVEL", value_parser = ["warnings"])]
    pub deny: Option<String>,
    /// Report findings recorded in FILE as known; fail only on new ones.
    #[arg(long, value_name = "FILE", conflicts_with = "write_baseline")]
    pub baseline: Option<PathBuf>,
    /// Record today's findings in FILE and exit 0.
    #[arg(long, value_name = "FILE")]
    pub write_baseline: Option<PathBuf>,
    /// Colour: auto (on a terminal, unless NO_COLOR is set), always or never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Instead of each finding, print counts per rule and the operations
    /// with the most findings (human format).
    #[arg(long)]
    pub summary: bool,
}

#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// The OpenAPI document.
    pub spec: PathBuf,
    /// Apply an OpenAPI Overlay 1.0 file to the spec as it loads; repeatable,
    /// applied in order.
    #[arg(long = "overlay", value_name = "FILE")]
    pub overlays: Vec<PathBuf>,
    /// Where to write the crate (`Cargo.toml`, `src/lib.rs`).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Generate the typed client SDK. With none of --client, --server and
    /// --docs: all three (client, server and docs page).
    #[arg(long)]
    pub client: bool,
    /// Generate the server scaffolding: the `Api` trait and the axum
    /// `router` that runs keyed operations through the key protocol.
    #[arg(long)]
    pub server: bool,
    /// Write the integrator docs page to DIR/docs/.
    #[arg(long)]
    pub docs: bool,
    /// The crate's package name (default: from the spec's title).
    #[arg(long, value_name = "CRATE")]
    pub name: Option<String>,
    /// Depend on the `idem-runtime` at PATH. By default the crate depends on
    /// the runtime of the commit this `idem` was built from, in its clone's
    /// `origin` repository (`{ git = …, rev = … }`), when it was built from
    /// a clone; on the checkout beside it when that has no `origin`; and on
    /// the published runtime of this version otherwise.
    #[arg(long, value_name = "PATH", conflicts_with = "published_runtime")]
    pub runtime_path: Option<PathBuf>,
    /// Depend on the published `idem-runtime` of this version even when this
    /// `idem` was built from a checkout (for a crate that others build).
    #[arg(long)]
    pub published_runtime: bool,
    /// Generate only the operations with these tags (comma-separated or
    /// repeated); with `--operations`, those either chooses. The audit still
    /// covers the whole spec.
    #[arg(long = "tags", value_name = "TAG", value_delimiter = ',')]
    pub tags: Vec<String>,
    /// Generate only these operations: operationIds, or path prefixes
    /// starting with `/` (`/v1/charges` takes `/v1/charges/{id}` too).
    #[arg(long = "operations", value_name = "ID|/PATH", value_delimiter = ',')]
    pub operations: Vec<String>,
    /// Generate even when the audit reports errors.
    #[arg(long)]
    pub allow_findings: bool,
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// Parse `args` and run; returns the exit code.
pub fn run<I, T>(args: I, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_with(args, stdout, stderr, Terminals::default())
}

/// [`run`], colouring what goes to a terminal under `--color auto`.
pub fn run_with<I, T>(
    args: I,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    terminals: Terminals,
) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                EXIT_ERROR
            } else {
                EXIT_CLEAN
            };
            let text = e.render().to_string();
            let _ = if e.use_stderr() {
                stderr.write_all(text.as_bytes())
            } else {
                stdout.write_all(text.as_bytes())
            };
            return code;
        }
    };
    let result = match cli.command {
        Command::Audit(args) => run_audit(&args, stdout, stderr, terminals),
        Command::Generate(args) => run_generate(&args, stdout, stderr, terminals),
        Command::Docs(args) => run_docs(&args, stdout, stderr, terminals),
        Command::Workflow(args) => run_workflow(&args, stdout, stderr),
        Command::Suggest(args) => run_suggest(
            &args,
            stdout,
            stderr,
            use_color(ColorChoice::Auto, terminals.stderr),
        ),
        Command::Probe(args) => crate::probe::cli::run(&args, stdout, stderr, terminals),
        Command::Keys(args) => Ok(keys::run(&args, stdout, stderr)),
        Command::Rules => {
            let mut text = String::new();
            for r in RULES {
                text.push_str(&format!(
                    "{}  {:<42} {:<8} {}\n",
                    r.code,
                    r.slug,
                    r.severity.as_str(),
                    r.summary
                ));
            }
            write_out(stdout, &text)
        }
        Command::Explain { rule } => match Rule::find(&rule) {
            Some(r) => write_out(stdout, &explain(r)),
            None if crate::probe::Check::find(&rule).is_some() => write_out(
                stdout,
                &crate::probe::Check::find(&rule)
                    .map(crate::probe::Check::page)
                    .unwrap_or_default(),
            ),
            None => {
                let names: Vec<&str> = RULES
                    .iter()
                    .map(|r| r.slug)
                    .chain(crate::probe::CHECKS.iter().map(|c| c.slug))
                    .collect();
                let hint = crate::vocab::did_you_mean(&rule, &names)
                    .map(|s| format!("; did you mean `{s}`?"))
                    .unwrap_or_default();
                let _ = writeln!(
                    stderr,
                    "error: no rule `{rule}`{hint} (`idem rules` lists them)"
                );
                Ok(EXIT_ERROR)
            }
        },
    };
    result.unwrap_or_else(|e| {
        let _ = writeln!(stderr, "error: cannot write output: {e}");
        EXIT_ERROR
    })
}

fn write_out(out: &mut dyn Write, text: &str) -> std::io::Result<i32> {
    out.write_all(text.as_bytes())?;
    Ok(EXIT_CLEAN)
}

/// A rule's page as `idem explain` prints it.
pub fn explain(rule: &Rule) -> String {
    format!(
        "# {} ({})\n\nDefault severity: {}.\n\n{}",
        rule.slug,
        rule.code,
        rule.severity.as_str(),
        rule.docs
    )
}

/// `idem docs`: findings go to stderr as `idem audit` renders them; the
/// pages are written whatever they say.
fn run_docs(
    args: &DocsArgs,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    terminals: Terminals,
) -> std::io::Result<i32> {
    let color = use_color(args.color, terminals.stderr);
    let Some(model) = load_model(&args.spec, &args.overlays, stderr, color)? else {
        return Ok(EXIT_ERROR);
    };
    let report = audit::audit(&model);
    if !report.diagnostics.is_empty() {
        stderr.write_all(output::report(&model, &report, Format::Human, color).as_bytes())?;
    }
    let pages = match crate::docs::render(&model) {
        Ok(pages) => pages,
        Err(e) => {
            writeln!(stderr, "error: {e}")?;
            return Ok(EXIT_ERROR);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        writeln!(stderr, "error: cannot create {}: {e}", args.out.display())?;
        return Ok(EXIT_ERROR);
    }
    for (name, contents) in pages.files() {
        let path = args.out.join(name);
        if let Err(e) = std::fs::write(&path, contents) {
            writeln!(stderr, "error: cannot write {}: {e}", path.display())?;
            return Ok(EXIT_ERROR);
        }
        writeln!(stdout, "wrote {}", path.display())?;
    }
    Ok(EXIT_CLEAN)
}

fn run_audit(
    args: &AuditArgs,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    terminals: Terminals,
) -> std::io::Result<i32> {
    if args.summary && args.format != Format::Human {
        writeln!(
            stderr,
            "error: `--summary` shapes the human report; `--format {}` always carries every finding",
            match args.format {
                Format::Json => "json",
                Format::Sarif => "sarif",
                Format::Github => "github",
                Format::Human => "human",
            }
        )?;
        return Ok(EXIT_ERROR);
    }
    let color = use_color(args.color, terminals.stdout);
    let err_color = use_color(args.color, terminals.stderr);
    let Some(model) = load_model(&args.spec, &args.overlays, stderr, err_color)? else {
        return Ok(EXIT_ERROR);
    };
    let mut report = audit::audit(&model);
    if let Some(path) = &args.write_baseline {
        if let Err(e) = Baseline::from_report(&report).write(path) {
            writeln!(stderr, "error: {e}")?;
            return Ok(EXIT_ERROR);
        }
        writeln!(
            stderr,
            "recorded {} finding(s) in {}",
            report.diagnostics.len(),
            path.display()
        )?;
        return Ok(EXIT_CLEAN);
    }
    if let Some(path) = &args.baseline {
        match Baseline::read(path) {
            Ok(b) => b.apply(&mut report),
            Err(e) => {
                writeln!(stderr, "error: {e}")?;
                return Ok(EXIT_ERROR);
            }
        }
    }
    let text = if args.summary {
        output::digest(&report)
    } else {
        output::report(&model, &report, args.format, color)
    };
    stdout.write_all(text.as_bytes())?;
    let threshold = if args.deny.is_some() {
        Severity::Warning
    } else {
        Severity::Error
    };
    let failing = report.diagnostics.iter().any(|d| d.severity >= threshold);
    Ok(if failing { EXIT_FINDINGS } else { EXIT_CLEAN })
}

fn run_generate(
    args: &GenerateArgs,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    terminals: Terminals,
) -> std::io::Result<i32> {
    let err_color = use_color(args.color, terminals.stderr);
    // None of the three: all three.
    let everything = !args.client && !args.server && !args.docs;
    let (client, server, docs) = (
        args.client || everything,
        args.server || everything,
        args.docs || everything,
    );
    let started = std::time::Instant::now();
    let mut model = match load_model(&args.spec, &args.overlays, stderr, err_color)? {
        Some(model) => model,
        None => return Ok(EXIT_ERROR),
    };
    let report = audit::audit(&model);
    let errors = report
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    if errors > 0 {
        stderr.write_all(output::findings_brief(&model, &report, err_color).as_bytes())?;
        if !args.allow_findings {
            writeln!(
                stderr,
                "error: {errors} audit error(s), nothing generated: fix the spec, or describe it with `--overlay FILE`, \
                 or waive a rule with `x-idempotency: {{ allow: {{ RULE: \"reason\" }} }}`, \
                 or, for an API you do not own, pass `--allow-findings`"
            )?;
            return Ok(EXIT_FINDINGS);
        }
    }
    let selection = crate::model::Selection {
        tags: args.tags.clone(),
        operations: args.operations.clone(),
    };
    if let Err(e) = selection.narrow(&mut model) {
        writeln!(stderr, "error: {e}")?;
        return Ok(EXIT_ERROR);
    }
    let mut files = Vec::new();
    let mut lines = 0;
    if docs {
        match crate::docs::render(&model) {
            Ok(pages) => {
                files.extend(pages.files().iter().map(|(name, text)| crate::write::File {
                    path: std::path::Path::new("docs").join(name),
                    contents: (*text).to_owned(),
                }))
            }
            Err(e) => {
                writeln!(stderr, "error: {e}")?;
                return Ok(EXIT_ERROR);
            }
        }
    }
    let generated = if client || server {
        match crate::generate::generate(
            &model,
            &crate::generate::Options {
                client,
                server,
                // A crate of its own: its groups are its cargo features.
                feature_groups: true,
            },
        ) {
            Ok(g) => {
                for note in &g.notes {
                    writeln!(stderr, "warning: {note}")?;
                }
                Some(g)
            }
            Err(e) => {
                writeln!(stderr, "error: {e}")?;
                return Ok(EXIT_ERROR);
            }
        }
    } else {
        None
    };
    let name = args.name.clone().unwrap_or_else(|| {
        let stem = args
            .spec
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let base = if model.title.trim().is_empty() {
            stem
        } else {
            model.title.clone()
        };
        crate::write::package_name(&base)
    });
    let runtime = match (&args.runtime_path, args.published_runtime) {
        (Some(path), _) => {
            if let Err(why) = crate::write::check_runtime(path) {
                writeln!(stderr, "error: --runtime-path {}: {why}", path.display())?;
                return Ok(EXIT_ERROR);
            }
            crate::write::Runtime::Path(crate::write::runtime_path(path, &args.out))
        }
        (None, false) => match (crate::write::runtime_git(), crate::write::runtime_beside()) {
            (Some(git), _) => {
                if let crate::write::Runtime::Git { url, .. } = &git
                    && url.starts_with("file://")
                {
                    writeln!(
                        stderr,
                        "note: idem-runtime comes from {url}, a path on this machine (the origin of the \
                         clone idem was installed from): teammates and CI cannot fetch it; put the URL \
                         your team reaches idem at in {}'s idem-runtime line, keeping its rev",
                        args.out.join("Cargo.toml").display()
                    )?;
                }
                git
            }
            (None, Some(path)) => crate::write::Runtime::Path(path),
            (None, None) => crate::write::Runtime::Registry,
        },
        (None, true) => crate::write::Runtime::Registry,
    };
    if let Some(generated) = &generated {
        let crate_files = crate::write::crate_files(generated, &name, &model.title, &runtime);
        // The lines of the file as written, header and attributes included.
        lines = crate_files
            .iter()
            .filter(|f| f.path.extension().is_some_and(|e| e == "rs"))
            .map(|f| f.contents.lines().count())
            .sum();
        files.extend(crate_files);
    }
    let mut written = 0;
    for file in &files {
        let path = args.out.join(&file.path);
        match crate::write::write_if_changed(&path, &file.contents) {
            Ok(true) => written += 1,
            Ok(false) => {}
            Err(e) => {
                writeln!(stderr, "error: cannot write {}: {e}", path.display())?;
                return Ok(EXIT_ERROR);
            }
        }
    }
    writeln!(
        stdout,
        "generated {name} in {}: {} operations, {} lines, {} file(s) written, {:.2}s",
        args.out.display(),
        model.operations.len(),
        lines,
        written,
        started.elapsed().as_secs_f64()
    )?;
    Ok(EXIT_CLEAN)
}
