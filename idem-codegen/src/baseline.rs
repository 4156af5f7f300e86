//! Baselines: adopt idem on a large existing API by recording today's
//! findings; recorded findings are reported as known and do not fail the run,
//! new ones do.
//!
//! A finding is identified by its rule and operation (method and path), or by
//! its rule and message when it concerns the document as a whole — never by
//! line number, so editing the file does not resurrect recorded findings.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::audit::{Diagnostic, Report, count};

/// The file format.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Baseline {
    /// Format version; 1.
    pub idem_baseline: u32,
    pub findings: Vec<Entry>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq, Hash, Clone, PartialOrd, Ord)]
pub struct Entry {
    pub rule: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Only for findings about the whole document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("cannot read baseline `{path}`: {reason}")]
    Read { path: String, reason: String },
    #[error("baseline `{path}` is not valid: {reason}")]
    Invalid { path: String, reason: String },
    #[error("cannot write baseline `{path}`: {reason}")]
    Write { path: String, reason: String },
}

fn entry(d: &Diagnostic) -> Entry {
    match &d.operation {
        Some(op) => Entry {
            rule: d.rule.to_owned(),
            method: Some(op.method.as_str().to_owned()),
            path: Some(op.path.clone()),
            message: None,
        },
        None => Entry {
            rule: d.rule.to_owned(),
            method: None,
            path: None,
            message: Some(d.message.clone()),
        },
    }
}

impl Baseline {
    pub fn from_report(report: &Report) -> Baseline {
        let mut findings: Vec<Entry> = report.diagnostics.iter().map(entry).collect();
        findings.sort();
        Baseline {
            idem_baseline: 1,
            findings,
        }
    }

    pub fn read(path: &Path) -> Result<Baseline, BaselineError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| BaselineError::Read {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| BaselineError::Invalid {
            path: shown,
            reason: e.to_string(),
        })
    }

    pub fn write(&self, path: &Path) -> Result<(), BaselineError> {
        let mut text = serde_json::to_string_pretty(self).map_err(|e| BaselineError::Write {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        text.push('\n');
        std::fs::write(path, text).map_err(|e| BaselineError::Write {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// Move findings recorded here from `report.diagnostics` to `report.known`.
    /// Each recorded entry absorbs one finding, so a second new finding of the
    /// same kind on the same operation still fails.
    pub fn apply(&self, report: &mut Report) {
        let mut budget: HashMap<&Entry, usize> = HashMap::new();
        for e in &self.findings {
            *budget.entry(e).or_default() += 1;
        }
        let mut fresh = Vec::new();
        for d in std::mem::take(&mut report.diagnostics) {
            let key = entry(&d);
            match budget.get_mut(&key) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    report.known.push(d);
                }
                _ => fresh.push(d),
            }
        }
        report.diagnostics = fresh;
        report.summary.baselined = report.known.len();
        count(&mut report.summary, &report.diagnostics);
    }
}
