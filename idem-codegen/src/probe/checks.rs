//! The checks themselves: what each sends and how it judges what came back.
//!
//! Most checks build on the replay check's original answer. When the replay
//! works, they judge by it: a replay is the original's body (and, where the
//! spec declares one, the replay header saying `true`). When the replay is
//! wrong only in its status or headers, or missing altogether, they judge by
//! *effects* instead: the resource each answer names (the body's `id`, or
//! `Location`), read back through the spec's `GET {path}/{id}` where it has
//! one, so an id made up for an answer is not counted as a resource.

use std::collections::BTreeSet;

use super::Target;
use super::keys::PROTOCOL_MAX_LENGTH;
use super::run::{
    Answer, Basis, Caller, Exchange, KeyValue, Payload, RunError, Runner, Send, Verdict,
};
use crate::model::Model;
use crate::vocab::InFlight;

/// What the replay check found, and what the checks after it start from.
pub(super) struct Replay {
    pub(super) verdict: Verdict,
    /// The key and original answer, and how later checks judge by them.
    pub(super) original: Option<(String, Answer, Basis)>,
    /// Why later checks cannot judge, when they cannot.
    pub(super) unjudged: String,
}

impl Runner<'_> {
    pub(super) async fn replay(
        &self,
        target: &Target,
        evidence: &mut Vec<Exchange>,
    ) -> Result<Replay, RunError> {
        let key = self.key(target);
        let send = self.valid(KeyValue::Some(key.clone()));
        let header = target.replay_header.as_deref();
        let mut first = match self.send(target, &send, evidence).await {
            Ok(a) => a,
            Err(reason) => {
                // The first request of a target: no answer means no service.
                return Err(RunError::Unreachable {
                    url: self.base.clone(),
                    reason,
                });
            }
        };
        let undecided = |verdict: Verdict, why: &str| Replay {
            verdict,
            original: None,
            unjudged: why.to_owned(),
        };
        if first.status >= 500 {
            // A transient failure, or one stored under the key: the same
            // request again tells which.
            let again = match self.send(target, &send, evidence).await {
                Ok(a) => a,
                Err(e) => {
                    return Ok(undecided(
                        Verdict::Undecided(format!("the retry got no answer: {e}")),
                        "no request succeeded",
                    ));
                }
            };
            if again.status >= 500 {
                let stored = again.status == first.status
                    && (again.replayed(header) || (again.same_body(&first) && header.is_none()));
                let verdict = if stored && again.replayed(header) {
                    Verdict::Failed(format!(
                        "the {} was stored under the key and replayed to the retry: a retry of a transient failure can never succeed",
                        first.status
                    ))
                } else {
                    server_error(&first, &key)
                };
                return Ok(undecided(verdict, "no request succeeded"));
            }
            first = again;
        }
        if !first.ok() {
            return Ok(undecided(
                not_a_success(&first),
                "no request succeeded, so there is nothing to repeat",
            ));
        }
        let second = match self.send(target, &send, evidence).await {
            Ok(a) => a,
            Err(e) => {
                return Ok(undecided(
                    Verdict::Undecided(format!("the retry got no answer: {e}")),
                    "the retry got no answer",
                ));
            }
        };
        let verdict = if second.status != first.status {
            Verdict::Failed(format!(
                "the retry was answered {}, the original {}",
                second.status, first.status
            ))
        } else if !first.same_body(&second) {
            match (first.resource_id(), second.resource_id()) {
                (Some(a), Some(b)) if a != b => Verdict::Failed(format!(
                    "the retry answered another resource, `{b}` after `{a}`: the request ran twice, or its replay was made anew"
                )),
                _ => Verdict::Failed("the retry's body differs from the original's".into()),
            }
        } else if header.is_some() && !second.replayed(header) {
            Verdict::Failed(format!(
                "the retry lacks `{}: true`, the replay header the spec declares",
                header.unwrap_or_default()
            ))
        } else if first.replayed(header) {
            Verdict::Failed(format!(
                "the original says `{}: true`, which the spec keeps for replays",
                header.unwrap_or_default()
            ))
        } else {
            Verdict::Held
        };
        let basis = if verdict == Verdict::Held {
            Some(Basis::Replay)
        } else if first.resource_id().is_some() {
            Some(Basis::Effects)
        } else {
            None
        };
        Ok(Replay {
            verdict,
            original: basis.map(|b| (key, first, b)),
            unjudged: "its answers name no resource (no `id`, no `Location`) to count effects by"
                .to_owned(),
        })
    }

    /// Send `payload` as `caller` with the replay check's key; the evidence shows the
    /// original answer first.
    pub(super) async fn after_original(
        &self,
        target: &Target,
        (payload, caller): (Payload, Caller),
        key: &str,
        first: &Answer,
        evidence: &mut Vec<Exchange>,
    ) -> Result<Answer, Verdict> {
        evidence.push(original(first));
        let send = Send {
            payload,
            key: KeyValue::Some(key.to_owned()),
            caller,
        };
        self.send(target, &send, evidence)
            .await
            .map_err(|e| Verdict::Undecided(format!("no answer: {e}")))
    }

    /// Whether `answer` made a resource of its own: a new id that exists.
    async fn new_effect(&self, target: &Target, answer: &Answer, first: &Answer) -> bool {
        match answer.resource_id() {
            Some(id) if Some(&id) != first.resource_id().as_ref() => {
                self.exists(target, &id).await.unwrap_or(true)
            }
            _ => false,
        }
    }

    /// The answer to the replay check's key with another body.
    pub(super) async fn mismatch(
        &self,
        target: &Target,
        answer: &Answer,
        first: &Answer,
        basis: Basis,
    ) -> Verdict {
        let declared = declared_of(self.model, target, &[409, 422]);
        let replayed = match basis {
            Basis::Replay => answer.ok() && answer.same_body(first),
            Basis::Effects => {
                answer.resource_id().is_some() && answer.resource_id() == first.resource_id()
            }
        };
        if replayed && answer.ok() {
            Verdict::Failed(
                "the key's first answer was replayed for another body: the key ignores the body"
                    .into(),
            )
        } else if answer.ok()
            && (basis == Basis::Replay || self.new_effect(target, answer, first).await)
        {
            Verdict::Failed("the other body ran as a second original under the same key".into())
        } else if declared.contains(&answer.status) {
            Verdict::Held
        } else if answer.ok() {
            Verdict::Failed(format!(
                "answered {} for another body under the same key, not the reuse conflict ({})",
                answer.status,
                list(&declared)
            ))
        } else {
            Verdict::Failed(format!(
                "answered {}, not the reuse conflict ({})",
                answer.status,
                list(&declared)
            ))
        }
    }

    /// The second caller's answer to the first caller's key and body.
    pub(super) async fn isolation(
        &self,
        target: &Target,
        answer: &Answer,
        first: &Answer,
        basis: Basis,
    ) -> Verdict {
        let header = target.replay_header.as_deref();
        let shared = match basis {
            Basis::Replay => answer.ok() && (answer.same_body(first) || answer.replayed(header)),
            // The first caller's resource, under whatever status.
            Basis::Effects => {
                answer.resource_id().is_some() && answer.resource_id() == first.resource_id()
            }
        };
        if shared {
            Verdict::Failed(
                "the second caller got the first caller's answer: one key space for every caller"
                    .into(),
            )
        } else if answer.ok() {
            Verdict::Held
        } else if matches!(answer.status, 409 | 422) {
            Verdict::Failed(format!(
                "the second caller's request was refused {} as a conflict with the first caller's key: keys are not kept apart per caller",
                answer.status
            ))
        } else {
            Verdict::Undecided(format!(
                "the second caller was answered {}; is `--second-caller` an identity the service accepts?",
                answer.status
            ))
        }
    }

    /// Every round of identical requests at once, each judged by the
    /// distinct effects it made.
    pub(super) async fn concurrent(
        &self,
        target: &Target,
        basis: Basis,
        evidence: &mut Vec<Exchange>,
    ) -> (Verdict, String) {
        let n = self.settings.concurrency.max(1);
        let mut in_flight = declared_of(self.model, target, &[409, 425, 429, 503]);
        // `in-flight: accepted`: a duplicate of a running request is told
        // `202` and where to follow it; that is not a second original.
        let accepted = self.model.operations[target.index].settings.in_flight == InFlight::Accepted;
        if accepted {
            in_flight.push(202);
        }
        let header = target.replay_header.as_deref();
        let mut rounds = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        let mut problem: Option<String> = None;
        let mut no_success = 0;
        for _ in 0..self.settings.rounds {
            let key = self.key(target);
            let send = self.valid(KeyValue::Some(key));
            let barrier = tokio::sync::Barrier::new(n);
            let requests = (0..n).map(|_| async {
                barrier.wait().await;
                self.exchange(target, &send).await
            });
            let results = futures_util::future::join_all(requests).await;
            // Distinct 2xx bodies, and distinct resources named by any answer.
            let mut originals: Vec<Answer> = Vec::new();
            let mut ids: BTreeSet<String> = BTreeSet::new();
            let mut fresh = 0;
            let mut others: std::collections::BTreeMap<String, usize> = Default::default();
            let mut shown = Vec::new();
            for (text, result) in results {
                match result {
                    Ok(a) => {
                        if let Some(id) = a.resource_id() {
                            ids.insert(id);
                        }
                        if a.ok() && !(accepted && a.status == 202) {
                            if !a.replayed(header) {
                                fresh += 1;
                            }
                            if !originals.iter().any(|o| o.same_body(&a)) {
                                shown.push(Exchange::answered(text, &a));
                                originals.push(a);
                            }
                            continue;
                        }
                        *others.entry(a.status.to_string()).or_default() += 1;
                        if !in_flight.contains(&a.status) {
                            shown.push(Exchange::answered(text, &a));
                            problem.get_or_insert(format!(
                                "a duplicate was answered {}, neither a replay nor the in-flight conflict ({})",
                                a.status,
                                list(&in_flight)
                            ));
                        }
                    }
                    Err(e) => {
                        *others.entry("no answer".to_owned()).or_default() += 1;
                        problem.get_or_insert(format!("a duplicate got no answer: {e}"));
                        shown.push(Exchange::of(text, &Err(e)));
                    }
                }
            }
            // Effects: the resources named, those that read back where the
            // spec can read them; by bodies where no answer names one.
            let effects = match basis {
                Basis::Effects => {
                    let mut real = 0;
                    for id in &ids {
                        if self.exists(target, id).await.unwrap_or(true) {
                            real += 1;
                        }
                    }
                    real
                }
                // One effect per distinct successful body.
                Basis::Replay => originals.len(),
            };
            let round = rounds.len() + 1;
            let mut line = format!("round {round}: {} effect{}", effects, plural(effects));
            for (status, count) in &others {
                line.push_str(&format!(", {count} × {status}"));
            }
            rounds.push(line);
            if effects > 1 {
                let named: Vec<String> = originals.iter().filter_map(Answer::resource_id).collect();
                let which = if named.len() > 1 && basis == Basis::Replay {
                    format!(": `{}`", named.join("`, `"))
                } else {
                    String::new()
                };
                failures.push(format!(
                    "{n} identical requests at once made {effects} effects in round {round}{which}: the request ran more than once"
                ));
                evidence.extend(shown);
            } else if basis == Basis::Replay && header.is_some() && fresh > 1 {
                failures.push(format!(
                    "{fresh} answers in round {round} lack `{}: true`: more than one original",
                    header.unwrap_or_default()
                ));
                evidence.extend(shown);
            } else if effects == 0 && originals.is_empty() {
                no_success += 1;
                evidence.extend(shown);
            } else if problem.is_some() {
                evidence.extend(shown);
            }
        }
        let tries = format!(
            "{} rounds of {n} requests at once: {}",
            rounds.len(),
            rounds.join("; ")
        );
        let verdict = if !failures.is_empty() {
            let mut reason = failures.join("; ");
            if let Some(problem) = problem {
                reason.push_str(&format!("; {problem}"));
            }
            Verdict::Failed(reason)
        } else if let Some(problem) = problem {
            Verdict::Failed(problem)
        } else if no_success == rounds.len() {
            Verdict::Undecided(format!(
                "none of {n} requests was answered 2xx in any round"
            ))
        } else {
            Verdict::Held
        };
        (verdict, tries)
    }

    pub(super) async fn key_required(
        &self,
        target: &Target,
        evidence: &mut Vec<Exchange>,
    ) -> Verdict {
        let keyless = match self
            .send(target, &self.valid(KeyValue::None), evidence)
            .await
        {
            Ok(a) => a,
            Err(e) => return Verdict::Undecided(format!("no answer: {e}")),
        };
        if keyless.ok() {
            return Verdict::Failed(format!(
                "a request without its required key was answered {}: it ran, and a retry of it would run again",
                keyless.status
            ));
        }
        if !keyless.client_error() {
            return Verdict::Failed(format!(
                "a request without its required key was answered {}, not a 4xx",
                keyless.status
            ));
        }
        let key = self.key(target);
        let fresh = self.valid(KeyValue::Some(key.clone()));
        match self.send(target, &fresh, evidence).await {
            Ok(a) if a.ok() && !a.replayed(target.replay_header.as_deref()) => Verdict::Held,
            Ok(a) if a.ok() => Verdict::Failed(
                "a fresh key after the keyless request was answered as a replay".into(),
            ),
            Ok(a) if a.status >= 500 => server_error(&a, &key),
            Ok(a) => Verdict::Undecided(format!(
                "the keyless request was refused {}, but the same request with a fresh key was answered {}",
                keyless.status, a.status
            )),
            Err(e) => Verdict::Undecided(format!("no answer: {e}")),
        }
    }

    /// An over-long key, and a key with a space and a non-ASCII character.
    /// Each counts only against what the spec declares; where it declares
    /// nothing, what idem's protocol would refuse is a note.
    pub(super) async fn key_bounds(
        &self,
        target: &Target,
        evidence: &mut Vec<Exchange>,
        notes: &mut Vec<String>,
    ) -> Verdict {
        let shape = &target.key_shape;
        let max = shape.longest();
        let mut long = self.key(target);
        while long.chars().count() <= max {
            long.push('x');
        }
        let mut odd = self.key(target);
        // Room for the two characters where the maximum is tight.
        while odd.chars().count() + 2 > max && odd.len() > 1 {
            odd.remove(0);
        }
        odd.push_str(" é");
        let length_rule = shape
            .max_length
            .map(|(m, source)| format!("{source} allows at most {m} characters"));
        let character_rule = if shape.uuid {
            Some("the key's schema says `format: uuid`".to_owned())
        } else {
            shape.declares_characters().then(|| {
                format!(
                    "the key's pattern `{}` refuses a space",
                    shape.pattern.as_deref().unwrap_or_default()
                )
            })
        };
        let mut problems = Vec::new();
        for (what, key, rule, protocol) in [
            (
                format!("length: a key of {} characters", max + 1),
                long,
                length_rule,
                format!("idem's protocol keeps keys to {PROTOCOL_MAX_LENGTH} characters"),
            ),
            (
                "characters: a key holding a space and a non-ASCII character".to_owned(),
                odd,
                character_rule,
                "idem's protocol takes keys of visible ASCII only".to_owned(),
            ),
        ] {
            let answer = self
                .send(target, &self.valid(KeyValue::Some(key)), evidence)
                .await;
            let said = match &answer {
                Ok(a) if a.client_error() => continue,
                Ok(a) => format!("{what} was answered {}", a.status),
                Err(e) => format!("{what} got no answer: {e}"),
            };
            let server_fault = matches!(&answer, Ok(a) if a.status >= 500) || answer.is_err();
            match rule {
                Some(rule) => problems.push(format!("{said} ({rule}); it should be a 4xx")),
                // Undeclared, a 5xx still tells clients to retry in vain.
                None if server_fault => {
                    problems.push(format!("{said}; a key the service cannot take should be a 4xx, never a 5xx"));
                }
                None => notes.push(format!(
                    "{said}: the spec does not forbid it, so this is not a failure; {protocol}, and a service that stores such keys may truncate or mangle them"
                )),
            }
        }
        if problems.is_empty() {
            Verdict::Held
        } else {
            Verdict::Failed(problems.join("; "))
        }
    }

    pub(super) async fn failed_not_stored(
        &self,
        target: &Target,
        evidence: &mut Vec<Exchange>,
    ) -> Verdict {
        let key = self.key(target);
        let invalid = Send {
            payload: Payload::Invalid,
            key: KeyValue::Some(key.clone()),
            caller: Caller::First,
        };
        let refused = match self.send(target, &invalid, evidence).await {
            Ok(a) => a,
            Err(e) => return Verdict::Undecided(format!("no answer: {e}")),
        };
        if !refused.client_error() {
            return Verdict::Undecided(format!(
                "the body the schema forbids was answered {}, not refused, so there is no refusal to look for",
                refused.status
            ));
        }
        let answer = match self
            .send(target, &self.valid(KeyValue::Some(key)), evidence)
            .await
        {
            Ok(a) => a,
            Err(e) => return Verdict::Undecided(format!("no answer: {e}")),
        };
        if answer.ok() {
            Verdict::Held
        } else if answer.status == refused.status && answer.same_body(&refused) {
            Verdict::Failed(format!(
                "the refusal ({}) was stored under the key and replayed for the valid request",
                refused.status
            ))
        } else if matches!(answer.status, 409 | 422) {
            Verdict::Failed(format!(
                "the refused request used up its key: the valid request with it was answered {}",
                answer.status
            ))
        } else {
            Verdict::Undecided(format!(
                "the valid request after the refusal was answered {}",
                answer.status
            ))
        }
    }
}

/// The replay check's original answer, shown beside what a later check got.
fn original(first: &Answer) -> Exchange {
    Exchange::answered(
        "the same key's original request (check `replay`)".into(),
        first,
    )
}

/// The statuses of `candidates` the operation declares, or all of them when
/// it declares none.
fn declared_of(model: &Model, target: &Target, candidates: &[u16]) -> Vec<u16> {
    let op = &model.operations[target.index];
    let declared: Vec<u16> = candidates
        .iter()
        .copied()
        .filter(|s| {
            let text = s.to_string();
            op.responses.iter().any(|r| {
                r.status == text
                    || (r.status.len() == 3
                        && r.status.ends_with("XX")
                        && text.starts_with(&r.status[..1]))
            })
        })
        .collect();
    if declared.is_empty() {
        candidates.to_vec()
    } else {
        declared
    }
}

fn list(statuses: &[u16]) -> String {
    statuses
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(" or ")
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn not_a_success(answer: &Answer) -> Verdict {
    Verdict::Undecided(format!(
        "the probe's request was answered {}, so there is no success to replay; give a body that succeeds with `--body OPERATION=@FILE`, or the identity it needs with `--header`",
        answer.status
    ))
}

/// A well-formed request answered 5xx: the service's failure, said plainly.
fn server_error(answer: &Answer, key: &str) -> Verdict {
    Verdict::Undecided(format!(
        "the service answered {} to a well-formed request: its key `{}` is what the spec declares a key to be, so the failure is the service's, not the body's or the identity's; look at the service's log for that key. If the service takes only some keys, declare them in the key's schema (`format: uuid`, a `pattern`, lengths) and the probe makes keys to match",
        answer.status,
        super::run::shown_key(key)
    ))
}
