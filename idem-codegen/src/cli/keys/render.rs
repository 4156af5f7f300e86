//! How `idem keys` prints: for a person, aligned and with ages; as JSON,
//! one document with every time in milliseconds since the epoch and in
//! RFC 3339.

use std::fmt::Write as _;
use std::time::Duration;

use idem_runtime::chrono::{DateTime, SecondsFormat};
use idem_runtime::server::{
    Inspected, KeyRecord, KeyState, KeyStats, Replication, StepStatus, StoredResponse, scope_digest,
};
use serde_json::{Value, json};

use super::{Done, EXIT_NOT_FOUND, millis};
use crate::cli::shared::{EXIT_CLEAN, EXIT_ERROR};

/// How `show` prints a record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShowView {
    pub(crate) body_limit: usize,
    pub(crate) reaper_after: Duration,
    pub(crate) json: bool,
}

fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(SecondsFormat::Millis, true),
    )
}

/// `3m 12s ago`, `in 40s`.
fn age(ms: i64, now: i64) -> String {
    let delta = now - ms;
    let words = span(delta.unsigned_abs());
    if delta >= 0 {
        format!("{words} ago")
    } else {
        format!("in {words}")
    }
}

fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn when(ms: Option<i64>, now: i64) -> String {
    ms.map_or_else(
        || "-".to_owned(),
        |ms| format!("{}  ({})", rfc3339(ms), age(ms, now)),
    )
}

fn time_json(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |ms| json!({"ms": ms, "at": rfc3339(ms)}))
}

fn state(s: KeyState) -> &'static str {
    match s {
        KeyState::InFlight => "in-flight",
        KeyState::Complete => "complete",
        KeyState::Exhausted => "exhausted",
    }
}

/// A body as text for a person: pretty JSON, text, or its size when binary;
/// cut after `limit` bytes.
fn body_text(body: &[u8], limit: usize) -> String {
    if body.is_empty() {
        return "(empty)".to_owned();
    }
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(value) => serde_json::to_string_pretty(&value).unwrap_or_default(),
        Err(_) => match std::str::from_utf8(body) {
            Ok(text) => text.to_owned(),
            Err(_) => return format!("({} bytes, not text)", body.len()),
        },
    };
    if text.len() <= limit {
        return text;
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n… ({} more bytes; --body-limit)",
        &text[..cut],
        text.len() - cut
    )
}

fn body_json(body: &[u8], limit: usize) -> Value {
    let truncated = body.len() > limit;
    let (kind, value) = match serde_json::from_slice::<Value>(body) {
        Ok(value) if !truncated => ("json", value),
        _ => match std::str::from_utf8(body) {
            Ok(text) => {
                let mut cut = limit.min(text.len());
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                ("text", Value::String(text[..cut].to_owned()))
            }
            Err(_) => ("binary", Value::Null),
        },
    };
    json!({"encoding": kind, "bytes": body.len(), "truncated": truncated && kind != "binary", "value": value})
}

fn response_json(r: &StoredResponse, limit: usize) -> Value {
    json!({
        "status": r.status,
        "headers": r.headers.iter().map(|(n, v)| json!([n, v])).collect::<Vec<_>>(),
        "body": body_json(&r.body, limit),
    })
}

/// What a record written before records named their operation shows
/// for it.
const UNNAMED: &str = "-";

/// What the completer will do with the record next.
fn schedule(r: &KeyRecord, now: i64) -> (String, Value) {
    match (r.state, r.request.is_some()) {
        (KeyState::Exhausted, _) => (
            format!(
                "terminal: exhausted after {} attempt(s), its effects stop at {}; `idem keys resume` makes it due again",
                r.attempts, r.recovery_point
            ),
            json!({"terminal": "exhausted"}),
        ),
        (KeyState::InFlight, true) => match r.next_attempt_at {
            Some(due) if due > now => (
                format!("next run due {}", when(Some(due), now)),
                json!({"next_attempt_at": time_json(Some(due))}),
            ),
            _ => match r.locked_at {
                None => (
                    "due now: the completer's next pass (or a retry) resumes it".to_owned(),
                    json!({"next_attempt_at": time_json(r.next_attempt_at), "due": true}),
                ),
                Some(locked) => (
                    format!(
                        "running, locked {}: taken over once its lock is older than lock-timeout",
                        age(locked, now)
                    ),
                    json!({"next_attempt_at": time_json(r.next_attempt_at), "running": true}),
                ),
            },
        },
        (KeyState::InFlight, false) => (
            "single-phase: nothing resumes it; its claim rolls back with its transaction"
                .to_owned(),
            Value::Null,
        ),
        (KeyState::Complete, _) => ("done".to_owned(), Value::Null),
    }
}

pub(crate) fn show(found: &Inspected, now: i64, view: &ShowView) -> String {
    let r = &found.record;
    let reaped_at = r.created_at.saturating_add(millis(view.reaper_after));
    let (next, next_json) = schedule(r, now);
    if view.json {
        let steps: Vec<Value> = found
            .steps
            .iter()
            .map(|s| {
                json!({
                    "step": s.step,
                    "status": match s.status { StepStatus::Intent => "intent", StepStatus::Done => "done" },
                    "derived_key": s.derived_key,
                    "output": s.output.as_deref().map(|o| serde_json::from_str::<Value>(o).unwrap_or_else(|_| Value::String(o.to_owned()))),
                })
            })
            .collect();
        let document = json!({
            "scope": r.scope,
            "scope_digest": scope_digest(&r.scope),
            "key": r.key,
            "state": state(r.state),
            "operation": r.operation,
            "fingerprint": r.fingerprint,
            "claimed": time_json(Some(r.created_at)),
            "locked": time_json(r.locked_at),
            "completed": time_json(r.completed_at),
            "resumed": time_json(r.resumed_at),
            "lock_generation": r.lock_generation,
            "recovery_point": r.recovery_point,
            "attempts": r.attempts,
            "completer": next_json,
            "request": r.request.as_ref().map(|q| json!({"method": q.method, "path": q.path, "body": body_json(&q.body, view.body_limit)})),
            "steps": steps,
            "response": r.response.as_ref().map(|resp| response_json(resp, view.body_limit)),
            "reaped": time_json(Some(reaped_at)),
        });
        return format!(
            "{}\n",
            serde_json::to_string_pretty(&document).unwrap_or_default()
        );
    }
    let mut out = String::new();
    let mut line = |label: &str, value: &str| {
        let _ = writeln!(out, "{label:<15}{value}");
    };
    line("key", &r.key);
    line(
        "scope",
        &format!("{}  (digest {})", r.scope, scope_digest(&r.scope)),
    );
    line("state", state(r.state));
    line("operation", r.operation.as_deref().unwrap_or(UNNAMED));
    line("fingerprint", &r.fingerprint);
    line("claimed", &when(Some(r.created_at), now));
    line("locked", &when(r.locked_at, now));
    line("generation", &r.lock_generation.to_string());
    line("completed", &when(r.completed_at, now));
    if r.resumed_at.is_some() {
        line("resumed", &when(r.resumed_at, now));
    }
    if r.request.is_some() {
        line("recovery point", &r.recovery_point);
        line("attempts", &r.attempts.to_string());
    }
    line("completer", &next);
    // When the reaper may delete it: ahead ("in 2d 23h") or already due.
    line(
        "reaper due",
        &format!(
            "{}  ({}; reaper-after {})",
            rfc3339(reaped_at),
            age(reaped_at, now),
            span(u64::try_from(millis(view.reaper_after)).unwrap_or(0))
        ),
    );
    if let Some(q) = &r.request {
        line(
            "request",
            &format!("{} {}  ({} bytes)", q.method, q.path, q.body.len()),
        );
    }
    if !found.steps.is_empty() {
        let _ = writeln!(out, "steps");
        for s in &found.steps {
            let status = match s.status {
                StepStatus::Intent => "intent (called out; no result recorded)",
                StepStatus::Done => "done",
            };
            let _ = writeln!(out, "  {:<20}{status}", s.step);
            if let Some(k) = &s.derived_key {
                let _ = writeln!(out, "    derived key  {k}");
            }
            if let Some(o) = &s.output {
                let _ = writeln!(out, "    output       {o}");
            }
        }
    }
    match &r.response {
        Some(resp) => {
            let reason = idem_runtime::http::StatusCode::from_u16(resp.status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("");
            let _ = writeln!(out, "response       {} {reason}", resp.status);
            for (name, value) in &resp.headers {
                let _ = writeln!(out, "  {name}: {value}");
            }
            for body_line in body_text(&resp.body, view.body_limit).lines() {
                let _ = writeln!(out, "  {body_line}");
            }
        }
        None => {
            let _ = writeln!(out, "response       - (none stored)");
        }
    }
    out
}

pub(crate) fn list(records: &[KeyRecord], now: i64, json: bool) -> String {
    if json {
        let rows: Vec<Value> = records
            .iter()
            .map(|r| {
                json!({
                    "scope": r.scope,
                    "key": r.key,
                    "state": state(r.state),
                    "operation": r.operation,
                    "recovery_point": r.recovery_point,
                    "attempts": r.attempts,
                    "status": r.response.as_ref().map(|resp| resp.status),
                    "claimed": time_json(Some(r.created_at)),
                    "locked": time_json(r.locked_at),
                    "next_attempt_at": time_json(r.next_attempt_at),
                })
            })
            .collect();
        return format!(
            "{}\n",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
    }
    if records.is_empty() {
        return "no records match\n".to_owned();
    }
    let mut out = format!(
        "{:<10} {:<14} {:<18} {:<16} {:>3} {:>6}  {:<24} {}\n",
        "state", "claimed", "operation", "recovery point", "run", "status", "scope", "key"
    );
    for r in records {
        let _ = writeln!(
            out,
            "{:<10} {:<14} {:<18} {:<16} {:>3} {:>6}  {:<24} {}",
            state(r.state),
            age(r.created_at, now),
            r.operation.as_deref().unwrap_or(UNNAMED),
            if r.request.is_some() {
                r.recovery_point.as_str()
            } else {
                "-"
            },
            r.attempts,
            r.response
                .as_ref()
                .map_or_else(|| "-".to_owned(), |resp| resp.status.to_string()),
            r.scope,
            r.key
        );
    }
    out
}

pub(crate) fn stats(
    s: &KeyStats,
    replication: Option<&Replication>,
    patroni: Option<&super::patroni::Member>,
    now: i64,
    reaper_after: Duration,
    json: bool,
) -> String {
    if json {
        let document = json!({
            "records": s.by_state.iter().map(|(st, op, n)| json!({"state": state(*st), "operation": op, "count": n})).collect::<Vec<_>>(),
            "oldest_in_flight": s.oldest_in_flight.as_ref().map(|r| json!({
                "scope": r.scope, "key": r.key, "operation": r.operation,
                "claimed": time_json(Some(r.created_at)), "locked": time_json(r.locked_at),
            })),
            "next_reaper_pass": {
                "reaper_after_ms": millis(reaper_after),
                "deletes": s.reapable.iter().map(|(st, n)| json!({"state": state(*st), "count": n})).collect::<Vec<_>>(),
            },
            "server": replication.map(|r| json!({
                "address": r.server,
                "cluster_name": r.cluster_name,
                "timeline": r.timeline,
                "managed_by_patroni": r.patroni,
            })),
            "patroni": patroni.map(|p| json!({
                "member": p.name,
                "role": p.role,
                "timeline": p.timeline,
                "scope": p.scope,
                "synchronous_mode": p.mode,
                "sync_standbys": p.sync_standbys,
                "error": p.error,
            })),
            "replication": replication.map(|r| json!({
                "synchronous": r.synchronous(),
                "synchronous_standby_names": r.synchronous_standby_names,
                "synchronous_commit": r.synchronous_commit,
                "standbys": r.standbys.iter().map(|s| json!({"name": s.name, "sync_state": s.sync_state})).collect::<Vec<_>>(),
                "at_risk": r.at_risk().iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
                "warning": r.warning(),
            })),
        });
        return format!(
            "{}\n",
            serde_json::to_string_pretty(&document).unwrap_or_default()
        );
    }
    let mut out = format!("{:<10} {:<24} {:>10}\n", "state", "operation", "records");
    for (st, op, n) in &s.by_state {
        let _ = writeln!(
            out,
            "{:<10} {:<24} {:>10}",
            state(*st),
            op.as_deref().unwrap_or(UNNAMED),
            n
        );
    }
    if s.by_state.is_empty() {
        out.push_str("(no records)\n");
    }
    match &s.oldest_in_flight {
        Some(r) => {
            let _ = writeln!(
                out,
                "\noldest in flight: {} under {} ({}), claimed {}",
                r.key,
                r.scope,
                r.operation.as_deref().unwrap_or(UNNAMED),
                age(r.created_at, now)
            );
        }
        None => out.push_str("\nnothing in flight\n"),
    }
    let deletes: Vec<String> = s
        .reapable
        .iter()
        .map(|(st, n)| format!("{n} {}", state(*st)))
        .collect();
    let _ = writeln!(
        out,
        "next reaper pass (reaper-after {}): deletes {}",
        span(u64::try_from(millis(reaper_after)).unwrap_or(0)),
        if deletes.is_empty() {
            "nothing".to_owned()
        } else {
            deletes.join(", ")
        }
    );
    if let Some(r) = replication {
        let _ = writeln!(out, "{}", server_line(r, patroni));
        let standbys: Vec<String> = r.standbys.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "replication: {}; synchronous_commit = {}, synchronous_standby_names = {:?}, \
             standbys: {}",
            if r.synchronous() {
                "synchronous (a commit is acknowledged once a standby has it)"
            } else {
                "not synchronous (an acknowledged commit may exist on this server only)"
            },
            r.synchronous_commit,
            r.synchronous_standby_names,
            if standbys.is_empty() {
                "none".to_owned()
            } else {
                standbys.join(", ")
            }
        );
        if let Some(warning) = r.warning() {
            let _ = writeln!(out, "warning: {warning}");
        }
    }
    out
}

/// Which server the store reads, and, under Patroni, which member.
fn server_line(r: &Replication, patroni: Option<&super::patroni::Member>) -> String {
    let address = r.server.as_deref().unwrap_or("a Unix socket");
    let timeline = r
        .timeline
        .map_or_else(|| "a standby".to_owned(), |t| format!("timeline {t}"));
    match patroni {
        Some(p) if p.error.is_some() => format!(
            "server: {address} ({timeline}); {}",
            p.error.as_deref().unwrap_or_default()
        ),
        Some(p) => {
            let member = match (&p.name, &p.role) {
                (Some(name), Some(role)) => format!("Patroni member {name} ({role})"),
                _ => format!("no Patroni member at {address}"),
            };
            let sync = if p.sync_standbys.is_empty() {
                "none".to_owned()
            } else {
                p.sync_standbys.join(", ")
            };
            format!(
                "server: {address} ({timeline}), {member} of cluster {}; synchronous_mode {}, \
                 synchronous standbys: {sync}",
                p.scope.as_deref().unwrap_or("?"),
                p.mode.unwrap_or("?"),
            )
        }
        None if r.patroni => format!(
            "server: {address} ({timeline}), managed by Patroni (cluster {}): pass --patroni \
             http://HOST:8008 to name the member",
            r.cluster_name
        ),
        None => format!("server: {address} ({timeline})"),
    }
}

pub(crate) fn not_found(key: &str, scope: Option<&str>, json: bool) -> Done {
    let text = if json {
        format!("{}\n", json!({"key": key, "scope": scope, "found": false}))
    } else {
        match scope {
            Some(scope) => format!("no record of {key} under {scope}\n"),
            None => format!("no record of {key} under any scope\n"),
        }
    };
    Done {
        text,
        code: EXIT_NOT_FOUND,
    }
}

pub(crate) fn scopes(key: &str, scopes: &[String], json: bool) -> Done {
    let listed = usize::try_from(super::SCOPES_LISTED).unwrap_or(usize::MAX);
    let more = scopes.len() > listed;
    let shown = &scopes[..scopes.len().min(listed)];
    let text = if json {
        format!("{}\n", json!({"key": key, "scopes": shown, "more": more}))
    } else {
        let count = if more {
            format!("more than {listed}")
        } else {
            scopes.len().to_string()
        };
        let mut text = format!("{count} scopes hold {key}; name one with --scope:\n");
        for s in shown {
            let _ = writeln!(text, "  {s}");
        }
        text
    };
    Done {
        text,
        code: EXIT_ERROR,
    }
}

pub(crate) fn resumed(before: &Inspected, now: i64, json: bool) -> String {
    let r = &before.record;
    let done: Vec<&str> = before
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Done)
        .map(|s| s.step.as_str())
        .collect();
    if json {
        return format!(
            "{}\n",
            json!({
                "scope": r.scope, "key": r.key,
                "changed": {
                    "state": ["exhausted", "in-flight"],
                    "attempts": [r.attempts, 0],
                    "next_attempt_at": [r.next_attempt_at, now],
                    "resumed_at": [r.resumed_at, now],
                },
                "recovery_point": r.recovery_point,
                "steps_kept_done": done,
                "exit": EXIT_CLEAN,
            })
        );
    }
    format!(
        "resumed {} under {}\n  state            exhausted -> in-flight (due now: the completer's next pass takes it)\n  attempts         {} -> 0 (its resume schedule counts from now)\n  recovery point   {} (unchanged)\n  steps kept done  {}\n",
        r.key,
        r.scope,
        r.attempts,
        r.recovery_point,
        if done.is_empty() {
            "none".to_owned()
        } else {
            done.join(", ")
        }
    )
}
