use super::{blame, pos_of, settings_scopes};
use crate::audit::{Findings, Rule, Severity};
use crate::model::{Model, key_settings};
use crate::vocab::format_duration;

pub(crate) static RULE: Rule = Rule {
    code: "IDEM003",
    slug: "replay-window-shorter-than-retry-horizon",
    severity: Severity::Error,
    summary: "a retry inside the longest retry chain would find no record and run again",
    docs: r#"## What it does
Compares `replay-window` (how long a key replays its stored response; 24h when
unset) with `retry-horizon` (the longest time any caller may still retry: a
dead-letter queue replayed days later, an offline mobile client) and flags a
window shorter than the horizon.

## Why is this bad?
A retry that arrives after its record expired looks like a brand-new request
and runs again. If a runbook replays failed jobs after five days and records
live for one, every replay is a duplicate. The window is set from the longest
retry chain, not from storage cost; storage is handled by the reaper and a
second, longer horizon.

## Example
```yaml
x-idempotency:
  replay-window: 24h
  retry-horizon: 6d     # the DLQ runbook replays up to six days later
```

Use instead:
```yaml
x-idempotency:
  replay-window: 7d
  retry-horizon: 6d
  reaper-after: 14d
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    let fields =
        |e: &crate::vocab::IdempotencyExt| vec![pos_of(&e.replay_window), pos_of(&e.retry_horizon)];
    for scope in settings_scopes(model, fields) {
        let ext = scope.map_or(&model.root.idempotency, |op| &op.ext);
        let settings = key_settings(ext);
        let Some(horizon) = settings.retry_horizon else {
            continue;
        };
        if settings.replay_window >= horizon {
            continue;
        }
        let Some(pos) = blame(ext, &model.root.idempotency, fields) else {
            continue;
        };
        let message = format!(
            "replay window {} is shorter than the retry horizon {}: a retry after {} finds no record and runs again",
            format_duration(settings.replay_window),
            format_duration(horizon),
            format_duration(settings.replay_window)
        );
        let help = Some(format!(
            "set `replay-window: {}` or more, or shorten the longest retry chain to fit the window",
            format_duration(horizon)
        ));
        match scope {
            Some(op) => out.operation(op, pos, message, help),
            None => out.document(pos, message, help),
        }
    }
}
