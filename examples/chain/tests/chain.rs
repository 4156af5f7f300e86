#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The chain, small: three layers of generated servers and clients as real
//! processes, the bottom one's database down.

use std::path::Path;
use std::time::{Duration, Instant};

use chain_demo::Mode;
use chain_demo::run::{self, Process};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_chain"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_idem_defaults_only_the_top_layer_retries() {
    let requests = 200;
    let r = run::chain(exe(), Mode::Idem, requests, 16).await.unwrap();
    // One call per top-level attempt: the first of each request, plus the
    // retries the top client's budget pays for (500 tokens / 14 per retry).
    let budget_retries = 500 / 14;
    assert!(r.bottom >= requests as i64, "{r:?}");
    assert!(r.bottom <= (requests + budget_retries) as i64, "{r:?}");
    assert!(r.overrun <= Duration::from_millis(50), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_at_every_layer_multiplies_by_sixty_four() {
    let r = run::chain(exe(), Mode::Retry, 5, 5).await.unwrap();
    assert_eq!(r.bottom, 5 * 4 * 4 * 4, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_travel_and_expired_requests_do_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let layer = Process::layer(exe(), dir.path(), 1, None, Mode::Idem, 0, 200)
        .await
        .unwrap();
    let http = idem_runtime::reqwest::Client::new();
    let base = format!("http://{}", layer.addr);
    let work = |timeout: &str| {
        http.post(format!("{base}/v1/work"))
            .header("x-caller", "c")
            .header("idempotency-key", format!("k-{timeout}"))
            .header("idem-timeout-ms", timeout)
            .json(&serde_json_like("w"))
            .send()
    };
    // Arrived with no time left: refused before the handler runs.
    let r = work("0").await.unwrap();
    assert_eq!(r.status(), 504);
    let body: idem_runtime::serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["code"], "deadline_exceeded");
    assert_eq!(layer.calls().await.unwrap(), 0, "nothing ran");
    // A malformed header is a 400 naming it.
    assert_eq!(work("soon").await.unwrap().status(), 400);
    // A slow handler is cut at the caller's deadline.
    let started = Instant::now();
    let r = http
        .get(format!("{base}/v1/slow"))
        .header("idem-timeout-ms", "30")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    assert!(
        started.elapsed() < Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
    // gRPC's spelling is read too.
    let r = http
        .get(format!("{base}/v1/slow"))
        .header("grpc-timeout", "20m")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
}

fn serde_json_like(id: &str) -> idem_runtime::serde_json::Value {
    idem_runtime::serde_json::json!({ "id": id })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_admission_limit_requests_are_refused_at_once() {
    let o = run::overload(exe(), 96, 20, 0.5).await.unwrap();
    assert!(o.refused > 0, "{o:?}");
    assert!(o.accepted > 0, "{o:?}");
    // Refusals do not wait for a slot: far below the 20 ms a request takes.
    assert!(o.refused_p50 < Duration::from_millis(10), "{o:?}");
}
