//! A 500 MB download read with `.send_streaming()` from a loopback server:
//! prints the bytes, the time and the process's peak resident memory
//! before and after, which stays flat however large the body.
//!
//! ```text
//! cargo run --release -p idem-runtime --features client,server --example download_bench [MB]
//! ```

use std::time::{Duration, Instant};

use idem_runtime::axum::{self, body::Body, http::header, routing::get};
use idem_runtime::client::support::{
    ApiClient, KeyLocation, OperationSpec, PolicyOverride, Raw, Request,
};
use idem_runtime::client::{Operation, RetryClass, RetryClient, RetryPolicy};

const DOWNLOAD: OperationSpec = OperationSpec {
    operation: Operation::new("downloadFile", RetryClass::Safe),
    key: KeyLocation::None,
    security: &[],
    retry: PolicyOverride::NONE,
};

#[allow(
    clippy::result_large_err,
    reason = "the shape of a generated decoder, whose error every call returns"
)]
fn decode(raw: &Raw) -> Result<(), idem_runtime::client::support::ApiError<()>> {
    if raw.status.is_success() {
        Ok(())
    } else {
        raw.unexpected()
    }
}

/// The peak resident set of this process, in MiB (Linux).
fn peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mb: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500);
    let size = mb << 20;
    let app = axum::Router::new().route(
        "/file",
        get(move || async move {
            let chunk = idem_runtime::bytes::Bytes::from(vec![7u8; 64 << 10]);
            let body = futures_util::stream::iter(
                (0..size / chunk.len()).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
            );
            (
                [(header::CONTENT_TYPE, "application/octet-stream")],
                Body::from_stream(body),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let retry = RetryClient::builder(idem_runtime::reqwest::Client::new())
        .policy(RetryPolicy::default().deadline(Duration::from_secs(600)))
        .build();
    let client = ApiClient::new(&base, retry)?;
    let before = peak_mib();
    let started = Instant::now();
    let mut body = client
        .call(
            &DOWNLOAD,
            Request::new(idem_runtime::http::Method::GET, "/file".into()),
            decode,
        )
        .send_streaming()
        .await?;
    let mut total = 0usize;
    while let Some(chunk) = body.chunk().await? {
        total += chunk.len();
    }
    let seconds = started.elapsed().as_secs_f64();
    println!("downloaded      {total} bytes ({mb} MiB)");
    println!(
        "time            {seconds:.2} s ({:.0} MiB/s)",
        mb as f64 / seconds
    );
    if let (Some(before), Some(after)) = (before, peak_mib()) {
        println!("peak RSS        {before:.1} MiB before, {after:.1} MiB after");
    }
    Ok(())
}
