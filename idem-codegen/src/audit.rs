//! The audit: rules over the model. Each rule lives in one file under
//! `rules/` with its documentation, messages and check; [`RULES`] is the one
//! table of stable codes.

use crate::model::{Method, Model, Operation};
use crate::source::Pos;
use crate::vocab::Waiver;

pub mod rules;

pub use rules::RULES;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// A rule: stable code, slug, default severity, its page, and its check.
#[derive(Debug)]
pub struct Rule {
    /// `IDEM001`…; never reused.
    pub code: &'static str,
    /// Kebab-case name of the smell.
    pub slug: &'static str,
    pub severity: Severity,
    /// One line for `idem rules`.
    pub summary: &'static str,
    /// The page `idem explain` prints (What it does / Why is this bad? /
    /// Example / Use instead).
    pub docs: &'static str,
    pub(crate) check: fn(&Model, &mut Findings<'_>),
}

impl Rule {
    /// Find a rule by code or slug (case-insensitive code).
    pub fn find(name: &str) -> Option<&'static Rule> {
        RULES
            .iter()
            .copied()
            .find(|r| r.slug == name || r.code.eq_ignore_ascii_case(name))
    }
}

/// The operation a finding is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationRef {
    pub method: Method,
    pub path: String,
    pub operation_id: Option<String>,
}

/// One finding, ready for any front end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: &'static str,
    pub rule: &'static str,
    pub severity: Severity,
    pub message: String,
    pub help: Option<String>,
    pub pos: Pos,
    pub operation: Option<OperationRef>,
    /// For a finding decided by the spec's words: the words and where they
    /// stand.
    pub evidence: Option<crate::model::Evidence>,
}

/// Where a rule's check puts what it finds.
#[derive(Debug)]
pub struct Findings<'r> {
    rule: &'r Rule,
    root_waivers: &'r [Waiver],
    out: Vec<Diagnostic>,
    waived: usize,
}

impl Findings<'_> {
    fn waives(&self, waivers: &[Waiver]) -> bool {
        waivers
            .iter()
            .any(|w| w.rule == self.rule.slug || w.rule.eq_ignore_ascii_case(self.rule.code))
    }

    /// A finding about one operation.
    pub fn operation(&mut self, op: &Operation, pos: Pos, message: String, help: Option<String>) {
        let target = OperationRef {
            method: op.method,
            path: op.path.clone(),
            operation_id: op.operation_id.clone(),
        };
        // The operation's waivers include the root's.
        self.push(&op.waivers, pos, message, help, Some(target), None);
    }

    /// A finding about one operation, decided by what its words say.
    pub fn operation_evidence(
        &mut self,
        op: &Operation,
        pos: Pos,
        message: String,
        help: Option<String>,
        evidence: Option<&crate::model::Evidence>,
    ) {
        let target = OperationRef {
            method: op.method,
            path: op.path.clone(),
            operation_id: op.operation_id.clone(),
        };
        self.push(
            &op.waivers,
            pos,
            message,
            help,
            Some(target),
            evidence.cloned(),
        );
    }

    /// A finding about the document as a whole.
    pub fn document(&mut self, pos: Pos, message: String, help: Option<String>) {
        self.push(self.root_waivers, pos, message, help, None, None);
    }

    fn push(
        &mut self,
        waivers: &[Waiver],
        pos: Pos,
        message: String,
        help: Option<String>,
        operation: Option<OperationRef>,
        evidence: Option<crate::model::Evidence>,
    ) {
        if self.waives(waivers) {
            self.waived += 1;
            return;
        }
        self.out.push(Diagnostic {
            code: self.rule.code,
            rule: self.rule.slug,
            severity: self.rule.severity,
            message,
            help,
            pos,
            operation,
            evidence,
        });
    }
}

/// Counts shown at the end of every report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub operations: usize,
    pub state_changing: usize,
    pub keyed: usize,
    pub documented_unsafe: usize,
    pub errors: usize,
    pub warnings: usize,
    /// Findings waived by `allow:`.
    pub waived: usize,
    /// Findings already recorded in the baseline.
    pub baselined: usize,
}

/// The audit's result.
#[derive(Debug)]
pub struct Report {
    /// Findings that count, sorted by file and position.
    pub diagnostics: Vec<Diagnostic>,
    /// Findings recorded in the baseline: shown as known, never failing.
    pub known: Vec<Diagnostic>,
    pub summary: Summary,
}

/// Run every rule over `model`, apply `allow:` waivers, sort.
pub fn audit(model: &Model) -> Report {
    let mut diagnostics = Vec::new();
    let mut waived = 0;
    for rule in RULES {
        let mut findings = Findings {
            rule,
            root_waivers: &model.root.idempotency.allow,
            out: Vec::new(),
            waived: 0,
        };
        (rule.check)(model, &mut findings);
        waived += findings.waived;
        diagnostics.extend(findings.out);
    }
    diagnostics.sort_by(|a, b| (a.pos, a.code, &a.message).cmp(&(b.pos, b.code, &b.message)));
    diagnostics.dedup_by(|a, b| a.pos == b.pos && a.code == b.code && a.message == b.message);
    let mut summary = Summary {
        operations: model.operations.len(),
        state_changing: model
            .operations
            .iter()
            .filter(|o| o.is_state_changing())
            .count(),
        keyed: model
            .operations
            .iter()
            .filter(|o| o.class == crate::model::RetryClass::Keyed)
            .count(),
        documented_unsafe: model
            .operations
            .iter()
            .filter(|o| o.class == crate::model::RetryClass::UnsafeDocumented)
            .count(),
        waived,
        ..Summary::default()
    };
    count(&mut summary, &diagnostics);
    Report {
        diagnostics,
        known: Vec::new(),
        summary,
    }
}

/// Recount errors and warnings after the diagnostics changed.
pub fn count(summary: &mut Summary, diagnostics: &[Diagnostic]) {
    summary.errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    summary.warnings = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .count();
}

/// Every slug and code, for `allow:` validation.
pub fn rule_names() -> Vec<&'static str> {
    RULES
        .iter()
        .flat_map(|r| [r.slug, r.code])
        .filter(|n| !matches!(*n, "invalid-extension" | "IDEM007"))
        .collect()
}
