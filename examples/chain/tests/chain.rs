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
    // (A request whose deadline runs out above may never reach the bottom.)
    assert!(r.bottom > 0, "{r:?}");
    assert!(r.bottom <= (requests + budget_retries) as i64, "{r:?}");
    // Every request ends by its deadline; the slack is for a loaded machine
    // (the bench holds the 50 ms goal).
    assert!(r.overrun <= Duration::from_secs(1), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_at_every_layer_multiplies_by_sixty_four() {
    let r = run::chain(exe(), Mode::Retry, 5, 5).await.unwrap();
    assert_eq!(r.bottom, 5 * 4 * 4 * 4, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_travel_and_expired_requests_do_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let layer = Process::layer(exe(), dir.path(), 1, None, Mode::Idem, 0, 2000)
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
    // A slow handler (2 s) is cut at the caller's deadline.
    let started = Instant::now();
    let r = http
        .get(format!("{base}/v1/slow"))
        .header("idem-timeout-ms", "30")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
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
    let o = run::overload(exe(), 96, 200, 1.0).await.unwrap();
    assert!(o.refused > 0, "{o:?}");
    assert!(o.accepted > 0, "{o:?}");
    // Refusals do not wait for a slot: a queued request would wait for one
    // of the 200 ms requests ahead of it (speed itself is the bench's job).
    assert!(o.server_p99 < Duration::from_millis(100), "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_request_cut_by_its_deadline_leaves_nothing_half_done() {
    let dir = tempfile::tempdir().unwrap();
    // doWork takes 1.5 s, then writes its row in the key's transaction.
    let bottom = Process::bottom_with_database(exe(), dir.path(), 1500)
        .await
        .unwrap();
    let http = idem_runtime::reqwest::Client::new();
    let url = format!("http://{}/v1/work", bottom.addr);
    let send = |timeout: Option<&str>| {
        let mut request = http
            .post(&url)
            .header("x-caller", "c")
            .header("idempotency-key", "cut-once")
            .json(&serde_json_like("w-1"));
        if let Some(t) = timeout {
            request = request.header("idem-timeout-ms", t);
        }
        request.send()
    };
    let started = Instant::now();
    let cut = send(Some("400")).await.unwrap();
    assert_eq!(cut.status(), 504);
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
    // Past the time the handler would have needed to write.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let stats = bottom.stats().await.unwrap();
    assert_eq!(
        (stats.calls, stats.effects),
        (1, 0),
        "the write and the claim rolled back"
    );
    // The key is free: the retry runs, once, and then replays.
    let retry = send(None).await.unwrap();
    assert_eq!(retry.status(), 201);
    assert!(!retry.headers().contains_key("idempotent-replayed"));
    let replay = send(None).await.unwrap();
    assert_eq!(replay.status(), 201);
    assert!(replay.headers().contains_key("idempotent-replayed"));
    let stats = bottom.stats().await.unwrap();
    assert_eq!((stats.calls, stats.effects), (2, 1));
}
