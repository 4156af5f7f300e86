#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The integrator docs page: snapshots of both pages for every fixture, the
//! content the page must state (with the concrete values taken from the
//! model and from `idem_runtime::protocol`) and hostile spec text. `idem
//! docs` on the command line is tested with the other commands, in `cli.rs`.
//!
//! `cargo insta review` (or `INSTA_UPDATE=always`) accepts changed snapshots.

mod docs_support;

use docs_support::{assert_inert_and_linked, fixture_path, html_escaped, model_of, pages};
use idem_codegen::docs;
use idem_runtime::protocol;

/// The top-level fixtures, sorted: every one gets both pages snapshotted.
fn fixtures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("../fixtures")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    names
}

#[test]
fn snapshots_of_both_pages() {
    let names = fixtures();
    for required in ["cratebase.yaml", "payments-clean.yaml", "docs-hostile.yaml"] {
        assert!(names.iter().any(|n| n == required), "{required} missing");
    }
    for name in names {
        let stem = name.trim_end_matches(".yaml");
        let pages = pages(&name);
        insta::assert_snapshot!(format!("{stem}.md"), pages.markdown);
        insta::assert_snapshot!(format!("{stem}.html"), pages.html);
    }
}

#[test]
fn rendering_is_deterministic() {
    for name in fixtures() {
        let path = fixture_path(&name);
        let first = docs::render(&model_of(&path)).unwrap();
        let second = docs::render(&model_of(&path)).unwrap();
        assert_eq!(first, second, "{name}");
    }
}

/// Every fixture, the rule fixtures included (odd specs, broken
/// vocabulary): the page renders, and its HTML is inert and self-linked.
#[test]
fn every_fixture_renders_an_inert_page() {
    let mut paths: Vec<_> = fixtures().iter().map(|n| fixture_path(n)).collect();
    for entry in std::fs::read_dir("../fixtures/rules").unwrap() {
        paths.push(entry.unwrap().path());
    }
    paths.sort();
    for path in paths {
        let pages = docs::render(&model_of(&path)).unwrap();
        assert_inert_and_linked(&pages.html, &path.display().to_string());
        let text = format!("{}{}", pages.markdown, pages.html).to_ascii_lowercase();
        assert!(
            !text.contains("exactly-once") && !text.contains("exactly once"),
            "{}",
            path.display()
        );
    }
}

/// `text` with every whitespace run as one space, so prose checks do not
/// depend on where the template wraps its lines.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `needle` occurs in `haystack`, with a useful failure message.
#[track_caller]
fn has(haystack: &str, needle: &str) {
    assert!(haystack.contains(needle), "missing {needle:?}");
}

/// Where `needle` first occurs.
#[track_caller]
fn at(haystack: &str, needle: &str) -> usize {
    haystack
        .find(needle)
        .unwrap_or_else(|| panic!("missing {needle:?}"))
}

#[test]
fn page_states_the_contract_with_concrete_values() {
    let p = pages("payments-clean.yaml");
    let md = &p.markdown;
    let html = &p.html;
    let prose = flat(md);
    // Keyed endpoints: method, path, operation, required, header; the class.
    has(&prose, "Their retry class is `keyed`");
    has(&prose, "Their retry class is `safe`.");
    has(
        md,
        "| POST | `/v1/transfers` | `createTransfer` | required | header `Idempotency-Key` | none |",
    );
    has(
        html,
        r#"<tr id="op-createtransfer"><td><span class="method">POST</span></td><td><code>/<wbr>v1/<wbr>transfers</code></td><td><code>createTransfer</code></td><td><span class="tag required">required</span></td><td>header <code>Idempotency-Key</code></td>"#,
    );
    // Header and maximum key length.
    has(md, "Send the key in the `Idempotency-Key` request header");
    has(&prose, "A key is 1 to 255 characters long");
    // Key derivation, ranked, and the anti-pattern named as such.
    let derived = at(
        md,
        "1. **A key derived from an identifier you already hold.**",
    );
    let stored = at(md, "2. **A key created with the job and stored with it.**");
    let random = at(
        md,
        "3. **A random UUID kept across the retries of one call.**",
    );
    assert!(derived < stored && stored < random);
    has(md, "**Never generate a fresh key for each attempt.**");
    assert!(
        !md.contains("4. **"),
        "the anti-pattern is not a fourth option"
    );
    // Scope.
    has(md, "Keys are scoped to the calling account.");
    has(md, "they never collide");
    // Replay window as a number, and what happens after it.
    has(
        &prose,
        "**7 days** (604,800 seconds), counted from the first request with the key.",
    );
    has(
        &prose,
        "a request with it is a brand-new request and runs again",
    );
    has(md, "Finish your retrying well inside the window.");
    has(md, "retry chains of up to 6 days");
    // Both conflicts: status, code and the exact body the server sends.
    has(
        md,
        &format!("```json\n{}\n```", protocol::KEY_IN_USE.body()),
    );
    has(
        md,
        &format!("```json\n{}\n```", protocol::KEY_REUSED.body()),
    );
    has(html, &html_escaped(&protocol::KEY_IN_USE.body()));
    has(html, &html_escaped(&protocol::KEY_REUSED.body()));
    // The spec documents the mismatch as 422.
    has(
        md,
        "| Same key, different method, path or body | `422` | `idempotency_key_reused` |",
    );
    has(
        md,
        "| The first request is still running | `409` with `Retry-After` | `idempotency_key_in_use` |",
    );
    has(md, "`409 Conflict`, `Retry-After: 1`");
    has(md, "`Idempotent-Replayed: true`");
    let missing =
        protocol::KEY_MISSING.body_with(&protocol::key_missing_message("Idempotency-Key"));
    has(md, &missing);
    // The failure-replay decision.
    has(md, "**Decision: a stored failure replays as it is.**");
    // Unsafe endpoints with their warnings.
    has(
        md,
        "| POST | `/v1/transfers/{id}/notes` | `addTransferNote` | `unsafe-documented` | Each call adds a note; list the notes before retrying a call that timed out. |",
    );
    // Retry rules.
    has(
        md,
        "| `429 Too Many Requests` | retry after `Retry-After` |",
    );
    has(
        md,
        "| `502`, `503`, `504` | retry, after `Retry-After` when sent |",
    );
    has(md, "| `500` | retry at most once per call |");
    has(md, "authentication failures | **never**");
    has(
        md,
        "Never retry a timed-out request to an endpoint that has no key",
    );
    has(md, "Honour `Retry-After`");
    // Backoff, both bounds and the worked schedule from x-retry.
    has(md, "sleep = random(0, min(cap, base × 2^attempt))");
    has(md, "*decorrelated jitter*");
    has(md, "**Not recommended:** plain exponential backoff");
    has(md, "*equal jitter*");
    has(&prose, "at most 3 attempts in total");
    has(&prose, "one deadline of 30 s for the whole call");
    has(md, "| 1 | none | 0 ms | 10 s | 10 s |");
    has(md, "| 2 | 0 ms to 100 ms | 10.1 s | 9.95 s | 20.05 s |");
    has(md, "| 3 | 0 ms to 200 ms | 20.25 s | 9.75 s | 30 s |");
    has(
        &prose,
        "Waiting takes 300 ms at most; the call ends by 30 s, inside its 30 s deadline.",
    );
    // The server's own retries of the bank, and where they end.
    has(
        md,
        "| POST | `/v1/transfers` | `submit_to_bank`, `notify_vendor` | 20 | up to 2 seconds, doubling to 10 minutes | 6 hours |",
    );
    has(
        &prose,
        "you get `503 operation_incomplete` with `Retry-After`",
    );
    has(&prose, "every repeat gets `409 idempotency_key_exhausted`");
    has(
        &prose,
        "you get `503 operation_unavailable` with `Retry-After`. Nothing was recorded",
    );
    has(md, r#"{"code":"idempotency_key_exhausted","#);
    has(html, r#"<section id="resumed">"#);
    // Retry budget figures.
    has(&prose, "a token bucket of 500 tokens");
    has(&prose, "or a `5xx` costs 14;");
    has(&prose, "a request still running costs 5.");
    has(
        &prose,
        "A call whose first attempt succeeds puts 1 back, and a retry that succeeds puts back what it cost",
    );
    has(
        &prose,
        "A full bucket pays for 35 retries after transient failures or 100 after throttling.",
    );
    // Per-attempt timeouts from p99.
    has(
        md,
        "| POST | `/v1/transfers` | `createTransfer` | 800 ms | 2.4 s |",
    );
    has(md, "ATTEMPT_TIMEOUT = 2.4");
    // Logging, libraries, the example.
    has(md, "Log every retry");
    has(
        md,
        "attempt=2 of 3 error=\"503 Service Unavailable\" next_wait=0.083s key=transfer-1001-create",
    );
    has(md, "[tenacity](https://tenacity.readthedocs.io/)");
    has(md, "[Resilience4j](https://resilience4j.readme.io/)");
    has(md, "`idem_runtime::client`");
    has(md, "```python\n");
    has(md, "headers = {\"Idempotency-Key\": key}");
    // No standard: this page is the contract.
    has(
        &prose,
        "The IETF draft for an `Idempotency-Key` header expired without becoming an RFC",
    );
    has(md, "treat it as the normative reference");
    // The wording: at least once, duplicates collapsed inside scope and window.
    has(&prose, "delivery is at least once");
    has(&prose, "Inside your key scope and within the replay window");
}

/// A spec in prose only: the PUT whose words add and the DELETE whose words
/// refund are listed as unsafe, with the words, and never as safe.
#[test]
fn what_the_words_say_is_never_listed_as_safe() {
    let p = pages("hotel.yaml");
    let md = &p.markdown;
    let safe = &md[at(md, "## Endpoints safe to retry without a key")..];
    let safe = &safe[..safe[3..].find("\n## ").map_or(safe.len(), |i| i + 3)];
    assert!(!safe.contains("loyalty-points"), "{safe}");
    assert!(!safe.contains("`cancelReservation`"), "{safe}");
    assert!(safe.contains("`updateReservation`"), "{safe}");
    for row in [
        "| DELETE | `/v2/reservations/{id}` | `cancelReservation`: Cancel a reservation | `unsafe` | *no warning documented* (its description says “refunds the deposit”) |",
        "| PUT | `/v2/reservations/{id}/loyalty-points` | `addLoyaltyPoints`: Credit loyalty points for a stay | `unsafe` | *no warning documented* (its description says “adds \\`points\\` to the guest's balance”) |",
    ] {
        has(md, row);
    }
    assert_inert_and_linked(&p.html, "hotel");
}

/// The page shows every path as the client calls it and `router` serves
/// it: under the first server's base path, `{id}` included where nothing
/// declares it.
#[test]
fn paths_are_shown_under_the_base_path() {
    let md = pages("staybright.yaml").markdown;
    has(
        &md,
        "| DELETE | `/v2/holds/{id}` | `releaseHold`: Release a room hold |",
    );
    has(&md, "POST /v2/reservations HTTP/1.1");
    has(&md, "https://api.staybright.example/v2/reservations");
    assert!(!md.contains("| `/holds/"), "a path without its base path");
}

/// The examples are an integrator's: values a person would send (an
/// address for an email, a stay that ends after it starts), a key named
/// after the operation, and the credential the security scheme asks for.
#[test]
fn examples_read_like_an_integrators() {
    let md = pages("staybright.yaml").markdown;
    has(
        &md,
        r#"{"check_in":"2026-03-14","check_out":"2026-03-17","guest_email":"guest@example.com","room":"room-1001"}"#,
    );
    has(&md, "Idempotency-Key: reservation-1001-create");
    assert!(!md.contains("idem-probe"), "a probe value on the page");
    assert!(!md.contains("order-739"), "a key of another API");
    // No security scheme: no credential line.
    assert!(
        !md.contains("$API_TOKEN"),
        "a credential the spec does not ask for"
    );

    for page in [
        pages("transfers.yaml").markdown,
        pages("transfers.yaml").html,
    ] {
        has(&page, "Authorization: Bearer $API_TOKEN");
        has(&page, "Idempotency-Key: transfer-1001-create");
        has(&page, "import os");
    }
    has(
        &pages("transfers.yaml").markdown,
        r#"headers["Authorization"] = "Bearer " + os.environ["API_TOKEN"]"#,
    );
}

/// Keys the spec describes in words are named where they travel.
#[test]
fn described_keys_are_named_where_they_travel() {
    let md = pages("described-keys.yaml").markdown;
    has(
        &md,
        "| POST | `/flows` | `createFlow`: Create a flow | optional | body field `ClientToken` | `key-max-length`: 64 |",
    );
    has(
        &md,
        "| POST | `/instances` | `insertInstance`: Insert an instance | optional | query parameter `requestId` | `key-max-length`: 64 |",
    );
    assert!(
        !md.contains("x-ms-client-request-id` | none"),
        "a tracing id is no key"
    );
}

#[test]
fn undecided_and_undocumented_cases_are_said_plainly() {
    let p = pages("cratebase.yaml");
    let md = &p.markdown;
    let prose = flat(md);
    has(
        &prose,
        "**Undecided.** This API does not say whether a stored failure replays",
    );
    // The unsafe endpoints of the method-semantics audit, without warnings.
    has(
        &prose,
        "Where the table says *no warning documented*, the endpoint is not idempotent, takes no key",
    );
    for row in [
        "| PUT | `/v2/orders/{id}/notes` | `addOrderNote`: Append a note to the order's activity log | `unsafe` | *no warning documented* |",
        "| DELETE | `/v2/credits/{id}` | `redeemCredit` | `unsafe` | *no warning documented* |",
        "| POST | `/v2/refunds` | `createRefund` | `unsafe` | *no warning documented* |",
    ] {
        has(md, row);
    }
    // 409 by default for the mismatch; 24 hours as a number.
    has(
        md,
        "| Same key, different method, path or body | `409` | `idempotency_key_reused` |",
    );
    has(&prose, "**1 day** (86,400 seconds)");
    assert_inert_and_linked(&p.html, "cratebase");
}

#[test]
fn hostile_spec_text_comes_out_as_text() {
    let p = pages("docs-hostile.yaml");
    let md = &p.markdown;
    let html = &p.html;
    let prose = flat(md);
    assert_inert_and_linked(html, "docs-hostile");
    // HTML: every payload escaped, in text and in attributes.
    has(
        html,
        "&#60;/script&#62;&#60;script&#62;alert(1)&#60;/script&#62;",
    );
    has(html, "&#60;img src=x onerror=alert(1)&#62;");
    has(html, "{{ 7*7 }}");
    assert!(!html.contains("<img"));
    assert!(!html.contains(" 49 "), "template syntax was not evaluated");
    // Markdown: tables keep their column count whatever the cells hold.
    let mut columns = None;
    for line in md.lines() {
        if line.starts_with("| ") {
            let cells = split_cells(line);
            assert_eq!(*columns.get_or_insert(cells), cells, "{line}");
        } else {
            columns = None;
        }
    }
    has(md, "\\</script\\>\\<script\\>alert(1)\\</script\\>");
    has(md, "\\<img src=x onerror=alert(1)\\>");
    has(md, "\\{\\{ 7\\*7 \\}\\}");
    has(md, "a \\| b \\`c\\`");
    has(md, "\\*/");
    has(md, "\\<!-- x --\\>");
    has(md, "\\$\\{x\\}");
    // The summary's line breaks cannot start a heading, a list or code.
    has(
        md,
        "Creates a payment # not a heading - not a list \\| x not code",
    );
    // Header names with a backtick and a pipe survive as code.
    has(md, "header ``X-Idem`\\|Key``");
    has(md, "Send the key in the ``X-Idem`|Key`` request header");
    // Outside code, no raw markup or MDX expression from the spec.
    let mut in_block = false;
    for line in md.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        let outside = strip_code_spans(line);
        for (i, c) in outside.char_indices() {
            if matches!(c, '<' | '{' | '}') {
                assert!(outside[..i].ends_with('\\'), "unescaped {c:?} in {line:?}");
            }
        }
    }
    // Decorrelated jitter, a zero-cost throttle retry, and the deadline cut.
    has(md, "| 2 | 250 ms to 750 ms | 5.25 s | 4.5 s | 9.75 s |");
    has(
        &prose,
        "The last 3 of the 5 attempts allowed never fit in the deadline.",
    );
    has(&prose, "and retries after throttling nothing");
    has(
        md,
        "wait = min(CAP, random.uniform(BASE, 3 * previous))  # decorrelated jitter",
    );
    // Per-operation overrides, the accepted and wait modes, body keys.
    has(md, "`replay-window`: 7d, `in-flight`: wait");
    has(md, "### Still running: wait");
    has(md, "### Still running: accepted");
    has(
        md,
        &protocol::accepted_body("/idempotency-keys/refund-1001-create", None),
    );
    has(md, "body field `idempotency_key`");
    has(md, "**Decision: a failure is re-attempted.**");
}

/// The number of cells in a GFM table row, honouring `\|` and code spans
/// (where GFM also splits on an unescaped `|`).
fn split_cells(line: &str) -> usize {
    let mut cells = 0;
    let mut escaped = false;
    for c in line.trim().trim_start_matches('|').chars() {
        match c {
            '\\' if !escaped => {
                escaped = true;
                continue;
            }
            '|' if !escaped => cells += 1,
            _ => {}
        }
        escaped = false;
    }
    cells
}

/// `line` without its code spans (backtick runs matched by length).
fn strip_code_spans(line: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '`' && (i == 0 || chars[i - 1] != '\\') {
            let run = chars[i..].iter().take_while(|c| **c == '`').count();
            let fence: String = "`".repeat(run);
            let rest: String = chars[i + run..].iter().collect();
            if let Some(end) = rest.find(&fence) {
                i += run + rest[..end].chars().count() + run;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

#[test]
fn the_python_example_is_valid_python() {
    let md = pages("payments-clean.yaml").markdown;
    let start = at(&md, "```python\n") + "```python\n".len();
    let code = &md[start..start + at(&md[start..], "```")];
    let python = std::process::Command::new("python3")
        .args(["-c", "import ast, sys; ast.parse(sys.stdin.read())"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut python) = python else {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "skipped: python3 is not installed");
        return;
    };
    {
        use std::io::Write;
        let mut stdin = python.stdin.take().unwrap();
        stdin.write_all(code.as_bytes()).unwrap();
    }
    let out = python.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{code}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// With every write keyed the page lists no unsafe endpoint, and says what
/// an optional key leaves open: a request sent without it.
#[test]
fn an_optional_key_is_named_where_no_endpoint_is_unsafe() {
    let dir = tempfile::tempdir().unwrap();
    let page = |key: &str| {
        let spec = dir.path().join(format!("tips-{key}.yaml"));
        std::fs::write(
            &spec,
            format!(
                r#"openapi: 3.0.3
info: {{ title: Tips, version: "1" }}
servers: [{{ url: "https://api.tips.example" }}]
paths:
  /tips:
    post:
      operationId: createTip
      summary: Leave a tip
      x-idempotency: {{ key: {key} }}
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              required: [amount]
              properties: {{ amount: {{ type: integer }} }}
      responses:
        "201": {{ description: Left }}
"#
            ),
        )
        .unwrap();
        docs::render(&model_of(&spec)).unwrap()
    };
    let p = page("optional");
    let prose = flat(&p.markdown);
    has(
        &prose,
        "None: every endpoint that changes state accepts a key or is idempotent. Where the key is *optional*",
    );
    has(
        &prose,
        "a request sent without one runs unprotected: it is unsafe to retry",
    );
    has(
        &p.html,
        "Where the key is <em>optional</em> (see the keyed endpoints above)",
    );
    // A required key leaves nothing open: the page says "None" alone.
    let p = page("required");
    has(
        &flat(&p.markdown),
        "None: every endpoint that changes state accepts a key or is idempotent.",
    );
    assert!(!p.markdown.contains("Where the key is *optional*"));
}
