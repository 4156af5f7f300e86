#![cfg(feature = "client")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::result_large_err,
    reason = "test code: a failed unwrap is a failed test; the decoder returns what generated ones do"
)]
//! Lists that page themselves, server-sent events and streamed bodies,
//! against a loopback server: every item exactly once and in order through
//! a `503` mid-way, a failed page resumed from its cursor, events split
//! anywhere across writes, an oversized event refused, a keyed streamed POST
//! never sent twice, and a large download read chunk by chunk.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt as _;
use idem_runtime::client::support::{ApiClient, KeyLocation, OperationSpec, PolicyOverride, Raw};
use idem_runtime::client::support::{ApiError, Request as Described};
use idem_runtime::client::{
    EventError, NextPage, Operation, PageSpec, Resume, RetryClass, RetryClient, RetryPolicy,
};
use serde_json::{Value, json};

const LIST: OperationSpec = OperationSpec {
    operation: Operation::new("listThings", RetryClass::Safe),
    key: KeyLocation::None,
    security: &[],
    retry: PolicyOverride::NONE,
};

const CHAT: OperationSpec = OperationSpec {
    operation: Operation::new("createChat", RetryClass::Keyed),
    key: KeyLocation::Header("Idempotency-Key"),
    security: &[],
    retry: PolicyOverride::NONE,
};

fn decode(raw: &Raw) -> Result<Value, ApiError<Value>> {
    if raw.status.is_success() {
        Ok(raw.json()?)
    } else {
        raw.error(raw.json().unwrap_or(Value::Null))
    }
}

async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn client(base: &str) -> ApiClient {
    let retry = RetryClient::builder(reqwest::Client::new())
        .policy(
            RetryPolicy::default()
                .max_attempts(3)
                .deadline(Duration::from_secs(20)),
        )
        .build();
    ApiClient::new(base, retry).unwrap()
}

const ITEMS: usize = 11;
const PAGE: usize = 3;

/// The page of items after `start`, with whether more follow.
fn slice(start: usize) -> (Vec<Value>, bool) {
    let end = (start + PAGE).min(ITEMS);
    let items = (start..end)
        .map(|i| json!({"id": format!("it_{i:02}"), "n": i}))
        .collect();
    (items, end < ITEMS)
}

fn index_after(id: Option<&String>) -> usize {
    id.and_then(|id| id.strip_prefix("it_"))
        .and_then(|n| n.parse::<usize>().ok())
        .map_or(0, |n| n + 1)
}

/// Answers the second page `503` + `Retry-After` once.
#[derive(Clone, Default)]
struct Flaky {
    calls: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
}

impl Flaky {
    fn fail_once(&self, start: usize) -> Option<Response> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if start == PAGE
            && self
                .failed
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return Some(
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "0")],
                    "busy",
                )
                    .into_response(),
            );
        }
        None
    }
}

type Params = Query<std::collections::HashMap<String, String>>;

fn app(flaky: Flaky) -> axum::Router {
    let stripe = {
        let flaky = flaky.clone();
        move |Query(q): Params| {
            let flaky = flaky.clone();
            async move {
                let start = index_after(q.get("starting_after"));
                if let Some(busy) = flaky.fail_once(start) {
                    return busy;
                }
                if q.get("starting_after").is_some_and(|a| a == "it_05") {
                    return (StatusCode::BAD_REQUEST, axum::Json(json!({"code": "nope"})))
                        .into_response();
                }
                let (data, has_more) = slice(start);
                axum::Json(json!({"object": "list", "data": data, "has_more": has_more}))
                    .into_response()
            }
        }
    };
    let cursor = {
        let flaky = flaky.clone();
        move |Query(q): Params| {
            let flaky = flaky.clone();
            async move {
                let start: usize = q.get("cursor").and_then(|c| c.parse().ok()).unwrap_or(0);
                if let Some(busy) = flaky.fail_once(start) {
                    return busy;
                }
                let (items, more) = slice(start);
                let next = more.then(|| (start + PAGE).to_string());
                axum::Json(json!({"items": items, "next_cursor": next})).into_response()
            }
        }
    };
    let dropshot = {
        let flaky = flaky.clone();
        move |Query(q): Params| {
            let flaky = flaky.clone();
            async move {
                let start: usize = q
                    .get("page_token")
                    .and_then(|c| c.strip_prefix("tok"))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                if let Some(busy) = flaky.fail_once(start) {
                    return busy;
                }
                let (items, more) = slice(start);
                let next = more.then(|| format!("tok{}", start + PAGE));
                axum::Json(json!({"items": items, "next_page": next})).into_response()
            }
        }
    };
    let link = {
        let flaky = flaky.clone();
        move |Query(q): Params, headers: HeaderMap| {
            let flaky = flaky.clone();
            async move {
                let page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
                let start = (page - 1) * PAGE;
                if let Some(busy) = flaky.fail_once(start) {
                    return busy;
                }
                let (items, more) = slice(start);
                let host = headers[header::HOST]
                    .to_str()
                    .unwrap_or_default()
                    .to_owned();
                let mut response = axum::Json(Value::Array(items)).into_response();
                let mut links = vec![format!("<http://{host}/link?page=1>; rel=\"first\"")];
                if more {
                    links.push(format!(
                        "<http://{host}/link?page={}&per_page=3>; rel=\"next\"",
                        page + 1
                    ));
                }
                response
                    .headers_mut()
                    .insert(header::LINK, links.join(", ").parse().unwrap());
                response
            }
        }
    };
    let offset = move |Query(q): Params| {
        let flaky = flaky.clone();
        async move {
            let start: usize = q.get("offset").and_then(|c| c.parse().ok()).unwrap_or(0);
            if let Some(busy) = flaky.fail_once(start) {
                return busy;
            }
            axum::Json(json!({"results": slice(start).0})).into_response()
        }
    };
    axum::Router::new()
        .route("/stripe", get(stripe))
        .route("/cursor", get(cursor))
        .route("/dropshot", get(dropshot))
        .route("/link", get(link))
        .route("/offset", get(offset))
}

async fn every_item(base: &str, path: &str, spec: &'static PageSpec) -> Vec<String> {
    let api = client(base);
    let mut request = Described::new(reqwest::Method::GET, path.to_owned());
    if path == "/offset" {
        request.query(
            "limit",
            &PAGE,
            idem_runtime::client::support::Style::Form,
            true,
        );
    }
    let items: Vec<Result<Value, _>> = api
        .call(&LIST, request, decode)
        .paged::<Value>(spec)
        .paginate()
        .collect()
        .await;
    items
        .into_iter()
        .map(|item| {
            item.expect("every page answered")["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn all_ids() -> Vec<String> {
    (0..ITEMS).map(|i| format!("it_{i:02}")).collect()
}

#[tokio::test]
async fn every_pattern_yields_every_item_once_in_order_through_a_503() {
    static STRIPE: PageSpec = PageSpec {
        items: "/data",
        next: NextPage::AfterLastItem {
            more: "/has_more",
            id: "id",
            param: "starting_after",
        },
    };
    static CURSOR: PageSpec = PageSpec {
        items: "/items",
        next: NextPage::Cursor {
            pointer: "/next_cursor",
            param: "cursor",
        },
    };
    static DROPSHOT: PageSpec = PageSpec {
        items: "/items",
        next: NextPage::Cursor {
            pointer: "/next_page",
            param: "page_token",
        },
    };
    static LINK: PageSpec = PageSpec {
        items: "",
        next: NextPage::Link,
    };
    static OFFSET: PageSpec = PageSpec {
        items: "/results",
        next: NextPage::Offset {
            param: "offset",
            limit: Some("limit"),
        },
    };
    for (path, spec, pages) in [
        ("/cursor", &CURSOR, 4),
        ("/dropshot", &DROPSHOT, 4),
        ("/link", &LINK, 4),
        ("/offset", &OFFSET, 4),
    ] {
        let flaky = Flaky::default();
        let base = serve(app(flaky.clone())).await;
        assert_eq!(every_item(&base, path, spec).await, all_ids(), "{path}");
        assert_eq!(
            flaky.failed.load(Ordering::SeqCst),
            1,
            "{path}: one 503 was sent"
        );
        assert_eq!(
            flaky.calls.load(Ordering::SeqCst),
            pages + 1,
            "{path}: each page once, the refused one twice"
        );
    }

    // Stripe's list refuses the page after it_05: the stream ends with
    // where to resume, and resuming lists the rest, each item once.
    let flaky = Flaky::default();
    let base = serve(app(flaky.clone())).await;
    let api = client(&base);
    let call = || {
        api.call(
            &LIST,
            Described::new(reqwest::Method::GET, "/stripe".to_owned()),
            decode,
        )
        .paged::<Value>(&STRIPE)
    };
    let mut seen = Vec::new();
    let mut stream = Box::pin(call().paginate());
    let mut failure = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(item) => seen.push(item["id"].as_str().unwrap().to_owned()),
            Err(e) => failure = Some(e),
        }
    }
    let failure = failure.expect("the refused page ends the stream");
    assert_eq!(failure.error.status(), Some(StatusCode::BAD_REQUEST));
    assert_eq!(
        failure.resume,
        Resume::Query {
            param: "starting_after",
            value: "it_05".to_owned()
        }
    );
    assert_eq!(seen, all_ids()[..6]);
}

#[tokio::test]
async fn a_listing_resumes_from_the_cursor_of_the_page_that_failed() {
    static CURSOR: PageSpec = PageSpec {
        items: "/items",
        next: NextPage::Cursor {
            pointer: "/next_cursor",
            param: "cursor",
        },
    };
    let flaky = Flaky::default();
    let base = serve(app(flaky)).await;
    let api = client(&base);
    let rest: Vec<String> = api
        .call(
            &LIST,
            Described::new(reqwest::Method::GET, "/cursor".to_owned()),
            decode,
        )
        .paged::<Value>(&CURSOR)
        .resume(Resume::Query {
            param: "cursor",
            value: "6".to_owned(),
        })
        .paginate()
        .map(|item| item.unwrap()["id"].as_str().unwrap().to_owned())
        .collect()
        .await;
    assert_eq!(rest, all_ids()[6..]);
    // Whole pages, typed as the operation's answer.
    let pages: Vec<Value> = api
        .call(
            &LIST,
            Described::new(reqwest::Method::GET, "/cursor".to_owned()),
            decode,
        )
        .paged::<Value>(&CURSOR)
        .pages()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(pages.len(), 4);
    assert_eq!(pages[3]["next_cursor"], Value::Null);
}

/// A body written in the given pieces, a pause between each.
fn trickle(pieces: Vec<Vec<u8>>) -> Body {
    let stream = futures_util::stream::iter(pieces).then(|piece| async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok::<_, std::io::Error>(bytes::Bytes::from(piece))
    });
    Body::from_stream(stream)
}

/// An event stream written in `pieces`; an error piece breaks the
/// connection once what came before it has surely arrived.
fn event_stream(pieces: Vec<Result<bytes::Bytes, std::io::Error>>) -> Response {
    let body = futures_util::stream::iter(pieces).then(|piece| async move {
        if piece.is_err() {
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        piece
    });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(body),
    )
        .into_response()
}

#[derive(Debug, serde::Deserialize, PartialEq)]
struct Delta {
    text: String,
}

#[tokio::test]
async fn events_split_anywhere_arrive_typed() {
    let wire: &[u8] = b": keep-alive\r\n\
        data: {\"text\":\r\
        data: \"hello\"}\n\n\
        event: delta\r\nid: 2\r\ndata: {\"text\": \"w\xc3\xb6rld\"}\r\n\r\n\
        : another comment\n\
        data: [DONE]\n\n\
        data: {\"text\": \"after the end\"}\n\n";
    // Every two bytes a separate write: events, lines and a UTF-8
    // character split across them.
    let pieces: Vec<Vec<u8>> = wire.chunks(2).map(<[u8]>::to_vec).collect();
    let sent = Arc::new(AtomicUsize::new(0));
    let app = {
        let sent = Arc::clone(&sent);
        axum::Router::new().route(
            "/chat",
            post(move |_: Request| {
                let (sent, pieces) = (Arc::clone(&sent), pieces.clone());
                async move {
                    sent.fetch_add(1, Ordering::SeqCst);
                    (
                        [(header::CONTENT_TYPE, "text/event-stream")],
                        trickle(pieces),
                    )
                }
            }),
        )
    };
    let base = serve(app).await;
    let api = client(&base);
    let mut request = Described::new(reqwest::Method::POST, "/chat".to_owned());
    request.json(&json!({"stream": true}));
    let events: Vec<Delta> = api
        .call(&CHAT, request, decode)
        .events::<Delta>()
        .stream()
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(
        events,
        [
            Delta {
                text: "hello".into()
            },
            Delta {
                text: "wörld".into()
            }
        ]
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_oversized_event_is_refused_and_a_broken_keyed_stream_is_not_sent_again() {
    let sent = Arc::new(AtomicUsize::new(0));
    let app = {
        let sent = Arc::clone(&sent);
        axum::Router::new()
            .route(
                "/huge",
                post(|| async {
                    // 1 KiB lines, forever, in one event.
                    let line = format!("data: {}\n", "x".repeat(1024)).into_bytes();
                    let body = futures_util::stream::repeat(line)
                        .map(|l| Ok::<_, std::io::Error>(bytes::Bytes::from(l)));
                    (
                        [(header::CONTENT_TYPE, "text/event-stream")],
                        Body::from_stream(body),
                    )
                }),
            )
            .route(
                "/breaks",
                post(move |headers: HeaderMap| {
                    let sent = Arc::clone(&sent);
                    async move {
                        sent.fetch_add(1, Ordering::SeqCst);
                        assert!(headers.contains_key("idempotency-key"));
                        event_stream(vec![
                            Ok(bytes::Bytes::from_static(
                                b"id: 1\ndata: {\"text\": \"one\"}\n\n",
                            )),
                            Err(std::io::Error::other("the server went away")),
                        ])
                    }
                }),
            )
    };
    let base = serve(app).await;
    let api = client(&base);

    let mut huge = api
        .call(
            &CHAT,
            Described::new(reqwest::Method::POST, "/huge".to_owned()),
            decode,
        )
        .events::<Delta>()
        .limits(idem_runtime::client::sse::Limits {
            max_line: 64 * 1024,
            max_event: 256 * 1024,
        })
        .stream()
        .await
        .unwrap();
    match huge.next().await {
        Some(Err(EventError::TooLarge(e))) => assert!(e.to_string().contains("262144")),
        other => panic!("expected the event to be refused, got {other:?}"),
    }

    let mut broken = api
        .call(
            &CHAT,
            Described::new(reqwest::Method::POST, "/breaks".to_owned()),
            decode,
        )
        .events::<Delta>()
        .stream()
        .await
        .unwrap();
    assert_eq!(broken.next().await.unwrap().unwrap().text, "one");
    match broken.next().await {
        Some(Err(EventError::Broken {
            received,
            last_event_id,
            key,
            ..
        })) => {
            assert_eq!(received, 1);
            assert_eq!(last_event_id.as_deref(), Some("1"));
            assert!(key.is_some(), "the key to reconcile with");
        }
        other => panic!("expected a broken stream, got {other:?}"),
    }
    assert!(broken.next().await.is_none());
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "a keyed POST is never sent twice"
    );
}

#[tokio::test]
async fn a_large_download_is_read_chunk_by_chunk() {
    const SIZE: usize = 64 << 20;
    let app = axum::Router::new().route(
        "/file",
        get(|| async {
            let chunk = bytes::Bytes::from(vec![7u8; 64 << 10]);
            let body = futures_util::stream::iter(
                (0..SIZE / chunk.len()).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
            );
            (
                [(header::CONTENT_TYPE, "application/octet-stream")],
                Body::from_stream(body),
            )
        }),
    );
    let base = serve(app).await;
    let api = client(&base);
    let mut body = api
        .call(
            &LIST,
            Described::new(reqwest::Method::GET, "/file".to_owned()),
            decode,
        )
        .send_streaming()
        .await
        .unwrap();
    let (mut total, mut largest) = (0usize, 0usize);
    while let Some(chunk) = body.chunk().await.unwrap() {
        total += chunk.len();
        largest = largest.max(chunk.len());
    }
    assert_eq!(total, SIZE);
    assert!(
        largest <= 1 << 20,
        "chunks as they arrive, not the whole body"
    );
}

#[tokio::test]
async fn uploads_come_from_a_file_on_every_attempt_and_from_a_stream_once() {
    const SIZE: usize = 8 << 20;
    // Counts the bytes of each upload; the first is refused after it was
    // read whole, as a server that answers 503 late would.
    let received = Arc::new(std::sync::Mutex::new(Vec::<usize>::new()));
    let app = {
        let received = Arc::clone(&received);
        axum::Router::new().route(
            "/upload",
            post(move |request: Request| {
                let received = Arc::clone(&received);
                async move {
                    let mut body = request.into_body().into_data_stream();
                    let mut total = 0;
                    while let Some(chunk) = body.next().await {
                        total += chunk.unwrap().len();
                    }
                    let mut seen = received.lock().unwrap();
                    seen.push(total);
                    if seen.len() == 1 {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            [(header::RETRY_AFTER, "0")],
                            "later",
                        )
                            .into_response()
                    } else {
                        (StatusCode::OK, axum::Json(json!({"bytes": total}))).into_response()
                    }
                }
            }),
        )
    };
    let base = serve(app).await;
    let api = client(&base);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("upload.bin");
    std::fs::write(&path, vec![3u8; SIZE]).unwrap();
    const PUT: OperationSpec = OperationSpec {
        operation: Operation::new("putObject", RetryClass::Safe),
        key: KeyLocation::None,
        security: &[],
        retry: PolicyOverride::NONE,
    };
    let answer = api
        .call(
            &PUT,
            Described::new(reqwest::Method::POST, "/upload".to_owned()),
            decode,
        )
        .body_file("application/octet-stream", &path)
        .send()
        .await
        .unwrap();
    assert_eq!(answer["bytes"], SIZE);
    assert_eq!(
        *received.lock().unwrap(),
        [SIZE, SIZE],
        "the file was sent whole twice"
    );

    // A stream is read by its one attempt: the 503 is the answer.
    received.lock().unwrap().clear();
    let chunks = futures_util::stream::iter(
        (0..8).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![5u8; 1 << 20]))),
    );
    let refused = api
        .call(
            &PUT,
            Described::new(reqwest::Method::POST, "/upload".to_owned()),
            decode,
        )
        .body_stream("application/octet-stream", chunks)
        .send()
        .await;
    assert!(refused.is_err());
    assert_eq!(*received.lock().unwrap(), [SIZE], "one attempt");

    let missing = api
        .call(
            &PUT,
            Described::new(reqwest::Method::POST, "/upload".to_owned()),
            decode,
        )
        .body_file("application/octet-stream", dir.path().join("nope.bin"))
        .send()
        .await;
    assert!(matches!(missing, Err(ApiError::Encode(_))));
}

#[tokio::test]
async fn a_stream_that_breaks_before_its_first_event_is_sent_again_with_its_key() {
    let keys = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let app = {
        let keys = Arc::clone(&keys);
        axum::Router::new().route(
            "/chat",
            post(move |headers: HeaderMap| {
                let keys = Arc::clone(&keys);
                async move {
                    let key = headers["idempotency-key"].to_str().unwrap().to_owned();
                    let first = {
                        let mut keys = keys.lock().unwrap();
                        keys.push(key);
                        keys.len() == 1
                    };
                    // The first answer breaks after a comment, before any
                    // event; the second is whole.
                    let pieces: Vec<Result<bytes::Bytes, std::io::Error>> = if first {
                        vec![
                            Ok(bytes::Bytes::from_static(b": starting\n")),
                            Err(std::io::Error::other("the server went away")),
                        ]
                    } else {
                        vec![Ok(bytes::Bytes::from_static(
                            b"data: {\"text\": \"whole\"}\n\ndata: [DONE]\n\n",
                        ))]
                    };
                    event_stream(pieces)
                }
            }),
        )
    };
    let base = serve(app).await;
    let api = client(&base);
    let events: Vec<Delta> = api
        .call(
            &CHAT,
            Described::new(reqwest::Method::POST, "/chat".to_owned()),
            decode,
        )
        .events::<Delta>()
        .stream()
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(
        events,
        [Delta {
            text: "whole".into()
        }]
    );
    let keys = keys.lock().unwrap();
    assert_eq!(keys.len(), 2, "sent again once");
    assert_eq!(keys[0], keys[1], "with the same key");
}
