use super::{blame, pos_of, settings_scopes};
use crate::audit::{Findings, Rule, Severity};
use crate::model::{Model, key_settings};
use crate::vocab::format_duration;

pub(crate) static RULE: Rule = Rule {
    code: "IDEM004",
    slug: "reaper-before-replay-window",
    severity: Severity::Error,
    summary: "records are deleted before their replay window ends",
    docs: r#"## What it does
Flags `reaper-after` shorter than `replay-window` (defaults: 72h and 24h).

## Why is this bad?
The replay window is the correctness promise: inside it a retry replays. The
reaper deletes records; if it runs first, the promise is broken and a retry
inside the window executes again. The reaper's horizon should be longer still,
so a Friday incident's failed requests are still there for a human on Monday.

## Example
```yaml
x-idempotency:
  replay-window: 7d
  reaper-after: 48h
```

Use instead:
```yaml
x-idempotency:
  replay-window: 7d
  reaper-after: 10d
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    let fields =
        |e: &crate::vocab::IdempotencyExt| vec![pos_of(&e.reaper_after), pos_of(&e.replay_window)];
    for scope in settings_scopes(model, fields) {
        let ext = scope.map_or(&model.root.idempotency, |op| &op.ext);
        let settings = key_settings(ext);
        if settings.reaper_after >= settings.replay_window {
            continue;
        }
        let Some(pos) = blame(ext, &model.root.idempotency, fields) else {
            continue;
        };
        let defaulted = if ext.reaper_after.is_none() {
            " (the default)"
        } else {
            ""
        };
        let message = format!(
            "reaper-after {}{defaulted} deletes records before the {} replay window ends",
            format_duration(settings.reaper_after),
            format_duration(settings.replay_window)
        );
        let help = Some(format!(
            "set `reaper-after` to at least {}, better well above it, so people can recover failed requests",
            format_duration(settings.replay_window)
        ));
        match scope {
            Some(op) => out.operation(op, pos, message, help),
            None => out.document(pos, message, help),
        }
    }
}
