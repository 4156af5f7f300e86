//! What the subcommands share: exit codes, colour, and loading a spec with
//! its load errors and warnings printed.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use crate::audit;
use crate::load::Document;
use crate::model::Model;
use crate::output;

/// Exit code: nothing at or above the threshold.
pub const EXIT_CLEAN: i32 = 0;
/// Exit code: findings at or above the threshold.
pub const EXIT_FINDINGS: i32 = 1;
/// Exit code: the spec could not be read, or the call is wrong.
pub const EXIT_ERROR: i32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// Whether the streams [`run_with`](super::run_with) writes to are terminals: what
/// `--color auto` colours. [`run`](super::run) assumes neither is (its writers may be
/// buffers), the binary asks the process's own streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Terminals {
    /// Standard output is a terminal.
    pub stdout: bool,
    /// Standard error is a terminal.
    pub stderr: bool,
}

impl Terminals {
    /// The process's own standard output and error.
    pub fn detect() -> Self {
        Terminals {
            stdout: std::io::stdout().is_terminal(),
            stderr: std::io::stderr().is_terminal(),
        }
    }
}

pub(crate) fn use_color(choice: ColorChoice, stream_is_terminal: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => stream_is_terminal && std::env::var_os("NO_COLOR").is_none(),
    }
}

/// Load and model `spec`; on failure, print the `file:line:column` error
/// and return `None` (exit code 2).
pub(crate) fn load_model(
    spec: &std::path::Path,
    overlays: &[PathBuf],
    stderr: &mut dyn Write,
    color: bool,
) -> std::io::Result<Option<Model>> {
    let built = Document::load_overlaid(spec, overlays, &crate::tree::Limits::default())
        .and_then(|document| crate::model::build(document, &audit::rule_names()));
    match built {
        Ok(model) => {
            for warning in &model.document.warnings {
                stderr.write_all(
                    output::load_warning(&model.document.sources, warning, color).as_bytes(),
                )?;
            }
            Ok(Some(model))
        }
        Err(failure) => {
            stderr.write_all(
                output::load_error(&failure.sources, &failure.error, color).as_bytes(),
            )?;
            Ok(None)
        }
    }
}
