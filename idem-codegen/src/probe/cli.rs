//! `idem probe` on the command line: arguments checked, consent asked for,
//! the plan announced, the run driven with a progress line on a terminal,
//! and the report written in the chosen format.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::run::{Progress, RunReport};
use super::{Settings, plan, report};
use crate::cli::shared::{
    ColorChoice, EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, Terminals, load_model, use_color,
};

#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// The API description the service is held to.
    pub spec: PathBuf,
    /// Apply an OpenAPI Overlay 1.0 file to the spec as it loads; repeatable,
    /// applied in order.
    #[arg(long = "overlay", value_name = "FILE")]
    pub overlays: Vec<PathBuf>,
    /// Where the service runs (`https://staging.example.com`); paths from
    /// the spec are appended to it.
    #[arg(long, value_name = "URL")]
    pub base_url: String,
    /// Probe only this operation (operationId, or `METHOD /path`); repeatable.
    #[arg(long = "operation", value_name = "ID")]
    pub operations: Vec<String>,
    /// A header every request carries, such as the caller's credential; repeatable.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Another caller's identity, which replaces the header of the same name
    /// for the caller-isolation check.
    #[arg(long, value_name = "NAME: VALUE")]
    pub second_caller: Option<String>,
    /// The value of a path, query, header or cookie parameter, by its name
    /// in the spec (`--param account_id=acct_123`); repeatable.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// The request body of operation ID, from FILE; repeatable.
    #[arg(long = "body", value_name = "ID=@FILE")]
    pub bodies: Vec<String>,
    /// Identical requests sent at once by the concurrency check.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u16).range(2..=1000))]
    pub concurrency: u16,
    /// Seconds each request may take.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub timeout: u64,
    #[arg(long, value_enum, default_value_t = ProbeFormat::Human)]
    pub format: ProbeFormat,
    /// Print the plan (operations, checks, request counts) and send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Consent to the state-changing requests the probe sends.
    #[arg(long)]
    pub allow_writes: bool,
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// How `idem probe` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeFormat {
    Human,
    Json,
    Sarif,
    Junit,
}

/// Run `idem probe`; returns the exit code.
pub fn run(
    args: &ProbeArgs,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    terminals: Terminals,
) -> std::io::Result<i32> {
    let color = use_color(args.color, terminals.stdout);
    let err_color = use_color(args.color, terminals.stderr);
    let Some(model) = load_model(&args.spec, &args.overlays, stderr, err_color)? else {
        return Ok(EXIT_ERROR);
    };
    let mut settings = Settings {
        concurrency: usize::from(args.concurrency),
        timeout: Duration::from_secs(args.timeout),
        ..Settings::default()
    };
    for header in &args.headers {
        match parse_header(header) {
            Ok(h) => settings.headers.push(h),
            Err(e) => {
                writeln!(stderr, "error: `--header {header}`: {e}")?;
                return Ok(EXIT_ERROR);
            }
        }
    }
    if let Some(second) = &args.second_caller {
        match parse_header(second) {
            Ok(h) => settings.second_caller = Some(h),
            Err(e) => {
                writeln!(stderr, "error: `--second-caller {second}`: {e}")?;
                return Ok(EXIT_ERROR);
            }
        }
    }
    for param in &args.params {
        match param.split_once('=') {
            Some((name, value)) if !name.is_empty() => {
                settings.params.push((name.to_owned(), value.to_owned()));
            }
            _ => {
                writeln!(stderr, "error: `--param {param}`: expected `NAME=VALUE`")?;
                return Ok(EXIT_ERROR);
            }
        }
    }
    let mut bodies = Vec::new();
    for body in &args.bodies {
        match read_body(body) {
            Ok(b) => bodies.push(b),
            Err(e) => {
                writeln!(stderr, "error: `--body {body}`: {e}")?;
                return Ok(EXIT_ERROR);
            }
        }
    }
    let plan = match plan(&model, &args.operations, &bodies, &settings) {
        Ok(plan) => plan,
        Err(e) => {
            writeln!(stderr, "error: {e}")?;
            return Ok(EXIT_ERROR);
        }
    };
    if args.dry_run {
        stdout.write_all(report::plan_text(&model, &plan, &args.base_url).as_bytes())?;
        return Ok(EXIT_CLEAN);
    }
    if let Err(e) = super::run::check_base_url(&args.base_url) {
        writeln!(stderr, "error: {e}")?;
        return Ok(EXIT_ERROR);
    }
    if !args.allow_writes {
        writeln!(
            stderr,
            "error: the probe sends up to {} state-changing requests to {}; pass `--allow-writes` to send them, or `--dry-run` to see the plan",
            plan.requests(),
            args.base_url
        )?;
        return Ok(EXIT_ERROR);
    }
    writeln!(
        stderr,
        "probe: up to {} to {} ({} operation{}; none is retried, each times out after {}s)",
        report::requests(plan.requests()),
        args.base_url,
        plan.targets.len(),
        if plan.targets.len() == 1 { "" } else { "s" },
        args.timeout
    )?;
    let show_progress = terminals.stderr && args.format == ProbeFormat::Human;
    let result = drive(
        &model,
        &plan,
        &args.base_url,
        &settings,
        stderr,
        show_progress,
    )?;
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            writeln!(stderr, "error: {e}")?;
            return Ok(EXIT_ERROR);
        }
    };
    let text = match args.format {
        ProbeFormat::Human => report::human(&model, &plan, &report, color),
        ProbeFormat::Json => pretty(&report::json_report(&model, &plan, &report)),
        ProbeFormat::Sarif => pretty(&report::sarif(
            &model,
            &report,
            &crate::output::sarif_root(),
        )),
        ProbeFormat::Junit => report::junit(&model, &report),
    };
    stdout.write_all(text.as_bytes())?;
    if args.format != ProbeFormat::Human {
        writeln!(stderr, "{}", report::summary_line(&report))?;
    }
    let clean = report.count("failed") == 0 && report.count("undecided") == 0;
    Ok(if clean { EXIT_CLEAN } else { EXIT_FINDINGS })
}

fn pretty(value: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// Run the probe on a runtime of its own; on a terminal, a progress line
/// once the run has taken a second.
fn drive(
    model: &crate::model::Model,
    plan: &super::Plan,
    base_url: &str,
    settings: &Settings,
    stderr: &mut dyn Write,
    show_progress: bool,
) -> std::io::Result<Result<RunReport, super::run::RunError>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let planned = plan.requests();
    runtime.block_on(async {
        let run = super::run::run(model, plan, base_url, settings, progress.clone());
        tokio::pin!(run);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut shown = false;
        loop {
            tokio::select! {
                result = &mut run => {
                    if shown {
                        write!(stderr, "\r\x1b[2K")?;
                    }
                    return Ok(result);
                }
                _ = tick.tick() => {
                    if show_progress && started.elapsed() >= Duration::from_secs(1) {
                        let doing = progress.doing.lock().map(|d| d.clone()).unwrap_or_default();
                        let sent = progress.sent.load(Ordering::Relaxed);
                        write!(stderr, "\r\x1b[2Kprobe: {doing} · {sent}/{planned} requests")?;
                        stderr.flush()?;
                        shown = true;
                    }
                }
            }
        }
    })
}

/// `Name: value`, both valid in HTTP.
fn parse_header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or("expected `NAME: VALUE`, with a colon")?;
    let name = name.trim();
    let value = value.trim();
    reqwest::header::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`{name}` is not a header name"))?;
    reqwest::header::HeaderValue::from_str(value)
        .map_err(|_| "the value holds characters a header cannot carry".to_owned())?;
    Ok((name.to_owned(), value.to_owned()))
}

/// `ID=@FILE`, read.
fn read_body(text: &str) -> Result<(String, Vec<u8>), String> {
    let (id, file) = text.split_once("=@").ok_or("expected `OPERATION=@FILE`")?;
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read `{file}`: {e}"))?;
    Ok((id.to_owned(), bytes))
}
