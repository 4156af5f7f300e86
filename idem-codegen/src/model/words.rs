//! Reading an operation's own words: what its summary, description,
//! operationId, path and request fields say it does, and which of its
//! inputs say they are an idempotency key.
//!
//! Facts read here are *inferred*: kept apart from what the spec declares,
//! each with the words that decided it and where they stand. They only ever
//! make the audit stricter or quieter where the words are plain; they never
//! make a client retry what it would not retry otherwise (see
//! [`Operation::effect`](super::Operation::effect)).
//!
//! The reader is a small set of verb and phrase patterns, not a language
//! model. Its figures on hand-labelled operations of real specs are in
//! `tests/inference/` and `docs/audit.md`.

use crate::source::{Pos, SourceMap};
use crate::vocab::Effect;

/// The words that decided an inferred fact, and where they stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// The words as the spec writes them: `adds points to the guest's
    /// balance`, `refunds the deposit`, `does not create`.
    pub words: String,
    /// The field they stand in: `summary`, `description`, `operationId`,
    /// `path`, `requestBody.ClientToken`, `parameters.requestId`.
    pub field: String,
    /// Where the words start (the field's value when they could not be
    /// placed more precisely).
    pub pos: Pos,
}

/// A fact read from the spec's words, with its evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Inferred<T> {
    pub value: T,
    pub evidence: Evidence,
}

/// How a text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextKind {
    /// The one-line summary: its first word is an imperative verb.
    Summary,
    /// A description: sentences, verbs in the third person.
    Prose,
    /// An identifier (`rerunBuild`, `/actions/reboot`): split into words,
    /// the first of which is a verb when the name is an action.
    Name,
}

/// One text of an operation, as the reader takes it.
#[derive(Debug, Clone)]
pub(crate) struct Text<'a> {
    pub field: String,
    pub text: &'a str,
    pub pos: Pos,
    pub kind: TextKind,
}

/// A word of a text: lower-cased, with its byte range and sentence.
#[derive(Debug, Clone)]
struct Token {
    word: String,
    start: usize,
    end: usize,
    sentence: usize,
}

fn tokens(text: &str, kind: TextKind) -> Vec<Token> {
    let mut out = Vec::new();
    let mut sentence = 0usize;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphanumeric() {
            let start = i;
            while i < bytes.len() {
                let b = bytes[i];
                let inner = (b == b'-' || b == b'\'')
                    && kind != TextKind::Name
                    && bytes.get(i + 1).is_some_and(u8::is_ascii_alphabetic);
                if b.is_ascii_alphanumeric() || inner {
                    // A name splits at a lower-to-upper step: `rerunBuild`.
                    if kind == TextKind::Name
                        && i > start
                        && b.is_ascii_uppercase()
                        && bytes[i - 1].is_ascii_lowercase()
                    {
                        break;
                    }
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(Token {
                word: text[start..i].to_ascii_lowercase(),
                start,
                end: i,
                sentence,
            });
            continue;
        }
        let ends_sentence = match c {
            b'.' | b'!' | b'?' | b';' => bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace()),
            b'\n' => bytes.get(i + 1) == Some(&b'\n') || bytes.get(i + 1) == Some(&b'-'),
            b':' => bytes.get(i + 1) == Some(&b'\n'),
            _ => false,
        };
        if ends_sentence {
            sentence += 1;
        }
        // Skip the rest of a multi-byte character.
        i += 1;
        while i < bytes.len() && !text.is_char_boundary(i) {
            i += 1;
        }
    }
    out
}

/// Words that turn a following verb into its denial.
const NEGATIONS: &[&str] = &[
    "not", "no", "never", "without", "doesn't", "don't", "won't", "cannot", "can't", "isn't",
    "aren't", "nor", "neither",
];

/// Whether the verb at `at` is denied by one of the three words before it in
/// its sentence ("does not create", "will never send", "without charging").
fn negated(toks: &[Token], at: usize) -> bool {
    let sentence = toks[at].sentence;
    toks[..at]
        .iter()
        .rev()
        .take_while(|t| t.sentence == sentence)
        .take(3)
        .any(|t| NEGATIONS.contains(&t.word.as_str()))
}

fn next_word(toks: &[Token], at: usize) -> Option<&str> {
    toks.get(at + 1)
        .filter(|t| t.sentence == toks[at].sentence)
        .map(|t| t.word.as_str())
}

/// What may follow a verb used as a verb, where the same word is also a
/// noun (`refunds the deposit` against `refunds are issued`).
const OBJECTS: &[&str] = &[
    "the",
    "a",
    "an",
    "all",
    "any",
    "every",
    "each",
    "its",
    "their",
    "your",
    "his",
    "her",
    "them",
    "it",
    "one",
    "money",
    "funds",
    "back",
    "out",
    "email",
    "emails",
    "notification",
    "notifications",
    "message",
    "messages",
    "sms",
    "invitation",
    "invitations",
    "invite",
    "webhook",
    "webhooks",
    "receipt",
    "payment",
    "payments",
    "amount",
    "deposit",
    "customer",
    "card",
    "user",
    "users",
    "subscribers",
    "registrants",
    "event",
    "events",
    "points",
    "credits",
    "new",
    "this",
    "that",
    "these",
    "those",
    "some",
    "balance",
    "member",
    "members",
];

/// The effect a verb stands for when a repeat of the operation repeats it.
fn verb_effect(word: &str) -> Option<Effect> {
    Some(match word {
        "append" | "appends" => Effect::Append,
        "increment" | "increments" => Effect::Increment,
        "decrement" | "decrements" | "deduct" | "deducts" | "subtract" | "subtracts" => {
            Effect::Decrement
        }
        "send" | "sends" | "resend" | "resends" | "re-send" | "re-sends" | "notify"
        | "notifies" | "emails" | "publishes" | "broadcast" | "broadcasts" | "redeliver"
        | "redelivers" | "re-deliver" | "re-delivers" | "charge" | "charges" | "refund"
        | "refunds" | "pay" | "pays" | "transfer" | "transfers" | "purchase" | "purchases"
        | "buy" | "buys" => Effect::External,
        "trigger" | "triggers" | "rerun" | "reruns" | "re-run" | "re-runs" | "reboot"
        | "reboots" | "restart" | "restarts" | "regenerate" | "regenerates" | "re-generate"
        | "re-generates" | "rotate" | "rotates" | "start" | "starts" => Effect::Create,
        _ => return None,
    })
}

/// What a call charges or pays back when a sentence says so in the
/// passive: the noun, then the participle after `is`, `are`, `will be` or
/// `gets`.
const MONEY_NOUNS: &[&str] = &[
    "fee",
    "fees",
    "penalty",
    "penalties",
    "fine",
    "charge",
    "charges",
    "deposit",
    "deposits",
    "refund",
    "amount",
    "payment",
    "surcharge",
];

/// The start of "a late fee is charged" when the participle at `at` ends
/// it: a money noun within two words before the verb `is`/`are`/`be`/
/// `gets`, in the same sentence, and no negation before the noun ("no fee
/// is charged").
fn passive_money(toks: &[Token], at: usize) -> Option<usize> {
    if !matches!(
        toks[at].word.as_str(),
        "charged" | "billed" | "debited" | "refunded" | "deducted" | "collected"
    ) || at < 2
    {
        return None;
    }
    let sentence = toks[at].sentence;
    let verb = &toks[at - 1];
    if verb.sentence != sentence || !matches!(verb.word.as_str(), "is" | "are" | "be" | "gets") {
        return None;
    }
    // "will be charged": the noun stands before "will".
    let before = if verb.word == "be" && at >= 3 && toks[at - 2].word == "will" {
        at - 2
    } else {
        at - 1
    };
    let noun = (before.saturating_sub(2)..before)
        .rev()
        .find(|&i| toks[i].sentence == sentence && MONEY_NOUNS.contains(&toks[i].word.as_str()))?;
    if negated(toks, noun) {
        return None;
    }
    // From the noun's article ("a late fee", "the deposit"), as a person
    // would quote it.
    let article = |i: usize| {
        toks[i].sentence == sentence
            && matches!(
                toks[i].word.as_str(),
                "a" | "an" | "the" | "any" | "its" | "your" | "their"
            )
    };
    Some(if noun >= 1 && article(noun - 1) {
        noun - 1
    } else if noun >= 2 && article(noun - 2) {
        noun - 2
    } else {
        noun
    })
}

/// Verbs that are also common nouns: they count only followed by an object.
fn needs_object(word: &str) -> bool {
    matches!(
        word,
        "charge"
            | "charges"
            | "refund"
            | "refunds"
            | "transfer"
            | "transfers"
            | "pay"
            | "pays"
            | "purchase"
            | "purchases"
            | "emails"
            | "trigger"
            | "triggers"
            | "broadcast"
            | "broadcasts"
            | "start"
            | "starts"
    )
}

/// Verbs read in a description's third person: the base forms there are
/// usually addressed to the reader ("send a PUT request to …").
fn third_person(word: &str) -> bool {
    word.ends_with('s') && !word.ends_with("ss")
}

/// Nouns of a running total: what "adds … to the balance" adds to.
const TOTALS: &[&str] = &[
    "balance",
    "balances",
    "total",
    "totals",
    "count",
    "counter",
    "counters",
    "quota",
    "points",
    "credit",
    "credits",
    "quantity",
    "stock",
    "inventory",
    "log",
    "history",
    "end",
    "queue",
];

/// "each call", "every time", "each request": the words that say a repeat
/// repeats.
fn says_each_call(toks: &[Token], sentence: usize) -> bool {
    toks.windows(2).any(|w| {
        w[0].sentence == sentence
            && w[1].sentence == sentence
            && matches!(w[0].word.as_str(), "each" | "every")
            && matches!(
                w[1].word.as_str(),
                "call" | "time" | "request" | "invocation" | "submission"
            )
    })
}

/// A found claim: the effect, and the token range of its words.
struct Claim {
    effect: Effect,
    first: usize,
    last: usize,
}

/// The first claim of a non-idempotent effect in `text`.
fn repeat_effect(
    kind: TextKind,
    toks: &[Token],
    plain_create: PlainCreate,
    field: bool,
) -> Option<Claim> {
    for (at, tok) in toks.iter().enumerate() {
        let word = tok.word.as_str();
        let lead = at == 0 || toks[at - 1].sentence != tok.sentence;
        let position_ok = match kind {
            TextKind::Summary => lead || third_person(word),
            // "Creates …", or DigitalOcean's "To start the installation
            // of updates, send a PUT request to …".
            TextKind::Prose => {
                third_person(word)
                    || (at == 1 || at > 1 && toks[at - 2].sentence != tok.sentence)
                        && toks[at - 1].word == "to"
                        && toks[at - 1].sentence == tok.sentence
            }
            // A name is read by its first word only, a base form:
            // `rerunBuild`, not `buildRerun` or `broadcasts/remove`.
            TextKind::Name => at == name_lead(toks) && !word.ends_with('s'),
        };
        if negated(toks, at) {
            continue;
        }
        // "a late fee is charged", "the deposit will be refunded": money
        // moved by the call, in the passive, in any sentence of a
        // description (a later sentence tells what else the call does).
        if kind != TextKind::Name
            && !field
            && let Some(first) = passive_money(toks, at)
        {
            return Some(Claim {
                effect: Effect::External,
                first,
                last: at,
            });
        }
        // "a new version" is no verb: it is read wherever it stands.
        if word == "new"
            && next_word(toks, at) == Some("version")
            && toks[..at]
                .iter()
                .rev()
                .take_while(|t| t.sentence == tok.sentence)
                .take(3)
                .any(|t| matches!(t.word.as_str(), "creates" | "create" | "adds" | "produces"))
        {
            return Some(Claim {
                effect: Effect::Create,
                first: at.saturating_sub(2),
                last: at + 1,
            });
        }
        if !position_ok {
            continue;
        }
        // A request field's description names what the field is for, not
        // what the call does ("the day that starts a workweek"): only its
        // totals and versions count.
        // A description's verbs count in its first sentence, which says
        // what the call does; later ones describe the feature around it
        // ("… Amazon Pinpoint sends you an email when …"), unless they say
        // each call does it.
        let verb_counts = !field
            && (kind != TextKind::Prose || tok.sentence == 0 || says_each_call(toks, tok.sentence));
        if let Some(effect) = verb_effect(word).filter(|_| verb_counts) {
            let next = next_word(toks, at);
            if next.is_some_and(|n| NEGATIONS.contains(&n) || n == "nothing") {
                continue;
            }
            // A name says a repeat repeats only with a verb that means it:
            // `rerunBuild`, `rotateKey`. Others lead nouns and states:
            // `PayCode`, `PurchaseOrders`, `notifyReadList`,
            // `StartPipeline`, a `/trigger/{name}` path.
            if kind == TextKind::Name
                && !matches!(
                    word,
                    "rerun"
                        | "reboot"
                        | "restart"
                        | "regenerate"
                        | "rotate"
                        | "redeliver"
                        | "resend"
                        | "append"
                        | "increment"
                        | "decrement"
                )
            {
                continue;
            }
            // A PUT to a named URL starts or triggers that one thing.
            if plain_create == PlainCreate::Named
                && (word.starts_with("start") || word.starts_with("trigger"))
            {
                continue;
            }
            // "Sends new or updated rates": data for an upsert.
            let after: Vec<&str> = toks
                .iter()
                .skip(at + 1)
                .take(4)
                .map(|t| t.word.as_str())
                .collect();
            if after.contains(&"or") && after.iter().any(|w| w.starts_with("update")) {
                continue;
            }
            // "emails" is a verb after its subject, not after an article.
            if word == "emails"
                && !lead
                && !matches!(
                    toks[at - 1].word.as_str(),
                    "and" | "also" | "then" | "it" | "call" | "endpoint" | "operation" | "request"
                )
            {
                continue;
            }
            // "events include message sends": a noun.
            if at > 0 && matches!(toks[at - 1].word.as_str(), "message" | "email" | "messages") {
                continue;
            }
            // "sends back an HTTP 200": the answer, not a message.
            if word.contains("send")
                && toks.iter().skip(at + 1).take(3).any(|t| {
                    matches!(
                        t.word.as_str(),
                        "back" | "http" | "response" | "status" | "request" | "requests"
                    )
                })
            {
                continue;
            }
            // Playback and agents start as a state; a job starts anew.
            if word.starts_with("start") && !starts_a_job(toks, at) {
                continue;
            }
            // GitHub's "This endpoint triggers notifications": a note on
            // rate limits, sent once per change, not per call.
            if matches!(word, "trigger" | "triggers")
                && next.is_some_and(|n| n.starts_with("notification"))
            {
                continue;
            }
            // A domain or a zone is transferred as ownership, once; money
            // is what a repeat transfers again.
            if word.starts_with("transfer") && !moves_money(toks, at) {
                continue;
            }
            if needs_object(word)
                && kind != TextKind::Name
                && !next.is_some_and(|n| OBJECTS.contains(&n))
            {
                continue;
            }
            let last = object_end(toks, at);
            return Some(Claim {
                effect,
                first: at,
                last,
            });
        }
        // "adds": only to a running total, or when each call adds.
        // In a description, the call's own "adds", not advice to the reader
        // ("you must add a new default first").
        if matches!(word, "add" | "adds")
            && kind != TextKind::Name
            && !field
            && (kind == TextKind::Summary || word == "adds" || lead)
        {
            let next = next_word(toks, at);
            if next.is_some_and(|n| NEGATIONS.contains(&n) || n == "nothing") {
                continue;
            }
            let sentence = tok.sentence;
            let rest: Vec<&Token> = toks[at + 1..]
                .iter()
                .take_while(|t| t.sentence == sentence)
                .take(10)
                .collect();
            let to_total = rest.iter().position(|t| t.word == "to").is_some_and(|to| {
                rest[to + 1..]
                    .iter()
                    .take(4)
                    .any(|t| TOTALS.contains(&t.word.as_str()))
            });
            // "adds a new X" is a create, read where a plain create is.
            let adds_new = plain_create != PlainCreate::Never
                && plain_create != PlainCreate::Named
                && (next == Some("new")
                    || (matches!(next, Some("a" | "an"))
                        && rest.get(1).is_some_and(|t| t.word == "new")));
            if to_total || says_each_call(toks, sentence) || adds_new {
                // The quote runs to the total it adds to.
                let to = rest.iter().position(|t| t.word == "to");
                let last = to
                    .and_then(|to| {
                        rest[to..]
                            .iter()
                            .position(|t| TOTALS.contains(&t.word.as_str()))
                            .map(|p| at + 1 + to + p)
                    })
                    .unwrap_or_else(|| object_end(toks, at));
                return Some(Claim {
                    effect: Effect::Append,
                    first: at,
                    last,
                });
            }
        }
        // "increases the balance by", "decreases … by".
        if !field
            && matches!(word, "increases" | "decreases" | "increase" | "decrease")
            && (kind == TextKind::Prose && third_person(word) || kind == TextKind::Summary)
        {
            let sentence = tok.sentence;
            let by = toks[at + 1..]
                .iter()
                .take_while(|t| t.sentence == sentence)
                .take(8)
                .position(|t| t.word == "by");
            if let Some(by) = by {
                let effect = if word.starts_with("inc") {
                    Effect::Increment
                } else {
                    Effect::Decrement
                };
                return Some(Claim {
                    effect,
                    first: at,
                    last: at + 1 + by,
                });
            }
        }
        // A PUT or DELETE whose summary or description creates, and does
        // not create-or-update: Xero's "Creates one or more new invoices".
        let plain_create_counts = match plain_create {
            PlainCreate::Never => false,
            PlainCreate::Named => false,
            // "Creates a new account" makes one, named or not.
            PlainCreate::BodyNamed => toks
                .iter()
                .skip(at + 1)
                .take(3)
                .any(|t| t.word == "new" && t.sentence == tok.sentence),
            PlainCreate::Always => true,
        };
        if plain_create_counts
            && matches!(word, "create" | "creates")
            // A generated `create…` name counts on a collection only.
            && (lead && kind != TextKind::Name
                || kind == TextKind::Name
                    && at == name_lead(toks)
                    && plain_create == PlainCreate::Always)
            && !upsert(toks, at)
        {
            return Some(Claim {
                effect: Effect::Create,
                first: at,
                last: object_end(toks, at),
            });
        }
    }
    None
}

/// Whether a "start" at `at` starts a job, which a repeat starts again.
fn starts_a_job(toks: &[Token], at: usize) -> bool {
    toks.iter().skip(at + 1).take(4).any(|t| {
        matches!(
            t.word.as_str(),
            "job"
                | "jobs"
                | "import"
                | "migration"
                | "backup"
                | "build"
                | "run"
                | "export"
                | "scan"
                | "task"
                | "workflow"
                | "deployment"
                | "installation"
                | "execution"
                | "process"
                | "pipeline"
                | "analysis"
                | "training"
                | "restore"
                | "creation"
                | "sync"
                | "synchronization"
                | "test"
        )
    })
}

/// Whether the two words after `at` name money.
fn moves_money(toks: &[Token], at: usize) -> bool {
    toks.iter().skip(at + 1).take(2).any(|t| {
        matches!(
            t.word.as_str(),
            "funds"
                | "money"
                | "amount"
                | "payment"
                | "payments"
                | "balance"
                | "credits"
                | "points"
                | "cash"
                | "payout"
                | "payouts"
        )
    })
}

/// Where a name's verb stands: after an HTTP method (Adyen's
/// `post-getAuthenticationResult`) and a `Deprecated` prefix (Square's).
fn name_lead(toks: &[Token]) -> usize {
    toks.iter()
        .take_while(|t| matches!(t.word.as_str(), "post" | "put" | "patch" | "deprecated"))
        .count()
}

/// "create or update", "creates … if it does not exist": a create that a
/// repeat leaves alone.
fn upsert(toks: &[Token], at: usize) -> bool {
    let sentence = toks[at].sentence;
    let rest: Vec<&str> = toks[at + 1..]
        .iter()
        .take_while(|t| t.sentence == sentence)
        .map(|t| t.word.as_str())
        .collect();
    rest.windows(2).any(|w| {
        w[0] == "or"
            && matches!(
                w[1],
                "update"
                    | "updates"
                    | "replace"
                    | "replaces"
                    | "overwrite"
                    | "overwrites"
                    | "modify"
                    | "modifies"
                    | "edit"
                    | "edits"
                    | "set"
                    | "sets"
            )
    }) || rest.iter().enumerate().any(|(i, w)| {
        // "if it does not exist", "doesn't already exist", "already exists".
        matches!(*w, "exist" | "exists")
            && rest[i.saturating_sub(3)..i]
                .iter()
                .any(|n| NEGATIONS.contains(n) || *n == "already")
    }) || rest.windows(2).any(|w| w == ["or", "replace"])
        || rest.first() == Some(&"or")
        // "Create/Overwrite", "create/update".
        || rest.first().is_some_and(|w| {
            matches!(*w, "update" | "updates" | "overwrite" | "overwrites" | "replace" | "replaces")
        })
}

/// The last token of a verb's object: up to three words, stopping at a
/// preposition or the sentence's end.
fn object_end(toks: &[Token], at: usize) -> usize {
    const STOPS: &[&str] = &[
        "to", "for", "from", "with", "when", "if", "and", "or", "in", "on", "by", "through", "via",
        "at", "into", "after", "before", "so", "which", "that", "of", "within",
    ];
    let sentence = toks[at].sentence;
    let mut last = at;
    for (i, t) in toks.iter().enumerate().skip(at + 1).take(3) {
        // "one or more invoices".
        let or_more = t.word == "or" && toks.get(i + 1).is_some_and(|n| n.word == "more");
        if t.sentence != sentence || (STOPS.contains(&t.word.as_str()) && !or_more) {
            break;
        }
        last = i;
    }
    last
}

/// Verbs that lead a read: the words RPC-style APIs name queries with.
const READ_VERBS: &[&str] = &[
    "search",
    "query",
    "list",
    "get",
    "retrieve",
    "fetch",
    "find",
    "lookup",
    "describe",
    "validate",
    "preview",
    "estimate",
    "calculate",
    "simulate",
    "count",
    "searches",
    "queries",
    "lists",
    "gets",
    "retrieves",
    "fetches",
    "finds",
    "describes",
    "validates",
    "previews",
    "estimates",
    "calculates",
    "simulates",
    "counts",
    "classify",
    "classifies",
    "lookups",
    "download",
    "downloads",
    "check",
    "checks",
];

/// Phrases that say a call stores nothing, wherever they stand.
const READ_PHRASES: &[&[&str]] = &[
    &["does", "not", "create"],
    &["doesn't", "create"],
    &["without", "saving"],
    &["without", "creating"],
    &["without", "storing"],
    &["without", "persisting"],
    &["dry", "run"],
    &["dry-run"],
    &["read-only"],
    &["no", "changes", "are", "made"],
    &["does", "not", "modify"],
    &["does", "not", "change"],
    &["not", "be", "saved"],
    &["is", "not", "saved"],
    &["are", "not", "saved"],
    &["not", "persisted"],
];

/// Verbs that say a call writes: any of them in the summary, operationId or
/// the path's last word keeps a POST from being read as a query.
const WRITE_VERBS: &[&str] = &[
    "create",
    "creates",
    "update",
    "updates",
    "delete",
    "deletes",
    "remove",
    "removes",
    "add",
    "adds",
    "send",
    "sends",
    "cancel",
    "cancels",
    "set",
    "sets",
    "save",
    "saves",
    "submit",
    "submits",
    "start",
    "starts",
    "stop",
    "stops",
    "trigger",
    "triggers",
    "charge",
    "charges",
    "pay",
    "pays",
    "refund",
    "refunds",
    "capture",
    "captures",
    "void",
    "voids",
    "approve",
    "approves",
    "confirm",
    "confirms",
    "complete",
    "completes",
    "close",
    "closes",
    "archive",
    "archives",
    "import",
    "imports",
    "upload",
    "uploads",
    "register",
    "registers",
    "enable",
    "enables",
    "disable",
    "disables",
    "assign",
    "assigns",
    "attach",
    "attaches",
    "detach",
    "detaches",
    "generate",
    "generates",
    "issue",
    "issues",
    "publish",
    "publishes",
    "execute",
    "executes",
    "insert",
    "inserts",
    "write",
    "writes",
    "modify",
    "modifies",
    "replace",
    "replaces",
    "reset",
    "resets",
    "revoke",
    "revokes",
    "accept",
    "accepts",
    "reject",
    "rejects",
    "apply",
    "applies",
    "store",
    "stores",
    "log",
    "login",
    "logout",
    "mint",
    "mints",
    "subscribe",
    "unsubscribe",
    "invite",
    "invites",
    "verify",
    "verifies",
    "redeem",
    "redeems",
    "move",
    "moves",
    "copy",
    "copies",
    "merge",
    "merges",
    "restore",
    "restores",
    "rename",
    "renames",
];

/// The read an operation's words claim, if they claim one and none of
/// them says it writes: the text's index and the token range.
fn read_claim(texts: &[(&Text<'_>, TextKind, Vec<Token>)]) -> Option<(usize, usize, usize)> {
    let mut found = None;
    for (index, (_, kind, toks)) in texts.iter().enumerate() {
        let strength = says_write(*kind, toks);
        if strength == Some(Strength::Plain) {
            return None;
        }
        // A generic `create…` name reads only through another text.
        if found.is_some() || strength.is_some() {
            continue;
        }
        if let Some((first, last)) = read_phrase(toks).or_else(|| read_lead(*kind, toks)) {
            found = Some((index, first, last));
        }
    }
    found
}

/// Whether a text says the call writes: any write verb of a name (but
/// Twilio's generic `Update…Validate` prefix), the summary's leading verb or
/// one joined to it ("Validate and submit"), a description's first sentence
/// in the third person ("Creates …").
fn says_write(kind: TextKind, toks: &[Token]) -> Option<Strength> {
    let write = |at: usize| WRITE_VERBS.contains(&toks[at].word.as_str()) && !negated(toks, at);
    let plain = |yes: bool| yes.then_some(Strength::Plain);
    match kind {
        TextKind::Name => {
            let lead = name_lead(toks);
            // Generated names that start every operation with `create` or
            // `update` (Twilio's `UpdateFlowValidate`, OpenAI's
            // `createModeration`) say little when the rest has no write.
            let generic = toks
                .get(lead)
                .is_some_and(|t| matches!(t.word.as_str(), "create" | "update"))
                && toks.len() > lead + 1;
            if generic && !(lead + 1..toks.len()).any(write) {
                return Some(Strength::Generic);
            }
            plain((lead..toks.len()).any(write))
        }
        TextKind::Summary => plain((0..toks.len()).any(|at| {
            write(at)
                && (at == 0
                    || toks[at - 1].sentence != toks[at].sentence
                    || matches!(toks[at - 1].word.as_str(), "and" | "or" | "then" | "to"))
        })),
        // A verb of the first sentence, in the third person, leading it or
        // followed by its object ("Creates a …", "This call sends the …");
        // "… pay in advance charges" ends on a noun.
        TextKind::Prose => plain(
            (0..toks.len())
                .take_while(|at| toks[*at].sentence == 0)
                .any(|at| {
                    write(at)
                        && third_person(&toks[at].word)
                        && (at == 0 || next_word(toks, at).is_some_and(|n| OBJECTS.contains(&n)))
                }),
        ),
    }
}

/// How plainly a text says the call writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strength {
    /// A generated name's leading `create`/`update`: a write unless another
    /// text leads with a query verb.
    Generic,
    Plain,
}

/// "does not create", "without saving", "dry run", wherever they stand.
fn read_phrase(toks: &[Token]) -> Option<(usize, usize)> {
    READ_PHRASES
        .iter()
        .find_map(|phrase| phrase_at(toks, phrase).map(|at| (at, at + phrase.len() - 1)))
}

/// A query verb leading the text (`Search …`, `searchCatalog`,
/// `Retrieves …`), or ending a name (`perform-search`, `zip_lookup`).
fn read_lead(kind: TextKind, toks: &[Token]) -> Option<(usize, usize)> {
    let mut lead = if kind == TextKind::Name {
        name_lead(toks)
    } else {
        0
    };
    if toks
        .get(lead)
        .is_some_and(|t| matches!(t.word.as_str(), "batch" | "bulk"))
    {
        lead += 1;
    }
    let first = toks.get(lead)?;
    let next = toks.get(lead + 1).map(|t| t.word.as_str());
    // "Check in a guest" writes.
    let check_in = first.word.starts_with("check") && matches!(next, Some("in" | "out" | "into"));
    let leads = READ_VERBS.contains(&first.word.as_str())
        && !check_in
        && (kind != TextKind::Prose || third_person(&first.word) || lead == 0);
    if leads {
        return Some((lead, lead));
    }
    // "lookup" written "look up".
    if first.word == "look" && next == Some("up") {
        return Some((lead, lead + 1));
    }
    // A name in one lower-case word (`Getinputtokencounts`) leads with its verb.
    if kind == TextKind::Name && toks.len() == lead + 1 {
        let word = first.word.as_str();
        if [
            "get", "list", "search", "query", "retrieve", "describe", "preview",
        ]
        .iter()
        .any(|v| word.len() > v.len() + 2 && word.starts_with(v))
        {
            return Some((lead, lead));
        }
    }
    if kind == TextKind::Name && toks.len() > lead + 1 {
        let last = toks.len() - 1;
        // Google's `testIamPermissions`.
        if first.word == "test" && toks[last].word == "permissions" {
            return Some((lead, last));
        }
        if READ_VERBS.contains(&toks[last].word.as_str()) && !toks[last].word.ends_with('s') {
            return Some((last, last));
        }
    }
    None
}

/// Where a plain "creates" says a repeat makes something new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlainCreate {
    /// A POST (it creates by its method already), or a PUT of Azure
    /// Resource Manager, whose contract makes every PUT a create-or-update.
    Never,
    /// A PUT to a URL that ends with the new resource's name (`PUT
    /// /jobs/{jobId}`): RFC 9110's create-or-replace at this URL, so its
    /// "Creates …" makes nothing new on a repeat. A new version each call
    /// is still read.
    Named,
    /// A PUT whose body names what it creates (AWS's `PUT /meshes` with
    /// `meshName`): a repeat finds the name taken, unless the words say
    /// each call creates a new one.
    BodyNamed,
    /// A PUT or DELETE to a collection or an action: Xero's "Creates one
    /// or more new invoices".
    Always,
}

impl PlainCreate {
    /// The rule for `method` on `path`, whose request body has the
    /// top-level `fields`.
    pub(crate) fn of(put_or_delete: bool, path: &str, fields: &[String]) -> PlainCreate {
        // Fragments some specs add to tell operations apart.
        let path = path.split(['#', '?']).next().unwrap_or(path);
        let lower = path.to_ascii_lowercase();
        let body_names_it = fields
            .iter()
            .any(|f| f.to_ascii_lowercase().ends_with("name"));
        if !put_or_delete || lower.contains("/providers/microsoft.") {
            PlainCreate::Never
        } else if path.trim_end_matches('/').ends_with('}') {
            PlainCreate::Named
        } else if body_names_it {
            PlainCreate::BodyNamed
        } else {
            PlainCreate::Always
        }
    }
}

/// The effect an operation's words say, with the words. Non-idempotent
/// claims come first: an operation that "searches and charges" charges.
pub(crate) fn infer_effect(
    sources: &SourceMap,
    texts: &[Text<'_>],
    plain_create: PlainCreate,
    is_post: bool,
) -> Option<Inferred<Effect>> {
    let read: Vec<(&Text<'_>, TextKind, Vec<Token>)> = texts
        .iter()
        .map(|t| {
            let kind = effective_kind(t);
            (t, kind, tokens(t.text, kind))
        })
        .collect();
    // "This API is idempotent": the spec says it outright.
    let says_idempotent = read.iter().any(|(text, _, toks)| {
        !text.field.starts_with("requestBody.")
            && toks.iter().enumerate().any(|(at, t)| {
                t.word == "idempotent" && !negated(toks, at) && at > 0 && {
                    let before = toks[at - 1].word.as_str();
                    matches!(before, "is" | "are" | "be" | "an" | "fully" | "always")
                }
            })
    });
    for (text, kind, toks) in read.iter().filter(|_| !says_idempotent) {
        let field = text.field.starts_with("requestBody.");
        let plain_create = if field {
            PlainCreate::Never
        } else {
            plain_create
        };
        if let Some(claim) = repeat_effect(*kind, toks, plain_create, field) {
            return Some(Inferred {
                value: claim.effect,
                evidence: evidence(sources, text, *kind, toks, claim.first, claim.last),
            });
        }
    }
    if is_post {
        // Request-field texts are read for effects only: a field's
        // description rarely says what the call as a whole does.
        let whole: Vec<(&Text<'_>, TextKind, Vec<Token>)> = read
            .into_iter()
            .filter(|(t, _, _)| !t.field.starts_with("requestBody."))
            .collect();
        if let Some((index, first, last)) = read_claim(&whole) {
            let (text, kind, toks) = &whole[index];
            return Some(Inferred {
                value: Effect::Read,
                evidence: evidence(sources, text, *kind, toks, first, last),
            });
        }
    }
    None
}

/// How a text is read: a summary that is one identifier
/// (`SearchTerminalCheckouts`) reads as a name.
fn effective_kind(text: &Text<'_>) -> TextKind {
    if text.kind == TextKind::Summary && !text.text.trim().contains(char::is_whitespace) {
        TextKind::Name
    } else {
        text.kind
    }
}

/// The words of tokens `first..=last` of `text`, placed in the file.
fn evidence(
    sources: &SourceMap,
    text: &Text<'_>,
    kind: TextKind,
    toks: &[Token],
    first: usize,
    last: usize,
) -> Evidence {
    let (start, mut end) = (toks[first].start, toks[last.max(first)].end);
    // A closing quote or backtick belongs to the words it closes.
    while text
        .text
        .as_bytes()
        .get(end)
        .is_some_and(|b| matches!(b, b'`' | b'"' | b'\''))
    {
        end += 1;
    }
    let words = text.text.get(start..end).unwrap_or_default();
    // Folded lines join with a space in what the evidence shows.
    let words: String = words.split_whitespace().collect::<Vec<_>>().join(" ");
    let pos = match kind {
        TextKind::Name => text.pos,
        _ => {
            let first_word = toks[first].word.as_str();
            locate(sources, text.pos, text.text, start, first_word)
        }
    };
    Evidence {
        words,
        field: text.field.clone(),
        pos,
    }
}

/// Where the word at byte `start` of a scalar whose value begins at `pos`
/// stands in the file: searched from `pos`, within a window the size of
/// the value (escapes and folds make the value and the file differ).
fn locate(sources: &SourceMap, pos: Pos, text: &str, start: usize, word: &str) -> Pos {
    let Some(file) = sources.get(pos.file) else {
        return pos;
    };
    // The same word may stand earlier in the value: skip as many
    // occurrences in the file as there are before `start` in the value.
    let lower = text.to_ascii_lowercase();
    let before = lower[..start.min(lower.len())].matches(word).count();
    let window = text.len() * 2 + 256;
    let mut from = pos;
    for _ in 0..before {
        match file.find_after(from, word, window) {
            Some(p) => from = Pos::new(p.file, p.line as usize, p.column as usize + 1),
            None => return pos,
        }
    }
    file.find_after(from, word, window).unwrap_or(pos)
}

/// Phrases that say an input lets the server recognise a repeat.
const KEY_STEMS: &[&str] = &["idempoten", "dedup", "de-dup"];
const KEY_PHRASES: &[&[&str]] = &[
    &["already", "been", "completed"],
    &["duplicated", "requests"],
    &["replayed", "requests"],
    &["identical", "requests"],
    &["prevent", "duplicate"],
    &["prevents", "duplicate"],
    &["avoid", "duplicate"],
    &["avoids", "duplicate"],
    &["already", "been", "processed"],
    &["duplicate", "request"],
    &["duplicate", "requests"],
    &["duplicate", "processing"],
    &["duplicate", "submissions"],
    &["duplicate", "operations"],
    &["safely", "retry"],
    &["safely", "retried"],
    &["retried", "safely"],
    &["retry", "safely"],
];

/// Phrases that say a repeat does not run again, whatever negation leads
/// them ("without running the operation twice", "not performed multiple
/// times").
const ONCE_PHRASES: &[&[&str]] = &[
    &["operation", "twice"],
    &["request", "twice"],
    &["multiple", "times"],
    &["more", "than", "once"],
    &["only", "once"],
];

/// Input names AWS gives its idempotency tokens, squashed to lower case:
/// `ClientToken`, `clientRequestToken`, `IdempotencyToken`. Their
/// descriptions are often one line ("A client token.").
const TOKEN_NAMES: &[&str] = &["clienttoken", "clientrequesttoken", "idempotencytoken"];

/// How plainly an input says it is the key; the plainest wins when several
/// inputs say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum KeyWords {
    /// "idempotency", "deduplicate".
    Says,
    /// "ignore the request if it has already been completed", "identical
    /// requests".
    Describes,
    /// Named as AWS names its tokens.
    Named,
    /// "without running the operation twice".
    Implies,
}

/// Whether `name` is one of [`TOKEN_NAMES`] and its description, if any,
/// calls it unique or a client token (Google's `clientToken` "echoed from
/// the request to the response" is not a key); the evidence is the name.
pub(crate) fn token_named(
    name: &str,
    description: Option<&str>,
    field: String,
    pos: Pos,
) -> Option<Evidence> {
    if let Some(text) = description.map(str::to_ascii_lowercase)
        && !text.trim().is_empty()
        && !["unique", "client token", "idempoten", "retr"]
            .iter()
            .any(|w| text.contains(w))
    {
        return None;
    }
    let squashed: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    TOKEN_NAMES.contains(&squashed.as_str()).then(|| Evidence {
        words: name.to_owned(),
        field,
        pos,
    })
}

/// The first token of the sentence that holds token `at`.
fn sentence_start(toks: &[Token], at: usize) -> usize {
    toks[..at]
        .iter()
        .rposition(|t| t.sentence != toks[at].sentence)
        .map_or(0, |p| p + 1)
}

/// Whether an input's description says it is an idempotency key; the words
/// if so. A tracing id ("for logging", "to correlate") says none of these,
/// and one that says it is *not* for idempotency is denied.
pub(crate) fn describes_key(
    sources: &SourceMap,
    field: String,
    description: &str,
    pos: Pos,
) -> Option<(KeyWords, Evidence)> {
    let text = Text {
        field,
        text: description,
        pos,
        kind: TextKind::Prose,
    };
    let toks = tokens(description, TextKind::Prose);
    let found = |words, first, last| {
        Some((
            words,
            evidence(sources, &text, TextKind::Prose, &toks, first, last),
        ))
    };
    if let Some(at) = toks
        .iter()
        .enumerate()
        .position(|(at, t)| KEY_STEMS.iter().any(|s| t.word.starts_with(s)) && !negated(&toks, at))
    {
        let first = at.saturating_sub(2).max(sentence_start(&toks, at));
        return found(KeyWords::Says, first, object_end(&toks, at));
    }
    for phrase in KEY_PHRASES {
        if let Some(at) = phrase_at(&toks, phrase).filter(|at| !negated(&toks, *at)) {
            return found(KeyWords::Describes, at, at + phrase.len() - 1);
        }
    }
    // "a second request with the same ID is ignored".
    if let Some(at) = toks.iter().position(|t| t.word == "ignored") {
        let sentence = toks[at].sentence;
        if let Some(from) = toks[..at]
            .iter()
            .position(|t| t.sentence == sentence && matches!(t.word.as_str(), "same" | "second"))
        {
            return found(KeyWords::Describes, from, at);
        }
    }
    for phrase in ONCE_PHRASES {
        // Said of the request, and denied: "not performed multiple times".
        if let Some(at) = phrase_at(&toks, phrase).filter(|at| {
            let sentence = toks[*at].sentence;
            let in_sentence = || toks.iter().filter(|t| t.sentence == sentence);
            (phrase[0] == "only"
                || negated(&toks, *at)
                || in_sentence().any(|t| t.word == "without"))
                && in_sentence().any(|t| {
                    t.word.starts_with("request")
                        || t.word.starts_with("operation")
                        || t.word.starts_with("retr")
                })
        }) {
            let first = at.saturating_sub(3).max(sentence_start(&toks, at));
            return found(KeyWords::Implies, first, at + phrase.len() - 1);
        }
    }
    None
}

/// Where the words of `phrase` first stand in a row.
fn phrase_at(toks: &[Token], phrase: &[&str]) -> Option<usize> {
    toks.windows(phrase.len())
        .position(|w| w.iter().zip(phrase).all(|(t, p)| t.word == *p))
}

/// The words of a path that can say what it does: its literal segments,
/// the last first (`/droplets/{id}/actions/reboot` → `reboot`).
pub(crate) fn path_action(path: &str) -> Option<&str> {
    path.rsplit('/')
        .find(|s| !s.is_empty() && !s.starts_with('{') && !s.starts_with(':'))
        // A one-word segment in the plural names a collection, no action
        // (`/refunds`); `batch-retrieve-counts` still leads with its verb.
        .filter(|s| s.contains(['-', '_']) || !s.ends_with('s') || s.ends_with("ss"))
}

#[cfg(test)]
mod tests;
