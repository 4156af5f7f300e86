#![cfg(feature = "client")]
#![allow(
    clippy::unwrap_used,
    reason = "helpers of a test binary: a failed unwrap is a failed test"
)]
//! Retry events through `tracing`, in a test binary of their own.
//!
//! tracing caches each callsite's interest process-wide. A subscriber set
//! with `set_default` on one test thread while other tests hit the same
//! callsites on other threads can leave the callsite marked "never", and the
//! events are lost. Here the subscriber is the global default and this is the
//! only test in the process, so every thread sees it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use idem_runtime::client::{IdempotencyKey, Operation, RetryClass, RetryClient, SeededRandom};

/// Collects formatted `tracing` output.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn response(status: u16, header: Option<(&str, &str)>) -> reqwest::Response {
    let mut builder = http::Response::builder().status(status);
    if let Some((name, value)) = header {
        builder = builder.header(name, value);
    }
    reqwest::Response::from(builder.body("").unwrap())
}

#[tokio::test(start_paused = true)]
async fn every_retry_is_a_tracing_event() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let client = RetryClient::builder(reqwest::Client::new())
        .random(Arc::new(SeededRandom::new(7)))
        .build();
    let operation = Operation::new("createOrder", RetryClass::Keyed);
    let key = IdempotencyKey::derived(["order", "739", "confirm"]).unwrap();
    let script = Mutex::new(VecDeque::from([
        (503, None),
        (429, Some(("retry-after", "1"))),
    ]));
    client
        .execute_with(&operation, Some(key), None, |_| {
            let (status, header) = script.lock().unwrap().pop_front().unwrap_or((200, None));
            std::future::ready(Ok(response(status, header)))
        })
        .await
        .unwrap();

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let retries: Vec<&str> = text.lines().filter(|l| l.contains("retrying")).collect();
    assert_eq!(retries.len(), 2, "{text}");
    for (line, attempt) in retries.iter().zip(1..) {
        for field in [
            "operation=\"createOrder\"",
            &format!("attempt={attempt}"),
            "next_wait_ms=",
            "budget_remaining=",
            "key=\"order-739-confirm\"",
        ] {
            assert!(line.contains(field), "{field} missing from {line}");
        }
    }
    assert!(
        retries[0].contains("error=server answered 503 Service Unavailable"),
        "{}",
        retries[0]
    );
    assert!(retries[1].contains("retry_after_ms=1000"), "{}", retries[1]);
}
