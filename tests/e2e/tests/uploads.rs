#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! `fixtures/uploads.yaml` served by its generated server on SQLite: a raw
//! byte body reaches the handler as it arrives, bounded by the policy's
//! cap. A 200 MB keyed upload (spooled to a temporary file while it is
//! fingerprinted) and a 200 MB unkeyed one leave the process's peak memory
//! flat; a retry with the same key and bytes is replayed, with other bytes
//! refused; a body past the cap is `413` and never reaches the handler.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_e2e::uploads as api;
use idem_runtime::reqwest;
use idem_runtime::server::support::{Context, Upload};
use idem_runtime::server::{Fault, HeaderScope, IdemTx, Idempotency, Policy, Store};
use idem_runtime::sqlx::Sqlite;

const MB: usize = 1_000_000;

#[derive(Clone, Default)]
struct Files {
    /// Handler runs.
    runs: Arc<AtomicUsize>,
    /// The largest chunk a handler was given.
    largest_chunk: Arc<AtomicUsize>,
}

impl Files {
    /// Reads `upload` chunk by chunk: its size and its bytes added up.
    async fn drain(&self, mut upload: Upload) -> Option<(i64, i64)> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let (mut size, mut sum) = (0i64, 0i64);
        loop {
            match upload.chunk().await {
                Ok(Some(chunk)) => {
                    self.largest_chunk.fetch_max(chunk.len(), Ordering::SeqCst);
                    size += chunk.len() as i64;
                    sum = chunk
                        .iter()
                        .fold(sum, |s, b| s.wrapping_add(i64::from(*b)) & i64::MAX);
                }
                Ok(None) => return Some((size, sum)),
                Err(_) => return None,
            }
        }
    }
}

fn too_large() -> api::Problem {
    api::Problem {
        title: Some("the upload is too large".into()),
        ..api::Problem::default()
    }
}

impl api::Api<Sqlite> for Files {
    async fn upload_file(
        &self,
        _cx: Context,
        _tx: IdemTx<Sqlite>,
        input: api::UploadFileInput,
    ) -> Result<api::UploadFileReply, Fault> {
        Ok(match self.drain(input.body).await {
            Some((size, sum)) => api::UploadFileReply::Created(api::File {
                name: input.name,
                size,
                sum,
            }),
            None => api::UploadFileReply::PayloadTooLarge(too_large()),
        })
    }

    async fn put_image(
        &self,
        _cx: Context,
        input: api::PutImageInput,
    ) -> Result<api::PutImageReply, Fault> {
        Ok(match self.drain(input.body).await {
            Some((size, sum)) => api::PutImageReply::Ok(api::File {
                name: input.name,
                size,
                sum,
            }),
            None => api::PutImageReply::PayloadTooLarge(too_large()),
        })
    }
}

async fn serve(files: Files, cap: usize) -> String {
    let store = Store::open_sqlite("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    let idem = Idempotency::builder(store)
        .scope(HeaderScope::new("x-account-id"))
        .policy(Policy::new().max_request_body(cap))
        .build()
        .unwrap();
    let app = api::router(files, &idem).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// `len` bytes (`i % 251` at offset `i`) as a streamed body, 64 KiB at a
/// time, and their sum as the handler adds them up.
fn body(len: usize) -> (reqwest::Body, i64) {
    const PIECE: usize = 64 * 1024;
    let sum = (0..len).fold(0i64, |s, i| s.wrapping_add((i % 251) as i64) & i64::MAX);
    let pieces = (0..len.div_ceil(PIECE)).map(move |n| {
        let start = n * PIECE;
        let bytes: Vec<u8> = (start..(start + PIECE).min(len))
            .map(|i| (i % 251) as u8)
            .collect();
        Ok::<_, std::io::Error>(bytes::Bytes::from(bytes))
    });
    (
        reqwest::Body::wrap_stream(futures_util::stream::iter(pieces)),
        sum,
    )
}

/// This process's peak resident memory, in MB.
fn peak_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    kib * 1024.0 / MB as f64
}

async fn upload(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    len: usize,
) -> (u16, serde_json::Value, i64) {
    let (body, sum) = body(len);
    let response = http
        .post(format!("{base}/files?name=big.bin"))
        .header("idempotency-key", key)
        .header("x-account-id", "acct_1")
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default(), sum)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_mb_upload_reaches_the_handler_with_flat_memory() {
    let files = Files::default();
    let base = serve(files.clone(), 256 * MB).await;
    let http = reqwest::Client::new();
    let before = peak_mb();

    // Keyed: spooled while fingerprinted, then read by the handler.
    let (status, stored, sum) = upload(&http, &base, "upload-1", 200 * MB).await;
    assert_eq!(status, 201, "{stored}");
    assert_eq!(stored["size"], 200 * MB);
    assert_eq!(stored["sum"], sum);
    // Unkeyed: the connection's body, passed through.
    let (image, sum) = body(200 * MB);
    let response = http
        .put(format!("{base}/images/big.png"))
        .header("content-type", "image/png")
        .body(image)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let stored: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        (stored["size"].as_u64(), stored["sum"].as_i64()),
        (Some(200 * MB as u64), Some(sum))
    );

    let after = peak_mb();
    eprintln!(
        "two 200 MB uploads: peak resident memory {before:.1} MB before, {after:.1} MB after (+{:.1} MB); largest chunk {} bytes",
        after - before,
        files.largest_chunk.load(Ordering::SeqCst)
    );
    // Either body held whole would add 200 MB.
    assert!(
        after - before < 64.0,
        "peak memory grew {:.1} MB for 200 MB uploads",
        after - before
    );
    assert_eq!(files.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn keyed_uploads_replay_refuse_other_bytes_and_stop_at_the_cap() {
    let files = Files::default();
    let base = serve(files.clone(), MB).await;
    let http = reqwest::Client::new();

    let (first, stored, _) = upload(&http, &base, "k-1", 300_000).await;
    assert_eq!(first, 201, "{stored}");
    // The same key and bytes: the stored answer, the handler not run again.
    let (again, replayed, _) = upload(&http, &base, "k-1", 300_000).await;
    assert_eq!((again, &replayed), (201, &stored));
    assert_eq!(files.runs.load(Ordering::SeqCst), 1);
    // The same key with other bytes: refused as a reused key.
    let (other, problem, _) = upload(&http, &base, "k-1", 300_001).await;
    assert!(matches!(other, 409 | 422), "{other}: {problem}");
    assert_eq!(files.runs.load(Ordering::SeqCst), 1);

    // Past the cap, streamed without a length: 413 before the handler.
    let (over, _, _) = upload(&http, &base, "k-2", MB + 1).await;
    assert_eq!(over, 413);
    assert_eq!(files.runs.load(Ordering::SeqCst), 1);
    // Past the cap by its `Content-Length`: 413 before anything is read.
    let response = http
        .put(format!("{base}/images/x.png"))
        .header("content-type", "image/png")
        .body(vec![0u8; MB + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    // Unkeyed and streamed past the cap: the handler's read fails at the cap.
    let (image, _) = body(MB + 1);
    let response = http
        .put(format!("{base}/images/y.png"))
        .header("content-type", "image/png")
        .body(image)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
}
