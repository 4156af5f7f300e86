#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The client generated from `fixtures/streams.yaml` against a loopback
//! server: each list pages itself (Stripe's list object, a body cursor,
//! `Link` headers, dropshot, page numbers, `x-pagination` overrides) through a `503`
//! mid-way, the completion streams typed events, and the download is read
//! chunk by chunk.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt as _;
use idem_e2e::streams::{
    Client, CreateChatCompletionRequest, InstanceListParams, ListArticlesParams,
    ListCustomersParams, ListEventsParams, ListInvoicesParams, ListLogsParams, ListProductsParams,
    ListReposParams,
};
use serde_json::{Value, json};

const TOTAL: usize = 8;
const PAGE: usize = 3;

type Params = Query<HashMap<String, String>>;

/// Answers the second page of each list `503` once.
#[derive(Clone, Default)]
struct Once(Arc<AtomicUsize>);

impl Once {
    fn busy(&self, start: usize) -> Option<Response> {
        (start == PAGE && self.0.fetch_add(1, Ordering::SeqCst).is_multiple_of(2)).then(|| {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "0")],
                "busy",
            )
                .into_response()
        })
    }
}

fn ids(start: usize) -> (Vec<usize>, bool) {
    let end = (start + PAGE).min(TOTAL);
    ((start..end).collect(), end < TOTAL)
}

fn num(q: &HashMap<String, String>, name: &str) -> usize {
    q.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The lists that count: pages from 1 with a page count, from 0 (Spring
/// Data's), under another name with a "more" flag, and an offset named
/// `skip`.
fn counted(once: &Once) -> axum::Router {
    axum::Router::new()
        .route(
            "/logs",
            get({
                let once = once.clone();
                move |Query(q): Params| async move {
                    let start = num(&q, "skip");
                    if let Some(busy) = once.busy(start) {
                        return busy;
                    }
                    let lines: Vec<String> =
                        ids(start).0.iter().map(|i| format!("line {i}")).collect();
                    axum::Json(json!({"lines": lines})).into_response()
                }
            }),
        )
        .route(
            "/invoices",
            get({
                let once = once.clone();
                move |Query(q): Params| async move {
                    let page = num(&q, "page").max(1);
                    if let Some(busy) = once.busy((page - 1) * PAGE) {
                        return busy;
                    }
                    let total_pages = TOTAL.div_ceil(PAGE);
                    if page > total_pages {
                        return (StatusCode::NOT_FOUND, "past the last page").into_response();
                    }
                    let results: Vec<Value> = ids((page - 1) * PAGE)
                        .0
                        .iter()
                        .map(|i| json!({"number": i}))
                        .collect();
                    axum::Json(
                        json!({"results": results, "page": page, "total_pages": total_pages}),
                    )
                    .into_response()
                }
            }),
        )
        .route(
            "/products",
            get({
                let once = once.clone();
                move |Query(q): Params| async move {
                    // Pages from 0: page 0 is the first.
                    let start = num(&q, "page") * PAGE;
                    if let Some(busy) = once.busy(start) {
                        return busy;
                    }
                    let content: Vec<String> =
                        ids(start).0.iter().map(|i| format!("p{i}")).collect();
                    let pages = TOTAL.div_ceil(PAGE);
                    axum::Json(
                        json!({"content": content, "number": start / PAGE, "totalPages": pages}),
                    )
                    .into_response()
                }
            }),
        )
        .route(
            "/articles",
            get({
                let once = once.clone();
                move |Query(q): Params| async move {
                    let start = (num(&q, "p").max(1) - 1) * PAGE;
                    if let Some(busy) = once.busy(start) {
                        return busy;
                    }
                    let (page, more) = ids(start);
                    let articles: Vec<String> = page.iter().map(|i| format!("a{i}")).collect();
                    axum::Json(json!({"articles": articles, "more": more})).into_response()
                }
            }),
        )
}

async fn serve() -> (String, Arc<AtomicUsize>) {
    let once = Once::default();
    let streamed = Arc::new(AtomicUsize::new(0));
    let app = counted(&once)
        .route(
            "/customers",
            get({
                let once = once.clone();
                move |Query(q): Params| async move {
                    let start = q
                        .get("starting_after")
                        .and_then(|id| id.strip_prefix("cus_"))
                        .and_then(|n| n.parse::<usize>().ok())
                        .map_or(0, |n| n + 1);
                    if let Some(busy) = once.busy(start) {
                        return busy;
                    }
                    let (page, more) = ids(start);
                    let data: Vec<Value> = page
                        .iter()
                        .map(|i| json!({"id": format!("cus_{i}"), "email": format!("{i}@example.com")}))
                        .collect();
                    axum::Json(json!({"object": "list", "data": data, "has_more": more}))
                        .into_response()
                }
            }),
        )
        .route(
            "/events",
            get({
                let once = once.clone();
                move |Query(q): Params| async move {
                    let start = num(&q, "cursor");
                    if let Some(busy) = once.busy(start) {
                        return busy;
                    }
                    let (page, more) = ids(start);
                    let items: Vec<Value> = page
                        .iter()
                        .map(|i| json!({"id": format!("ev_{i}"), "kind": "created"}))
                        .collect();
                    let next = more.then(|| (start + PAGE).to_string());
                    axum::Json(json!({"items": items, "next_cursor": next})).into_response()
                }
            }),
        )
        .route(
            "/repos",
            get({
                let once = once.clone();
                move |Query(q): Params, headers: HeaderMap| async move {
                    let page = num(&q, "page").max(1);
                    let start = (page - 1) * PAGE;
                    if let Some(busy) = once.busy(start) {
                        return busy;
                    }
                    let (page_ids, more) = ids(start);
                    let repos: Vec<Value> = page_ids
                        .iter()
                        .map(|i| json!({"id": i, "name": format!("repo-{i}")}))
                        .collect();
                    let mut response = axum::Json(repos).into_response();
                    if more {
                        let host = headers[header::HOST].to_str().unwrap_or_default();
                        let link = format!(
                            "<http://{host}/repos?page={}&per_page=3>; rel=\"next\"",
                            page + 1
                        );
                        response
                            .headers_mut()
                            .insert(header::LINK, link.parse().unwrap());
                    }
                    response
                }
            }),
        )
        .route(
            "/instances",
            get({
                let once = once.clone();
                move |Query(q): Params| async move {
                    let start = q
                        .get("page_token")
                        .and_then(|t| t.strip_prefix("after-"))
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    if let Some(busy) = once.busy(start) {
                        return busy;
                    }
                    let (page, more) = ids(start);
                    let items: Vec<Value> = page
                        .iter()
                        .map(|i| json!({"id": format!("in-{i}"), "name": format!("vm{i}")}))
                        .collect();
                    let next = more.then(|| format!("after-{}", start + PAGE));
                    axum::Json(json!({"items": items, "next_page": next})).into_response()
                }
            }),
        )
        .route(
            "/chat/completions",
            post({
                let streamed = Arc::clone(&streamed);
                move || async move {
                    streamed.fetch_add(1, Ordering::SeqCst);
                    let wire = ": warming up\r\ndata: {\"delta\": \"Hel\"}\r\n\r\n\
                                data: {\"delta\":\ndata: \"lo\"}\n\ndata: [DONE]\n\n";
                    let pieces: Vec<Result<bytes::Bytes, std::io::Error>> = wire
                        .as_bytes()
                        .chunks(5)
                        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
                        .collect();
                    (
                        [(header::CONTENT_TYPE, "text/event-stream")],
                        Body::from_stream(futures_util::stream::iter(pieces)),
                    )
                }
            }),
        )
        .route(
            "/files/{file_id}/content",
            get(|| async {
                let chunk = bytes::Bytes::from(vec![1u8; 1 << 16]);
                let body = futures_util::stream::iter(
                    (0..256).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
                );
                (
                    [(header::CONTENT_TYPE, "application/octet-stream")],
                    Body::from_stream(body),
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, streamed)
}

#[tokio::test]
async fn every_list_pages_itself_once_through_a_503() {
    let (base, _) = serve().await;
    let client = Client::new(&base).unwrap();

    let customers: Vec<String> = client
        .customers()
        .list(&ListCustomersParams::default())
        .paginate()
        .map(|c| c.unwrap().id)
        .collect()
        .await;
    let want: Vec<String> = (0..TOTAL).map(|i| format!("cus_{i}")).collect();
    assert_eq!(customers, want);

    let events: Vec<String> = client
        .events()
        .list(&ListEventsParams::default())
        .paginate()
        .map(|e| e.unwrap().id)
        .collect()
        .await;
    assert_eq!(
        events,
        (0..TOTAL).map(|i| format!("ev_{i}")).collect::<Vec<_>>()
    );

    let repos: Vec<i64> = client
        .repos()
        .list(&ListReposParams::default())
        .paginate()
        .map(|r| r.unwrap().id)
        .collect()
        .await;
    assert_eq!(repos, (0..TOTAL as i64).collect::<Vec<_>>());

    let instances: Vec<String> = client
        .instances()
        .list(&InstanceListParams::default())
        .paginate()
        .map(|i| i.unwrap().name)
        .collect()
        .await;
    assert_eq!(
        instances,
        (0..TOTAL).map(|i| format!("vm{i}")).collect::<Vec<_>>()
    );

    // Page numbers: the count in the body ends the walk (3 pages of 8
    // invoices), and no fourth page is asked for.
    let invoices: Vec<i64> = client
        .invoices()
        .list(&ListInvoicesParams::default())
        .paginate()
        .map(|i| i.unwrap().number)
        .collect()
        .await;
    assert_eq!(invoices, (0..TOTAL as i64).collect::<Vec<_>>());
    // Pages from 0 (the parameter's `minimum: 0`): none is skipped.
    let products: Vec<String> = client
        .products()
        .list(&ListProductsParams::default())
        .paginate()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(
        products,
        (0..TOTAL).map(|i| format!("p{i}")).collect::<Vec<_>>()
    );
    let articles: Vec<String> = client
        .articles()
        .list(&ListArticlesParams::default())
        .paginate()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(
        articles,
        (0..TOTAL).map(|i| format!("a{i}")).collect::<Vec<_>>()
    );

    let params = ListLogsParams {
        take: Some(PAGE as i64),
        ..ListLogsParams::default()
    };
    let pages: Vec<_> = client
        .logs()
        .list(&params)
        .pages()
        .map(Result::unwrap)
        .collect()
        .await;
    let lines: Vec<String> = pages
        .into_iter()
        .flat_map(|p| p.lines.unwrap_or_default())
        .collect();
    assert_eq!(
        lines,
        (0..TOTAL).map(|i| format!("line {i}")).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_completion_streams_typed_events_and_a_file_downloads_in_chunks() {
    let (base, streamed) = serve().await;
    let client = Client::new(&base).unwrap();
    let body = CreateChatCompletionRequest {
        prompt: "Say hello".into(),
        stream: Some(true),
    };
    let deltas: Vec<String> = client
        .chat()
        .create_completion(&body)
        .stream()
        .await
        .unwrap()
        .map(|chunk| chunk.unwrap().delta)
        .collect()
        .await;
    assert_eq!(deltas, ["Hel", "lo"]);
    assert_eq!(streamed.load(Ordering::SeqCst), 1);

    let mut file = client
        .files()
        .download("report")
        .send_streaming()
        .await
        .unwrap();
    let mut total = 0;
    while let Some(chunk) = file.chunk().await.unwrap() {
        total += chunk.len();
    }
    assert_eq!(total, 256 << 16);
}
