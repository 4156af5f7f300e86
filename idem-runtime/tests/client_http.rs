#![cfg(feature = "client")]
#![allow(
    clippy::unwrap_used,
    reason = "helpers of a test binary: a failed unwrap is a failed test"
)]
//! The retry client against a real HTTP server on loopback that records
//! every request's headers. Real sockets and real reqwest; waits are kept to
//! milliseconds and nothing here asserts on wall-clock time.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use idem_runtime::client::{
    AttemptError, Backoff, GiveUp, IdempotencyKey, Operation, RetryClass, RetryClient, RetryError,
    RetryPolicy,
};

#[derive(Debug, Clone)]
enum Reply {
    Status(u16, Vec<(&'static str, &'static str)>, &'static str),
    /// Accept the request and never answer.
    Hang,
}

#[derive(Debug, Clone)]
struct Hit {
    method: String,
    path: String,
    headers: HeaderMap,
    body: String,
}

#[derive(Debug, Clone, Default)]
struct Recorder {
    hits: Arc<Mutex<Vec<Hit>>>,
    replies: Arc<Mutex<VecDeque<Reply>>>,
}

impl Recorder {
    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    fn header(&self, name: &str) -> Vec<String> {
        self.hits()
            .iter()
            .map(|h| {
                h.headers
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_owned())
                    .unwrap_or_default()
            })
            .collect()
    }
}

async fn record(State(recorder): State<Recorder>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    recorder.hits.lock().unwrap().push(Hit {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let reply = recorder.replies.lock().unwrap().pop_front();
    match reply.unwrap_or(Reply::Status(200, vec![], "{}")) {
        Reply::Status(status, headers, body) => {
            let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
        Reply::Hang => std::future::pending().await,
    }
}

/// Starts a recording server answering with `replies` in order, then 200.
async fn server(replies: impl IntoIterator<Item = Reply>) -> (String, Recorder) {
    let recorder = Recorder::default();
    recorder.replies.lock().unwrap().extend(replies);
    let app = axum::Router::new()
        .fallback(record)
        .with_state(recorder.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), recorder)
}

fn quick() -> RetryPolicy {
    RetryPolicy::default().backoff(Backoff::full_jitter(
        Duration::from_millis(1),
        Duration::from_millis(5),
    ))
}

fn client(policy: RetryPolicy) -> RetryClient {
    RetryClient::builder(reqwest::Client::new())
        .policy(policy)
        .build()
}

const CREATE_ORDER: Operation = Operation::new("createOrder", RetryClass::Keyed);
const CREATE_REFUND: Operation = Operation::new("createRefund", RetryClass::Unsafe);

fn status(code: u16) -> Reply {
    Reply::Status(code, vec![], "")
}

#[tokio::test]
async fn a_keyed_post_sends_one_minted_key_on_every_attempt() {
    let (base, recorder) = server([status(503), status(502)]).await;
    let response = client(quick())
        .send(&CREATE_ORDER, |http| {
            http.post(format!("{base}/orders"))
                .header("content-type", "application/json")
                .body(r#"{"sku":"A-1","qty":2}"#)
        })
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let hits = recorder.hits();
    assert_eq!(hits.len(), 3);
    assert!(
        hits.iter()
            .all(|h| h.method == "POST" && h.path == "/orders")
    );
    assert!(hits.iter().all(|h| h.body == r#"{"sku":"A-1","qty":2}"#));
    let keys = recorder.header("idempotency-key");
    assert!(uuid::Uuid::parse_str(&keys[0]).is_ok(), "{keys:?}");
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "one key for the whole call: {keys:?}"
    );

    // The remaining deadline is on the wire, and only shrinks.
    let left: Vec<u64> = recorder
        .header("idem-timeout-ms")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(left[0] <= 30_000 && left[0] > 29_000, "{left:?}");
    assert!(left.windows(2).all(|w| w[1] <= w[0]), "{left:?}");
}

#[tokio::test]
async fn a_body_keyed_post_puts_one_key_in_every_body_and_no_key_header() {
    const CREATE_PAYMENT: Operation =
        Operation::new("CreatePayment", RetryClass::Keyed).body_key("idempotency_key");
    let (base, recorder) = server([status(503), status(502)]).await;
    let body = |key: Option<&IdempotencyKey>| {
        let key = key.map(IdempotencyKey::as_str).unwrap_or_default();
        format!(r#"{{"idempotency_key":"{key}","amount":100}}"#)
    };
    let response = client(quick())
        .send_body_keyed(&CREATE_PAYMENT, None, |http, key| {
            http.post(format!("{base}/v2/payments"))
                .header("content-type", "application/json")
                .body(body(key))
        })
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let hits = recorder.hits();
    assert_eq!(hits.len(), 3);
    let keys: Vec<String> = hits
        .iter()
        .map(|h| {
            let rest = h.body.strip_prefix(r#"{"idempotency_key":""#).unwrap();
            rest.split('"').next().unwrap().to_owned()
        })
        .collect();
    assert!(uuid::Uuid::parse_str(&keys[0]).is_ok(), "{keys:?}");
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "one key for the call: {keys:?}"
    );
    assert!(
        recorder
            .header("idempotency-key")
            .iter()
            .all(String::is_empty),
        "the key travels in the body only"
    );

    // A caller's key (a form body, Twilio-style) is used as given.
    const CREATE_MESSAGE: Operation =
        Operation::new("CreateMessage", RetryClass::Keyed).body_key("IdempotencyKey");
    let (base, recorder) = server([]).await;
    let key = IdempotencyKey::derived(["message", "42"]).unwrap();
    client(quick())
        .send_body_keyed(&CREATE_MESSAGE, Some(key.clone()), |http, key| {
            let key = key.map(IdempotencyKey::as_str).unwrap_or_default();
            http.post(format!("{base}/Messages.json"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("Body=hi&IdempotencyKey={key}"))
        })
        .await
        .unwrap();
    assert_eq!(
        recorder.hits()[0].body,
        format!("Body=hi&IdempotencyKey={}", key.as_str())
    );
}

#[tokio::test]
async fn a_second_call_gets_a_new_key() {
    let (base, recorder) = server([]).await;
    let client = client(quick());
    for _ in 0..2 {
        client
            .send(&CREATE_ORDER, |http| http.post(format!("{base}/orders")))
            .await
            .unwrap();
    }
    let keys = recorder.header("idempotency-key");
    assert_ne!(keys[0], keys[1]);
}

#[tokio::test]
async fn a_derived_key_is_sent_verbatim_and_survives_in_the_error() {
    let (base, recorder) = server([status(503), status(503), status(503)]).await;
    let key = IdempotencyKey::derived(["order", "739", "confirm"]).unwrap();
    let error = client(quick())
        .send_with_key(&CREATE_ORDER, key.clone(), |http| {
            http.post(format!("{base}/orders/739/confirm"))
        })
        .await
        .unwrap_err();
    assert_eq!(
        recorder.header("idempotency-key"),
        vec!["order-739-confirm"; 3]
    );
    assert_eq!(error.key(), Some(&key));
    assert_eq!(error.attempts(), 3);
}

#[tokio::test]
async fn a_key_already_on_the_request_is_kept_for_every_attempt() {
    let (base, recorder) = server([status(504)]).await;
    client(quick())
        .send(&CREATE_ORDER, |http| {
            http.post(format!("{base}/orders"))
                .header("Idempotency-Key", "job-42-attempt-any")
        })
        .await
        .unwrap();
    assert_eq!(
        recorder.header("idempotency-key"),
        vec!["job-42-attempt-any"; 2]
    );
}

#[tokio::test]
async fn an_unsafe_post_is_never_resent_after_a_timeout() {
    let (base, recorder) = server([Reply::Hang]).await;
    // Long enough that the server has read the request on a loaded machine.
    let policy = quick().attempt_timeout(Duration::from_secs(2));
    let client = client(policy);
    let error = client
        .send(&CREATE_REFUND, |http| {
            http.post(format!("{base}/refunds"))
                .body(r#"{"cents":2000}"#)
        })
        .await
        .unwrap_err();

    let RetryError::OutcomeUnknown {
        attempts,
        last,
        why,
        key,
        ..
    } = &error
    else {
        panic!("expected outcome unknown, got {error:?}");
    };
    assert_eq!(*attempts, 1);
    assert!(matches!(last, AttemptError::TimedOut { .. }), "{last:?}");
    assert!(why.contains("createRefund is `unsafe`"), "{why}");
    assert!(key.is_none());
    // The server did receive it, exactly once, and no key was invented.
    let hits = recorder.hits();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].body, r#"{"cents":2000}"#);
    assert!(hits[0].headers.get("idempotency-key").is_none());
    assert_eq!(client.metrics().outcome_unknown, 1);
}

#[tokio::test]
async fn an_unsafe_post_is_not_resent_after_a_gateway_error() {
    let (base, recorder) = server([status(502)]).await;
    let error = client(quick())
        .send(&CREATE_REFUND, |http| http.post(format!("{base}/refunds")))
        .await
        .unwrap_err();
    assert!(error.is_outcome_unknown());
    assert_eq!(recorder.hits().len(), 1);
}

#[tokio::test]
async fn an_unsafe_post_is_retried_while_the_connection_is_refused() {
    // Nothing listens on this port: the request never leaves the client.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let error = client(quick())
        .send(&CREATE_REFUND, |http| {
            http.post(format!("http://127.0.0.1:{port}/refunds"))
        })
        .await
        .unwrap_err();
    match error {
        RetryError::GaveUp {
            attempts: 3,
            reason: GiveUp::AttemptsExhausted { max: 3 },
            last: AttemptError::Connect { .. },
            ..
        } => {}
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_keyed_500_is_retried_at_most_once() {
    let (base, recorder) = server([status(500), status(500)]).await;
    let error = client(quick())
        .send(&CREATE_ORDER, |http| http.post(format!("{base}/orders")))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            RetryError::GaveUp {
                reason: GiveUp::ServerErrorRetriedOnce,
                ..
            }
        ),
        "{error:?}"
    );
    let keys = recorder.header("idempotency-key");
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1]);
}

#[tokio::test]
async fn the_in_use_conflict_is_waited_out_with_the_same_key() {
    let in_use = Reply::Status(
        409,
        vec![
            ("retry-after-ms", "20"),
            ("content-type", "application/json"),
        ],
        r#"{"code":"idempotency_key_in_use","message":"a request with this key is in progress"}"#,
    );
    let reused = Reply::Status(409, vec![], r#"{"code":"idempotency_key_reused"}"#);
    let (base, recorder) = server([in_use, reused]).await;
    let error = client(quick())
        .send(&CREATE_ORDER, |http| http.post(format!("{base}/orders")))
        .await
        .unwrap_err();
    assert!(
        matches!(error, RetryError::KeyReused { attempts: 2, .. }),
        "{error:?}"
    );
    let keys = recorder.header("idempotency-key");
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1]);
}

const LIST_ORDERS: Operation = Operation::new("listOrders", RetryClass::Safe);

#[tokio::test]
async fn a_deadline_that_runs_out_is_reported_as_the_deadline() {
    let (base, recorder) = server([Reply::Hang, Reply::Hang, Reply::Hang]).await;
    let policy = quick()
        .deadline(Duration::from_secs(2))
        .attempt_timeout(Duration::from_secs(5));
    let error = client(policy)
        .send(&LIST_ORDERS, |http| http.get(format!("{base}/orders")))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            RetryError::DeadlineExceeded {
                attempts: 1,
                last: Some(AttemptError::TimedOut { .. }),
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.is_deadline());
    assert!(
        error.to_string().contains("deadline of 2000ms exceeded"),
        "{error}"
    );
    assert_eq!(recorder.hits().len(), 1);
}

#[tokio::test]
async fn a_wait_that_would_pass_the_deadline_is_a_deadline_stop_too() {
    let (base, _) = server([Reply::Status(503, vec![("retry-after", "60")], "")]).await;
    let error = client(quick())
        .send(&LIST_ORDERS, |http| http.get(format!("{base}/orders")))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            RetryError::GaveUp {
                reason: GiveUp::RetryAfterBeyondDeadline { .. },
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.is_deadline());
    let (base, _) = server([status(503), status(503), status(503)]).await;
    let exhausted = client(quick())
        .send(&LIST_ORDERS, |http| http.get(format!("{base}/orders")))
        .await
        .unwrap_err();
    assert!(!exhausted.is_deadline(), "{exhausted:?}");
}

/// A raw HTTP/1.1 server whose first `stalls` responses send their headers
/// and part of the body, then hold the connection open; later ones answer in
/// full. Records each request's idempotency key.
async fn stalling_server(stalls: usize) -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&keys);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if socket.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let key = head
                    .lines()
                    .find_map(|l| l.strip_prefix("idempotency-key: "))
                    .unwrap_or("")
                    .trim()
                    .to_owned();
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(key);
                    seen.len()
                };
                if n <= stalls {
                    let _ = socket
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"partial\":")
                        .await;
                    std::future::pending::<()>().await;
                }
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\n\"done\"")
                    .await;
            });
        }
    });
    (format!("http://{addr}"), keys)
}

/// A stall never ends, so a long attempt timeout only costs time; it keeps
/// a slow but healthy attempt on a loaded machine from counting as a stall.
fn stall_policy() -> RetryPolicy {
    quick()
        .deadline(Duration::from_secs(10))
        .attempt_timeout(Duration::from_millis(1500))
}

#[tokio::test]
async fn a_stalled_body_of_a_safe_call_is_retried() {
    let (base, keys) = stalling_server(1).await;
    let response = client(stall_policy())
        .send(&LIST_ORDERS, |http| http.get(format!("{base}/orders")))
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "\"done\"");
    assert_eq!(keys.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_stalled_body_of_a_keyed_call_is_retried_with_the_same_key() {
    let (base, keys) = stalling_server(1).await;
    let response = client(stall_policy())
        .send(&CREATE_ORDER, |http| http.post(format!("{base}/orders")))
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "\"done\"");
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 2);
    assert!(!keys[0].is_empty());
    assert_eq!(keys[0], keys[1]);
}

#[tokio::test]
async fn a_stalled_body_of_an_unsafe_call_is_an_unknown_outcome() {
    let (base, keys) = stalling_server(1).await;
    let error = client(stall_policy())
        .send(&CREATE_REFUND, |http| http.post(format!("{base}/refunds")))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            RetryError::OutcomeUnknown {
                last: AttemptError::BodyStalled { .. },
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(keys.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_body_that_never_finishes_ends_at_the_deadline() {
    let (base, _) = stalling_server(usize::MAX).await;
    let policy = quick().deadline(Duration::from_secs(3));
    let error = client(policy)
        .send(&LIST_ORDERS, |http| http.get(format!("{base}/orders")))
        .await
        .unwrap_err();
    assert!(error.is_deadline(), "{error:?}");
    assert!(
        matches!(
            error,
            RetryError::DeadlineExceeded {
                last: Some(AttemptError::BodyStalled { .. }),
                ..
            }
        ),
        "{error:?}"
    );
}
