//! A probe's plan and findings, as people and CI tools read them: rustc-style
//! text, JSON, SARIF (results placed on each operation in the spec) and
//! JUnit XML.

use std::fmt::Write as _;
use std::path::Path;

use annotate_snippets::Level;
use serde_json::{Value as Json, json};

use super::run::{RunReport, Verdict};
use super::{CHECKS, Plan};
use crate::model::Model;
use crate::output::{Message, snippet_message};

/// The plan, as `--dry-run` prints it and as a run announces it.
pub fn plan_text(model: &Model, plan: &Plan, base_url: &str) -> String {
    let mut out = String::new();
    for target in &plan.targets {
        let op = &model.operations[target.index];
        let _ = writeln!(
            out,
            "{} ({} {}): {}",
            target.label,
            op.method,
            op.path,
            requests(target.requests())
        );
        match &target.body {
            Ok(body) => {
                let _ = writeln!(out, "  body: {}", body.source);
            }
            Err(reason) => {
                let _ = writeln!(out, "  skipped: {reason}");
            }
        }
        for (check, planned) in &target.checks {
            match planned {
                Ok(n) => {
                    let _ = writeln!(out, "  {} {:<26} {}", check.code, check.slug, requests(*n));
                }
                Err(reason) if target.body.is_ok() => {
                    let _ = writeln!(out, "  {} {:<26} skipped: {reason}", check.code, check.slug);
                }
                Err(_) => {}
            }
        }
    }
    for n in &plan.not_sent {
        let _ = writeln!(
            out,
            "{}: never sent ({}: a duplicate would repeat its effect)",
            n.label, n.class
        );
    }
    let _ = writeln!(
        out,
        "{} to {base_url} at most, none of them retried",
        requests(plan.requests())
    );
    out
}

/// `1 request`, `49 requests`.
pub fn requests(n: usize) -> String {
    if n == 1 {
        "1 request".to_owned()
    } else {
        format!("{n} requests")
    }
}

/// The human report: each failed or undecided check as a rustc-style
/// message on its operation, then a table of every check and a summary.
pub fn human(model: &Model, plan: &Plan, report: &RunReport, color: bool) -> String {
    let sources = &model.document.sources;
    let mut out = String::new();
    for target in &report.targets {
        let op = &model.operations[target.index];
        for o in &target.outcomes {
            let level = match &o.verdict {
                Verdict::Failed(_) => Level::ERROR,
                Verdict::Undecided(_) => Level::WARNING,
                _ => continue,
            };
            let title = format!(
                "{} {}: {}",
                op.method,
                op.path,
                o.verdict.reason().unwrap_or_default()
            );
            let mut notes = Vec::new();
            if let Some(basis) = &o.basis {
                notes.push(basis.clone());
            }
            if let Some(tries) = &o.tries {
                notes.push(format!("tries: {tries}"));
            }
            for e in &o.evidence {
                let status = e
                    .status
                    .map_or_else(|| "no answer".to_owned(), |s| s.to_string());
                notes.push(format!("{} → {status}: {}", e.request, e.answer));
            }
            notes.push(format!(
                "`idem explain {}` says what this check holds",
                o.check.code
            ));
            out.push_str(&snippet_message(
                sources,
                Message {
                    level,
                    id: Some(o.check.code),
                    title: &title,
                    pos: Some(op.pos),
                    label: o.check.slug,
                    notes: &notes,
                },
                color,
            ));
            out.push('\n');
        }
    }
    for target in &report.targets {
        let _ = writeln!(out, "{}", target.label);
        for o in &target.outcomes {
            let mut reason = match &o.verdict {
                Verdict::Skipped(r) => format!(" ({r})"),
                Verdict::Held => o
                    .tries
                    .as_ref()
                    .map(|t| format!(" ({t})"))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            if o.basis.is_some() {
                reason.push_str(" [decided from effects]");
            }
            let _ = writeln!(
                out,
                "  {:<9} {} {}{reason}",
                o.verdict.as_str(),
                o.check.code,
                o.check.slug
            );
            for note in &o.notes {
                let _ = writeln!(out, "            note: {note}");
            }
        }
    }
    for n in &plan.not_sent {
        let _ = writeln!(
            out,
            "{}\n  not sent: unsafe to retry ({})",
            n.label, n.class
        );
    }
    if !report.created.is_empty() {
        let _ = writeln!(out, "created by this run (clean up with the keys shown):");
        for c in &report.created {
            let who = if c.second_caller {
                ", as the second caller"
            } else {
                ""
            };
            let _ = writeln!(out, "  {} {} (key {}{who})", c.operation, c.id, c.key);
        }
    }
    let _ = writeln!(out, "{}", summary_line(report));
    out
}

/// The last line of every human report.
pub fn summary_line(report: &RunReport) -> String {
    format!(
        "probe: {} held, {} failed, {} undecided, {} skipped; {} of {} planned requests sent to {}{} in {:.1}s (keys {}*)",
        report.count("held"),
        report.count("failed"),
        report.count("undecided"),
        report.count("skipped"),
        report.sent,
        report.planned,
        report.base_url,
        if report.reads > 0 {
            format!(", {} created resources read back", report.reads)
        } else {
            String::new()
        },
        report.elapsed.as_secs_f64(),
        report.key_prefix
    )
}

fn location(model: &Model, index: usize) -> Json {
    let op = &model.operations[index];
    json!({
        "file": model.document.sources.display(op.pos.file),
        "line": op.pos.line,
        "column": op.pos.column,
    })
}

/// The JSON report.
pub fn json_report(model: &Model, plan: &Plan, report: &RunReport) -> Json {
    let operations: Vec<Json> = report
        .targets
        .iter()
        .map(|t| {
            let op = &model.operations[t.index];
            json!({
                "operation": t.label,
                "method": op.method.as_str(),
                "path": op.path,
                "location": location(model, t.index),
                "body": t.body_source,
                "checks": t.outcomes.iter().map(|o| json!({
                    "code": o.check.code,
                    "check": o.check.slug,
                    "outcome": o.verdict.as_str(),
                    "reason": o.verdict.reason(),
                    "tries": o.tries,
                    "decided_from": o.basis.as_ref().map(|_| "effects"),
                    "basis": o.basis,
                    "notes": o.notes,
                    "evidence": o.evidence.iter().map(|e| json!({
                        "request": e.request,
                        "status": e.status,
                        "answer": e.answer,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "spec": model.document.sources.display(model.document.root().pos.file),
        "base_url": report.base_url,
        "key_prefix": report.key_prefix,
        "requests": { "planned": report.planned, "sent": report.sent, "reads": report.reads },
        "seconds": report.elapsed.as_secs_f64(),
        "operations": operations,
        "not_sent": plan.not_sent.iter().map(|n| json!({
            "operation": n.label,
            "class": n.class.as_str(),
        })).collect::<Vec<_>>(),
        "created": report.created.iter().map(|c| json!({
            "operation": c.operation,
            "id": c.id,
            "key": c.key,
            "second_caller": c.second_caller,
        })).collect::<Vec<_>>(),
        "summary": {
            "held": report.count("held"),
            "failed": report.count("failed"),
            "undecided": report.count("undecided"),
            "skipped": report.count("skipped"),
        },
    })
}

/// SARIF 2.1.0: one result per failed (error) or undecided (warning) check,
/// placed on the operation in the spec.
pub fn sarif(model: &Model, report: &RunReport, root: &Path) -> Json {
    let rules: Vec<Json> = CHECKS
        .iter()
        .map(|c| {
            json!({
                "id": c.code,
                "name": c.slug,
                "shortDescription": { "text": c.summary },
                "fullDescription": { "text": c.summary },
                "help": { "text": c.page(), "markdown": c.page() },
                "defaultConfiguration": { "level": "error" },
                "properties": { "tags": ["idempotency", "probe"] },
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in &report.targets {
        let op = &model.operations[t.index];
        for o in &t.outcomes {
            let level = match o.verdict {
                Verdict::Failed(_) => "error",
                Verdict::Undecided(_) => "warning",
                _ => continue,
            };
            let index = CHECKS
                .iter()
                .position(|c| c.code == o.check.code)
                .unwrap_or(0);
            results.push(json!({
                "ruleId": o.check.code,
                "ruleIndex": index,
                "level": level,
                "message": { "text": format!("{} {}: {}", op.method, op.path, o.verdict.reason().unwrap_or_default()) },
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": crate::output::sarif_artifact(&model.document.sources, op.pos.file, root),
                        "region": { "startLine": op.pos.line.max(1), "startColumn": op.pos.column.max(1) },
                    }
                }],
                "partialFingerprints": { "idemProbe/v1": format!("{}:{} {}", o.check.code, op.method, op.path) },
            }));
        }
    }
    crate::output::sarif_log("idem probe", rules, results, root)
}

/// JUnit XML: a suite per operation, a case per check.
pub fn junit(model: &Model, report: &RunReport) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"idem probe\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
        report
            .targets
            .iter()
            .map(|t| t.outcomes.len())
            .sum::<usize>(),
        report.count("failed"),
        report.count("undecided"),
        report.count("skipped"),
        report.elapsed.as_secs_f64()
    );
    for t in &report.targets {
        let op = &model.operations[t.index];
        let count = |kind: &str| {
            t.outcomes
                .iter()
                .filter(|o| o.verdict.as_str() == kind)
                .count()
        };
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
            xml(&format!("{} ({} {})", t.label, op.method, op.path)),
            t.outcomes.len(),
            count("failed"),
            count("undecided"),
            count("skipped")
        );
        for o in &t.outcomes {
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"{} {}\"",
                xml(&t.label),
                o.check.code,
                o.check.slug
            );
            let mut detail = String::new();
            if let Some(basis) = &o.basis {
                let _ = writeln!(detail, "{basis}");
            }
            if let Some(tries) = &o.tries {
                let _ = writeln!(detail, "tries: {tries}");
            }
            for e in &o.evidence {
                let status = e
                    .status
                    .map_or_else(|| "no answer".to_owned(), |s| s.to_string());
                let _ = writeln!(detail, "{} -> {status}: {}", e.request, e.answer);
            }
            let reason = xml(o.verdict.reason().unwrap_or_default());
            match &o.verdict {
                Verdict::Held => out.push_str("/>\n"),
                Verdict::Failed(_) => {
                    let _ = writeln!(
                        out,
                        ">\n      <failure message=\"{reason}\">{}</failure>\n    </testcase>",
                        xml(&detail)
                    );
                }
                Verdict::Undecided(_) => {
                    let _ = writeln!(
                        out,
                        ">\n      <error message=\"{reason}\">{}</error>\n    </testcase>",
                        xml(&detail)
                    );
                }
                Verdict::Skipped(_) => {
                    let _ = writeln!(
                        out,
                        ">\n      <skipped message=\"{reason}\"/>\n    </testcase>"
                    );
                }
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// Text escaped for XML content and attributes; characters XML 1.0 cannot
/// hold are dropped.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}
