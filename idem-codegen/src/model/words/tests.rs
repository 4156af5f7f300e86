//! The words reader on one text at a time: each kind of evidence, and the
//! near-misses that must not fire.

use super::*;
use crate::source::{FileId, Pos, SourceMap};

fn text(field: &str, kind: TextKind, value: &'static str) -> Text<'static> {
    Text {
        field: field.to_owned(),
        text: value,
        pos: Pos::new(FileId(0), 1, 1),
        kind,
    }
}

/// The effect and quoted words a PUT's summary or description says.
fn put(kind: TextKind, value: &'static str) -> Option<(Effect, String)> {
    let sources = SourceMap::default();
    let field = if kind == TextKind::Summary {
        "summary"
    } else {
        "description"
    };
    infer_effect(
        &sources,
        &[text(field, kind, value)],
        PlainCreate::Always,
        false,
    )
    .map(|i| (i.value, i.evidence.words))
}

/// What a POST's texts say: `(summary, description, operationId)`.
fn post(
    summary: &'static str,
    description: &'static str,
    id: &'static str,
) -> Option<(Effect, String)> {
    let sources = SourceMap::default();
    let mut texts = Vec::new();
    if !summary.is_empty() {
        texts.push(text("summary", TextKind::Summary, summary));
    }
    if !description.is_empty() {
        texts.push(text("description", TextKind::Prose, description));
    }
    if !id.is_empty() {
        texts.push(text("operationId", TextKind::Name, id));
    }
    infer_effect(&sources, &texts, PlainCreate::Never, true).map(|i| (i.value, i.evidence.words))
}

fn says(effect: Effect, words: &str) -> Option<(Effect, String)> {
    Some((effect, words.to_owned()))
}

#[test]
fn adding_to_a_total_appends() {
    assert_eq!(
        put(
            TextKind::Prose,
            "Each call adds `points` to the guest's balance."
        ),
        says(Effect::Append, "adds `points` to the guest's balance")
    );
    assert_eq!(
        put(TextKind::Summary, "Add a new note"),
        says(Effect::Append, "Add a new note")
    );
    assert_eq!(
        put(TextKind::Prose, "Appends a line to the activity log."),
        says(Effect::Append, "Appends a line")
    );
}

#[test]
fn adding_to_a_set_or_adding_nothing_does_not() {
    // GitHub's set membership: a repeat adds nothing more.
    assert_eq!(
        put(TextKind::Summary, "Add a collaborator to the repository"),
        None
    );
    assert_eq!(
        put(TextKind::Prose, "Updating the address adds no charge."),
        None
    );
    // "add" inside another word.
    assert_eq!(
        put(
            TextKind::Prose,
            "Replaces the billing address and additional notes."
        ),
        None
    );
}

#[test]
fn counters_increment_and_decrement() {
    assert_eq!(
        put(TextKind::Prose, "Increments the retry counter."),
        says(Effect::Increment, "Increments the retry counter")
    );
    assert_eq!(
        put(
            TextKind::Prose,
            "Decreases the stock level by the quantity given."
        ),
        says(Effect::Decrement, "Decreases the stock level by")
    );
    assert_eq!(
        put(TextKind::Summary, "Deduct credits"),
        says(Effect::Decrement, "Deduct credits")
    );
}

#[test]
fn money_moved_in_the_passive_calls_out() {
    assert_eq!(
        put(
            TextKind::Prose,
            "Cancels the booking. If it is cancelled within a day of arrival, a late fee is charged."
        ),
        says(Effect::External, "a late fee is charged")
    );
    assert_eq!(
        put(
            TextKind::Prose,
            "Ends the lease; the deposit will be refunded to the card on file."
        ),
        says(Effect::External, "the deposit will be refunded")
    );
    // Denied, or not money: nothing.
    assert_eq!(
        put(TextKind::Prose, "Cancels the booking. No fee is charged."),
        None
    );
    assert_eq!(
        put(
            TextKind::Prose,
            "Replaces the profile. The user is notified by the app."
        ),
        None
    );
    assert_eq!(
        put(
            TextKind::Prose,
            "Sets the price at which the item is charged."
        ),
        None
    );
}

#[test]
fn sending_and_money_call_out() {
    assert_eq!(
        put(
            TextKind::Prose,
            "Cancels the reservation and refunds the deposit through the provider."
        ),
        says(Effect::External, "refunds the deposit")
    );
    assert_eq!(
        put(
            TextKind::Prose,
            "Changes the schedule and emails every registrant."
        ),
        says(Effect::External, "emails every registrant")
    );
    assert_eq!(
        put(TextKind::Summary, "Purchase a Package"),
        says(Effect::External, "Purchase a Package")
    );
    assert_eq!(
        put(TextKind::Prose, "Sends a confirmation to the guest."),
        says(Effect::External, "Sends a confirmation")
    );
}

#[test]
fn money_words_as_nouns_do_not() {
    assert_eq!(put(TextKind::Summary, "Update refund settings"), None);
    assert_eq!(
        put(TextKind::Prose, "Refunds are issued by the finance team."),
        None
    );
    assert_eq!(
        put(TextKind::Prose, "This call does not send any email."),
        None
    );
    // Ownership moves once; money moves again on a repeat.
    assert_eq!(
        put(TextKind::Summary, "Transfer a DNS zone to another account"),
        None
    );
    assert_eq!(
        put(TextKind::Prose, "Transfers funds to the connected account."),
        says(Effect::External, "Transfers funds")
    );
}

#[test]
fn runs_regenerations_and_versions_make_something_new() {
    assert_eq!(
        put(TextKind::Summary, "Re-run build"),
        says(Effect::Create, "Re-run build")
    );
    assert_eq!(
        put(TextKind::Prose, "Regenerates the connection code."),
        says(Effect::Create, "Regenerates the connection code")
    );
    assert_eq!(
        put(
            TextKind::Prose,
            "If the named secret already exists, Azure Key Vault creates a new version of that secret."
        ),
        says(Effect::Create, "creates a new version")
    );
    assert_eq!(
        put(TextKind::Summary, "Creates one or more new invoices"),
        says(Effect::Create, "Creates one or more")
    );
}

#[test]
fn upserts_and_notification_notes_do_not() {
    assert_eq!(
        put(TextKind::Summary, "Create or update an environment"),
        None
    );
    assert_eq!(
        put(
            TextKind::Prose,
            "Creates a new authorization, only if one doesn't already exist."
        ),
        None
    );
    // GitHub's note about rate limits on every content endpoint.
    assert_eq!(
        put(TextKind::Prose, "This endpoint triggers notifications."),
        None
    );
}

#[test]
fn names_lead_with_their_verb() {
    let sources = SourceMap::default();
    let name = |value: &'static str| {
        infer_effect(
            &sources,
            &[text("operationId", TextKind::Name, value)],
            PlainCreate::Always,
            false,
        )
        .map(|i| i.value)
    };
    assert_eq!(name("rerunBuild"), Some(Effect::Create));
    assert_eq!(name("reboot"), Some(Effect::Create));
    assert_eq!(name("buildRerun"), None);
    // Third person in a name is a noun: Resend's `broadcasts/remove`.
    assert_eq!(name("broadcasts/remove"), None);
    // Money verbs lead noun names.
    assert_eq!(name("PayCode_Delete"), None);
}

#[test]
fn queries_read() {
    assert_eq!(
        post("Search reservations by guest", "", ""),
        says(Effect::Read, "Search")
    );
    assert_eq!(
        post(
            "",
            "Calling this method does NOT create the UrlMap.",
            "urlMaps.validate"
        ),
        says(Effect::Read, "does NOT create")
    );
    assert_eq!(
        post("Classify an image url without saving the result", "", ""),
        says(Effect::Read, "without saving")
    );
    assert_eq!(
        post("", "", "testIamPermissions"),
        says(Effect::Read, "testIamPermissions")
    );
    assert_eq!(
        post("", "", "DescribeInstances"),
        says(Effect::Read, "Describe")
    );
    assert_eq!(
        post("", "", "post-getAuthenticationResult"),
        says(Effect::Read, "get")
    );
    assert_eq!(post("", "", "perform-search"), says(Effect::Read, "search"));
    assert_eq!(
        post("Estimate fees for a pay in advance charge", "", ""),
        says(Effect::Read, "Estimate")
    );
    // A generated prefix says less than the summary's verb.
    assert_eq!(
        post(
            "Classifies if text is potentially harmful",
            "",
            "createModeration"
        ),
        says(Effect::Read, "Classifies")
    );
}

#[test]
fn a_write_anywhere_keeps_a_query_from_reading() {
    assert_eq!(post("Search and create a customer", "", ""), None);
    assert_eq!(post("Get or create a session", "", ""), None);
    assert_eq!(
        post("Search customers", "Creates a saved search.", ""),
        None
    );
    assert_eq!(post("", "", "createCustomerSearch"), None);
    // A check-in writes.
    assert_eq!(post("Check in a guest", "", ""), None);
    // A POST that sends says so first.
    assert_eq!(
        post("Validate a phone number", "Sends a code to the number.", ""),
        says(Effect::External, "Sends a code")
    );
}

#[test]
fn keys_are_what_their_descriptions_say() {
    let sources = SourceMap::default();
    let key = |value: &str| {
        describes_key(&sources, "parameters.x".to_owned(), value, Pos::default())
            .map(|(_, e)| e.words)
    };
    assert_eq!(
        key(
            "A unique, case-sensitive identifier that you provide to ensure the idempotency of the request."
        ),
        Some("ensure the idempotency".to_owned())
    );
    assert_eq!(
        key(
            "An optional request ID to identify requests. Specify a unique request ID so that if you must retry your request, the server will know to ignore the request if it has already been completed."
        ),
        Some("already been completed".to_owned())
    );
    assert_eq!(
        key("Used to deduplicate messages sent within five minutes."),
        Some("Used to deduplicate messages sent".to_owned())
    );
    assert_eq!(
        key("Lets you retry the request without running the operation twice."),
        Some("without running the operation twice".to_owned())
    );
}

#[test]
fn tracing_ids_are_not_keys() {
    let sources = SourceMap::default();
    let key =
        |value: &str| describes_key(&sources, "parameters.x".to_owned(), value, Pos::default());
    assert!(
        key("The caller-generated request identity, in the form of a GUID, for logging.").is_none()
    );
    assert!(key("A request id used to correlate logs and traces across services.").is_none());
    assert!(key("Not used for idempotency: a trace id only.").is_none());
    // AWS names its tokens; Google's echo token is not one.
    assert!(
        token_named(
            "ClientToken",
            Some("A client token."),
            "x".into(),
            Pos::default()
        )
        .is_some()
    );
    assert!(token_named("clientRequestToken", None, "x".into(), Pos::default()).is_some());
    assert!(
        token_named(
            "clientToken",
            Some("Opaque token that is echoed from the request to the response."),
            "x".into(),
            Pos::default()
        )
        .is_none()
    );
}

#[test]
fn evidence_is_placed_at_its_words() {
    let mut sources = SourceMap::default();
    let file = sources.add(
        "hotel.yaml".into(),
        "put:\n  description: |\n    Points expire.\n    Each call adds `points` to the balance.\n"
            .into(),
    );
    let value = "Points expire.\nEach call adds `points` to the balance.\n";
    let texts = [Text {
        field: "description".to_owned(),
        text: value,
        pos: Pos::new(file, 2, 16),
        kind: TextKind::Prose,
    }];
    let inferred = infer_effect(&sources, &texts, PlainCreate::Always, false).unwrap();
    assert_eq!(inferred.evidence.words, "adds `points` to the balance");
    assert_eq!(
        (inferred.evidence.pos.line, inferred.evidence.pos.column),
        (4, 15)
    );
}
