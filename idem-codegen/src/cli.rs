//! The `idem` command line. `main.rs` is a shim over [`run`], so tests and
//! `build.rs` call the same code.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::audit::{self, RULES, Rule, Severity};
use crate::baseline::Baseline;
use crate::load::Document;
use crate::render::{self, Format};

/// Exit code: nothing at or above the threshold.
pub const EXIT_CLEAN: i32 = 0;
/// Exit code: findings at or above the threshold.
pub const EXIT_FINDINGS: i32 = 1;
/// Exit code: the spec could not be read, or the call is wrong.
pub const EXIT_ERROR: i32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "idem",
    version,
    about = "Make retries safe by construction: audit an OpenAPI document's retry contract"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Audit every operation of SPEC; exit 1 on findings at or above the threshold.
    Audit(AuditArgs),
    /// List the rules.
    Rules,
    /// Print a rule's page, by code (IDEM001) or slug (unkeyed-unsafe-write).
    Explain {
        /// Code or slug.
        rule: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The API description (YAML or JSON; OpenAPI 3.0 / 3.1 / 3.2 or Swagger 2.0).
    pub spec: PathBuf,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// Parse `args` and run; returns the exit code.
pub fn run<I, T>(args: I, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32
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
        Command::Audit(args) => run_audit(&args, stdout, stderr),
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
            None => {
                let names: Vec<&str> = RULES.iter().map(|r| r.slug).collect();
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

fn use_color(choice: ColorChoice, stream_is_terminal: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => stream_is_terminal && std::env::var_os("NO_COLOR").is_none(),
    }
}

fn run_audit(
    args: &AuditArgs,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
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
    let color = use_color(args.color, std::io::stdout().is_terminal());
    let err_color = use_color(args.color, std::io::stderr().is_terminal());
    let document = match Document::load(&args.spec) {
        Ok(d) => d,
        Err(failure) => {
            stderr.write_all(
                render::load_error(&failure.sources, &failure.error, err_color).as_bytes(),
            )?;
            return Ok(EXIT_ERROR);
        }
    };
    let names = audit::rule_names();
    let model = match crate::model::build(document, &names) {
        Ok(m) => m,
        Err(failure) => {
            stderr.write_all(
                render::load_error(&failure.sources, &failure.error, err_color).as_bytes(),
            )?;
            return Ok(EXIT_ERROR);
        }
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
        render::digest(&report)
    } else {
        render::report(&model, &report, args.format, color)
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
