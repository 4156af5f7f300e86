#![cfg(feature = "client")]
#![allow(
    clippy::unwrap_used,
    reason = "helpers of a test binary: a failed unwrap is a failed test"
)]
//! The retry loop in virtual time: tokio's clock is paused, so every wait
//! and timeout below is exact and costs no real time. Attempts are scripted
//! futures passed to `RetryClient::execute_with`; the HTTP round trip itself
//! is covered by `client_http.rs`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use idem_runtime::client::{
    Attempt, BreakerConfig, CircuitBreaker, CircuitState, GiveUp, IdempotencyKey, Operation,
    RetryBudget, RetryClass, RetryClient, RetryError, RetryPolicy, SeededRandom, TokioClock,
};
use tokio::time::Instant;

#[derive(Debug, Clone)]
enum Step {
    /// Answer at once.
    Answer(u16, Vec<(&'static str, String)>, &'static str),
    /// Answer after a delay.
    Slow(Duration, u16),
    /// Never answer.
    Hang,
}

fn answer(status: u16) -> Step {
    Step::Answer(status, Vec::new(), "")
}

fn answer_with(status: u16, name: &'static str, value: impl Into<String>) -> Step {
    Step::Answer(status, vec![(name, value.into())], "")
}

/// One attempt as the server side saw it.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    attempt: Attempt,
}

#[derive(Debug, Default)]
struct Script {
    steps: Mutex<VecDeque<Step>>,
    seen: Mutex<Vec<Seen>>,
}

impl Script {
    fn new(steps: impl IntoIterator<Item = Step>) -> Arc<Self> {
        Arc::new(Self {
            steps: Mutex::new(steps.into_iter().collect()),
            seen: Mutex::default(),
        })
    }

    fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.steps.lock().unwrap().extend(steps);
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

fn response(
    status: u16,
    headers: &[(&'static str, String)],
    body: &'static str,
) -> reqwest::Response {
    let mut builder = http::Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, value.as_str());
    }
    reqwest::Response::from(builder.body(body).unwrap())
}

async fn call(
    client: &RetryClient,
    op: &Operation,
    key: Option<IdempotencyKey>,
    host: Option<&str>,
    script: &Arc<Script>,
) -> Result<reqwest::Response, RetryError> {
    client
        .execute_with(op, key, host, |attempt| {
            script.seen.lock().unwrap().push(Seen {
                at: Instant::now(),
                attempt: attempt.clone(),
            });
            // An exhausted script answers 200: the server has recovered.
            let step = script
                .steps
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| answer(200));
            async move {
                match step {
                    Step::Answer(status, headers, body) => Ok(response(status, &headers, body)),
                    Step::Slow(delay, status) => {
                        tokio::time::sleep(delay).await;
                        Ok(response(status, &[], ""))
                    }
                    Step::Hang => std::future::pending().await,
                }
            }
        })
        .await
}

fn client(policy: RetryPolicy) -> RetryClient {
    RetryClient::builder(reqwest::Client::new())
        .policy(policy)
        .random(Arc::new(SeededRandom::new(7)))
        .build()
}

const GET_ORDER: Operation = Operation::new("getOrder", RetryClass::Safe);
const CREATE_ORDER: Operation = Operation::new("createOrder", RetryClass::Keyed);
const ADD_NOTE: Operation = Operation::new("addOrderNote", RetryClass::UnsafeDocumented)
    .warning("Each call appends a note to the order.");
const CREATE_REFUND: Operation = Operation::new("createRefund", RetryClass::Unsafe);

#[tokio::test(start_paused = true)]
async fn retry_after_in_seconds_is_honoured() {
    let script = Script::new([answer_with(503, "retry-after", "3")]);
    let result = call(
        &client(RetryPolicy::default()),
        &GET_ORDER,
        None,
        None,
        &script,
    )
    .await;
    assert_eq!(result.unwrap().status(), 200);
    let seen = script.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[1].at - seen[0].at >= Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn retry_after_as_an_http_date_is_honoured() {
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let client = RetryClient::builder(reqwest::Client::new())
        .clock(Arc::new(TokioClock::anchored(wall)))
        .random(Arc::new(SeededRandom::new(1)))
        .build();
    let date = httpdate::fmt_http_date(wall + Duration::from_secs(7));
    let script = Script::new([answer_with(429, "retry-after", date)]);
    let result = call(&client, &GET_ORDER, None, None, &script).await;
    assert_eq!(result.unwrap().status(), 200);
    let seen = script.seen();
    assert!(seen[1].at - seen[0].at >= Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn retry_after_ms_is_honoured() {
    let script = Script::new([answer_with(503, "retry-after-ms", "1500")]);
    let result = call(
        &client(RetryPolicy::default()),
        &CREATE_ORDER,
        None,
        None,
        &script,
    )
    .await;
    assert_eq!(result.unwrap().status(), 200);
    let seen = script.seen();
    assert!(seen[1].at - seen[0].at >= Duration::from_millis(1500));
}

#[tokio::test(start_paused = true)]
async fn unreadable_retry_after_falls_back_to_the_backoff() {
    let script = Script::new([answer_with(503, "retry-after", "whenever"), answer(503)]);
    let result = call(
        &client(RetryPolicy::default()),
        &GET_ORDER,
        None,
        None,
        &script,
    )
    .await;
    assert_eq!(result.unwrap().status(), 200);
    let seen = script.seen();
    // Full jitter: the first wait is at most 100 ms, the second at most 200 ms.
    assert!(seen[1].at - seen[0].at <= Duration::from_millis(100));
    assert!(seen[2].at - seen[1].at <= Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_the_deadline_stops_at_once() {
    let policy = RetryPolicy::default().deadline(Duration::from_secs(5));
    let script = Script::new([answer_with(503, "retry-after", "60")]);
    let start = Instant::now();
    let error = call(&client(policy), &CREATE_ORDER, None, None, &script)
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO, "no time spent waiting");
    assert_eq!(script.count(), 1);
    match &error {
        RetryError::GaveUp {
            reason:
                GiveUp::RetryAfterBeyondDeadline {
                    retry_after,
                    remaining,
                },
            attempts: 1,
            key: Some(_),
            ..
        } => {
            assert_eq!(*retry_after, Duration::from_secs(60));
            assert_eq!(*remaining, Duration::from_secs(5));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        error
            .to_string()
            .contains("asked to wait 60s but the deadline leaves 5000ms"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn server_error_is_retried_once_for_safe_and_keyed() {
    for op in [GET_ORDER, CREATE_ORDER] {
        let script = Script::new([answer(500), answer(500), answer(200)]);
        let error = call(&client(RetryPolicy::default()), &op, None, None, &script)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                RetryError::GaveUp {
                    reason: GiveUp::ServerErrorRetriedOnce,
                    attempts: 2,
                    ..
                }
            ),
            "{op:?}: {error:?}"
        );
        assert_eq!(script.count(), 2);

        let script = Script::new([answer(500), answer(200)]);
        let ok = call(&client(RetryPolicy::default()), &op, None, None, &script).await;
        assert_eq!(ok.unwrap().status(), 200);
    }
}

#[tokio::test(start_paused = true)]
async fn server_error_is_never_retried_for_unsafe_operations() {
    for op in [ADD_NOTE, CREATE_REFUND] {
        let script = Script::new([answer(500)]);
        let error = call(&client(RetryPolicy::default()), &op, None, None, &script)
            .await
            .unwrap_err();
        assert_eq!(script.count(), 1, "{op:?}");
        let RetryError::OutcomeUnknown {
            why,
            class,
            attempts,
            ..
        } = &error
        else {
            panic!("unexpected {error:?}");
        };
        assert_eq!((*class, *attempts), (op.class, 1));
        assert!(why.contains("no idempotency key"), "{why}");
        if let Some(warning) = op.warning {
            assert!(why.contains(warning.trim_end_matches('.')), "{why}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn other_client_errors_are_returned_not_retried() {
    for op in [GET_ORDER, CREATE_ORDER, ADD_NOTE, CREATE_REFUND] {
        for status in [400, 401, 403, 404, 409, 410, 422, 501] {
            let script = Script::new([answer(status)]);
            let response = call(&client(RetryPolicy::default()), &op, None, None, &script)
                .await
                .unwrap();
            assert_eq!(response.status(), status);
            assert_eq!(script.count(), 1, "{op:?} {status}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_retry_hint_header_overrides_the_status() {
    let script = Script::new([answer_with(503, "x-should-retry", "false")]);
    let error = call(
        &client(RetryPolicy::default()),
        &GET_ORDER,
        None,
        None,
        &script,
    )
    .await
    .unwrap_err();
    assert!(matches!(
        error,
        RetryError::GaveUp {
            reason: GiveUp::ServerDeclined,
            ..
        }
    ));

    let script = Script::new([answer_with(409, "x-should-retry", "true")]);
    let response = call(
        &client(RetryPolicy::default()),
        &GET_ORDER,
        None,
        None,
        &script,
    )
    .await
    .unwrap();
    assert_eq!((response.status().as_u16(), script.count()), (200, 2));

    // A hint never makes an unsafe operation re-sendable.
    let script = Script::new([answer_with(503, "x-should-retry", "true")]);
    let error = call(
        &client(RetryPolicy::default()),
        &CREATE_REFUND,
        None,
        None,
        &script,
    )
    .await
    .unwrap_err();
    assert!(error.is_outcome_unknown());
    assert_eq!(script.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_unsafe_operation_is_not_resent_after_a_timeout() {
    let policy = RetryPolicy::default().attempt_timeout(Duration::from_secs(2));
    let script = Script::new([Step::Hang]);
    let error = call(&client(policy), &CREATE_REFUND, None, None, &script)
        .await
        .unwrap_err();
    assert_eq!(script.count(), 1);
    assert!(error.is_outcome_unknown(), "{error:?}");
    assert!(
        error.to_string().contains("attempt timed out after 2000ms"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_same_key_is_sent_on_every_attempt_and_survives_in_the_error() {
    let script = Script::new([answer(503), answer(502), answer(504)]);
    let error = call(
        &client(RetryPolicy::default()),
        &CREATE_ORDER,
        None,
        None,
        &script,
    )
    .await
    .unwrap_err();
    let seen = script.seen();
    assert_eq!(seen.len(), 3);
    let key = error.key().expect("keyed calls carry their key").clone();
    for s in &seen {
        assert_eq!(s.attempt.key.as_ref(), Some(&key));
        assert_eq!(
            s.attempt.headers().get("idempotency-key").unwrap(),
            key.as_str()
        );
    }
    assert!(matches!(
        error,
        RetryError::GaveUp {
            reason: GiveUp::AttemptsExhausted { max: 3 },
            ..
        }
    ));
    assert!(error.to_string().contains(key.as_str()), "{error}");

    // Trying again later with the key from the error reuses it.
    let again = Script::new([]);
    call(
        &client(RetryPolicy::default()),
        &CREATE_ORDER,
        Some(key.clone()),
        None,
        &again,
    )
    .await
    .unwrap();
    assert_eq!(again.seen()[0].attempt.key.as_ref(), Some(&key));
}

#[tokio::test(start_paused = true)]
async fn in_use_conflicts_wait_for_retry_after_and_reused_keys_never_retry() {
    let in_use = r#"{"code":"idempotency_key_in_use","message":"still running"}"#;
    let script = Script::new([Step::Answer(409, vec![("retry-after", "2".into())], in_use)]);
    let response = call(
        &client(RetryPolicy::default()),
        &CREATE_ORDER,
        None,
        None,
        &script,
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let seen = script.seen();
    assert!(seen[1].at - seen[0].at >= Duration::from_secs(2));

    let script = Script::new(vec![
        Step::Answer(
            409,
            vec![("retry-after", "1".into())],
            in_use
        );
        3
    ]);
    let error = call(
        &client(RetryPolicy::default()),
        &CREATE_ORDER,
        None,
        None,
        &script,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            error,
            RetryError::KeyInUse {
                attempts: 3,
                retry_after: Some(_),
                key: Some(_),
                ..
            }
        ),
        "{error:?}"
    );

    for status in [409, 422] {
        let reused = r#"{"error":{"code":"idempotency_key_reused"}}"#;
        let script = Script::new([Step::Answer(status, vec![], reused)]);
        let key = IdempotencyKey::derived(["order", "739", "confirm"]).unwrap();
        let error = call(
            &client(RetryPolicy::default()),
            &CREATE_ORDER,
            Some(key.clone()),
            None,
            &script,
        )
        .await
        .unwrap_err();
        assert_eq!(script.count(), 1);
        match error {
            RetryError::KeyReused {
                key: Some(k),
                status: s,
                attempts: 1,
                ..
            } => assert_eq!((k, s.as_u16()), (key, status)),
            other => panic!("unexpected {other:?}"),
        }
    }

    // A 409 with some other code is the caller's to read, body intact.
    let script = Script::new([Step::Answer(409, vec![], r#"{"code":"order_closed"}"#)]);
    let response = call(
        &client(RetryPolicy::default()),
        &CREATE_ORDER,
        None,
        None,
        &script,
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 409);
    assert_eq!(response.text().await.unwrap(), r#"{"code":"order_closed"}"#);
}

#[tokio::test(start_paused = true)]
async fn attempt_timeouts_are_budgeted_inside_the_deadline() {
    // No p99: each attempt gets an even share of what is left.
    let policy = RetryPolicy::default().deadline(Duration::from_secs(9));
    let script = Script::new([Step::Hang, Step::Hang, Step::Hang]);
    let start = Instant::now();
    let error = call(&client(policy), &GET_ORDER, None, None, &script)
        .await
        .unwrap_err();
    assert!(start.elapsed() <= Duration::from_secs(9));
    let seen = script.seen();
    assert_eq!(seen[0].attempt.timeout, Duration::from_secs(3));
    assert!(
        seen.iter()
            .all(|s| s.attempt.timeout <= s.attempt.remaining)
    );
    assert!(
        matches!(
            error,
            RetryError::GaveUp { .. } | RetryError::DeadlineExceeded { .. }
        ),
        "{error:?}"
    );

    // With a p99, 3 × p99, clamped to the time left.
    let policy = RetryPolicy::default()
        .deadline(Duration::from_secs(5))
        .p99(Duration::from_millis(800));
    let script = Script::new([Step::Hang, Step::Slow(Duration::from_secs(1), 200)]);
    let response = call(&client(policy), &GET_ORDER, None, None, &script)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let seen = script.seen();
    assert_eq!(seen[0].attempt.timeout, Duration::from_millis(2400));
    assert!(seen[1].at - seen[0].at >= Duration::from_millis(2400));
}

#[tokio::test(start_paused = true)]
async fn the_remaining_deadline_travels_in_a_header() {
    let policy = RetryPolicy::default().deadline(Duration::from_secs(20));
    let script = Script::new([
        answer_with(503, "retry-after", "4"),
        answer_with(503, "retry-after", "4"),
    ]);
    call(&client(policy), &GET_ORDER, None, None, &script)
        .await
        .unwrap();
    let millis: Vec<u64> = script
        .seen()
        .iter()
        .map(|s| {
            s.attempt
                .headers()
                .get("idem-timeout-ms")
                .unwrap()
                .to_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(millis[0], 20_000);
    assert!(millis[1] <= 16_000 && millis[2] <= 12_000, "{millis:?}");
}

#[tokio::test(start_paused = true)]
async fn budget_drains_during_an_outage_and_refills_after() {
    let budget = RetryBudget::default();
    let client = RetryClient::builder(reqwest::Client::new())
        .budget(budget.clone())
        .random(Arc::new(SeededRandom::new(3)))
        .build();
    let clone = client.clone();

    // Outage: every attempt fails with 503 (14 tokens per retry).
    let outage = Script::new(vec![answer(503); 10_000]);
    for i in 0..40 {
        let c = if i % 2 == 0 { &client } else { &clone };
        assert!(call(c, &GET_ORDER, None, None, &outage).await.is_err());
    }
    // 500 tokens buy 35 retries: 17 calls retry twice, one once, then none.
    let m = client.metrics();
    assert_eq!(m.retries, 35);
    assert_eq!(budget.available(), Some(10));
    assert_eq!(m.budget_rejections, 40 - 17);
    assert_eq!(m.attempts, 40 + 35, "first attempts always go out");
    assert_eq!(outage.count(), 75);

    // Recovery: 490 successes refund one token each and fill the bucket.
    outage.steps.lock().unwrap().clear();
    for _ in 0..490 {
        call(&client, &GET_ORDER, None, None, &outage)
            .await
            .unwrap();
    }
    assert_eq!(budget.available(), Some(500));
    // Retries are back.
    outage.push([answer(503)]);
    call(&client, &GET_ORDER, None, None, &outage)
        .await
        .unwrap();
    assert_eq!(client.metrics().retries, 36);
    assert_eq!(
        budget.available(),
        Some(500),
        "a successful retry earns back its price"
    );
}

#[tokio::test(start_paused = true)]
async fn ordinary_loss_never_drains_the_budget() {
    let budget = RetryBudget::default();
    let client = RetryClient::builder(reqwest::Client::new())
        .budget(budget.clone())
        .random(Arc::new(SeededRandom::new(5)))
        .build();
    // 2,000 calls; every seventh loses its first attempt (a 503, 14 tokens)
    // and its retry succeeds. Under the old rule (+1 per success) the bucket
    // was empty after about 350 calls.
    let script = Script::new([]);
    for i in 0..2_000 {
        if i % 7 == 0 {
            script.push([answer(503)]);
        }
        call(&client, &CREATE_ORDER, None, None, &script)
            .await
            .unwrap();
    }
    let m = client.metrics();
    assert_eq!(m.retries, 286);
    assert_eq!(m.budget_rejections, 0);
    assert_eq!(budget.available(), Some(500));
}

#[tokio::test(start_paused = true)]
async fn throttling_costs_less_than_transient_errors() {
    let budget = RetryBudget::default();
    let client = RetryClient::builder(reqwest::Client::new())
        .budget(budget.clone())
        .build();
    call(&client, &GET_ORDER, None, None, &Script::new([answer(429)]))
        .await
        .unwrap();
    // -5 for the retry, +5 back when it succeeds.
    assert_eq!(budget.available(), Some(500));
    let script = Script::new([answer(429), answer(502)]);
    call(&client, &GET_ORDER, None, None, &script)
        .await
        .unwrap();
    // -5, -14, and the 14 of the retry that succeeded come back.
    assert_eq!(budget.available(), Some(495));
    call(&client, &GET_ORDER, None, None, &Script::new([answer(502)]))
        .await
        .unwrap();
    assert_eq!(budget.available(), Some(495));
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_fails_fast_and_a_single_trial_closes_it() {
    let breaker = CircuitBreaker::new(BreakerConfig {
        window: 4,
        min_calls: 4,
        failure_rate: 0.5,
        open_for: Duration::from_secs(10),
    });
    let client = RetryClient::builder(reqwest::Client::new())
        .circuit_breaker(breaker.clone())
        .policy(RetryPolicy::default().deadline(Duration::from_secs(5)))
        .build();
    let host = Some("orders.internal:80");
    let down = Script::new(vec![answer(503); 4]);
    for _ in 0..2 {
        assert!(call(&client, &GET_ORDER, None, host, &down).await.is_err());
    }
    assert_eq!(breaker.state("orders.internal:80"), CircuitState::Open);
    let before = down.count();

    // Open, and the cool-down is longer than the deadline: fail at once,
    // without sending anything.
    let start = Instant::now();
    let error = call(&client, &GET_ORDER, None, host, &down)
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(down.count(), before);
    assert!(
        error
            .to_string()
            .contains("circuit breaker for orders.internal:80 is open"),
        "{error}"
    );
    assert!(client.metrics().breaker_rejections >= 1);

    // After the cool-down a single trial goes out; its success closes it.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let up = Script::new([]);
    call(&client, &GET_ORDER, None, host, &up).await.unwrap();
    assert_eq!(up.count(), 1);
    assert_eq!(
        client.metrics().breakers,
        vec![("orders.internal:80".to_owned(), CircuitState::Closed)]
    );
}

#[tokio::test(start_paused = true)]
async fn counters_add_up() {
    let client = client(RetryPolicy::default());
    call(&client, &GET_ORDER, None, None, &Script::new([answer(503)]))
        .await
        .unwrap();
    let _ = call(
        &client,
        &CREATE_REFUND,
        None,
        None,
        &Script::new([answer(502)]),
    )
    .await;
    let m = client.metrics();
    assert_eq!(
        (
            m.calls,
            m.attempts,
            m.retries,
            m.succeeded,
            m.failed,
            m.outcome_unknown
        ),
        (2, 3, 1, 1, 1, 1)
    );
}
