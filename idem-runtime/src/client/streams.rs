//! Calls answered more than once: lists that page themselves, server-sent
//! event streams, and bodies read as they arrive.
//!
//! A generated method marks what its operation can do: `.paged(&SPEC)` for
//! a list the generator recognised (Stripe's `has_more`, a cursor in the
//! body, RFC 8288 `Link` headers, dropshot's `next_page`, offset and
//! limit), `.events()` for a `text/event-stream` answer. The marker is a
//! type parameter of [`Call`], so `.paginate()` exists only on a paged
//! call and `.stream()` only on one that streams.
//!
//! Each page request is one logical call through the retry engine, with
//! its policy, budget, attempt timeout and deadline. An error ends the
//! stream with the [`Resume`] point of the page that failed: pass it to
//! [`Call::resume`] and the listing continues there, not from page one.
//!
//! An event stream is retried as its class allows until its first event (a
//! keyed call with its one key; a body that breaks before any event is a
//! failed attempt). After that nothing is ever sent again on its own for an
//! unsafe or keyed call: a broken stream ends with [`EventError::Broken`], which
//! says how many events arrived and carries the key and the last event id.
//! A safe call whose events carry ids reconnects with `Last-Event-ID`,
//! waiting what the server's `retry:` asked, within the call's deadline.

#![allow(
    clippy::result_large_err,
    reason = "the errors are the `ApiError` every generated call returns, built on the error path only"
)]

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::Stream;
use futures_util::stream::{self, StreamExt as _};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::sse::{Decoder as SseDecoder, Limits, SseError};
use super::support::{ApiError, Call, Raw, Ready, Single, read_raw};
use super::{IdempotencyKey, RetryClass};

/// How a list operation pages, as the generator recognised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSpec {
    /// Where a page's items are: a JSON pointer into the body (`/data`);
    /// empty when the body is the array itself.
    pub items: &'static str,
    /// How the next page is found.
    pub next: NextPage,
}

/// How the request for the next page is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextPage {
    /// Stripe's list object: while the flag at `more` is true, the next
    /// page starts after the last item's `id` field, sent as `param`.
    AfterLastItem {
        more: &'static str,
        id: &'static str,
        param: &'static str,
    },
    /// A cursor in the body at `pointer` (`/next_cursor`,
    /// `/next_page_token`, dropshot's `/next_page`), sent as `param`; the
    /// last page has none (absent, null or empty).
    Cursor {
        pointer: &'static str,
        param: &'static str,
    },
    /// RFC 8288: the `Link` header's `rel="next"` URL, followed as given.
    Link,
    /// `param` is an offset into the whole list, advanced by each page's
    /// item count; an empty page (or one shorter than the `limit` sent) is
    /// the last.
    Offset {
        param: &'static str,
        limit: Option<&'static str>,
    },
    /// `param` numbers the pages from `first` (0 or 1; absent from the
    /// request: the first); the next page is the one after. The body at
    /// `last` says when to stop: a page count (`/total_pages`,
    /// `/last_page` where pages count from 1) that has been reached, or a
    /// flag that is false (`/has_next`). An empty page is the last either
    /// way.
    PageNumber {
        param: &'static str,
        first: u64,
        last: Option<&'static str>,
    },
}

/// Where a listing continues: the first page, a query parameter's value,
/// or a URL the server gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// The request as built.
    Start,
    /// The request with `param` set to `value`.
    Query { param: &'static str, value: String },
    /// This URL, as the server gave it (a `Link` header).
    Url(String),
}

/// A page request that failed, and where to continue.
#[derive(Debug)]
pub struct PageError<E> {
    /// Why the page could not be read.
    pub error: ApiError<E>,
    /// The page that failed: [`Call::resume`] with it fetches it again.
    pub resume: Resume,
}

impl<E: fmt::Debug> fmt::Display for PageError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a page could not be read ({:?}): {}",
            self.resume, self.error
        )
    }
}

impl<E: fmt::Debug> std::error::Error for PageError<E> {}

/// The mode of a paged call: its items are `I`.
#[derive(Debug)]
pub struct Paged<I> {
    spec: &'static PageSpec,
    from: Resume,
    _item: std::marker::PhantomData<fn() -> I>,
}

/// The mode of a call answered with server-sent events of type `I`.
#[derive(Debug)]
pub struct Events<I> {
    done: Option<&'static str>,
    limits: Limits,
    _item: std::marker::PhantomData<fn() -> I>,
}

impl<'a, T, E, B: ?Sized> Call<'a, T, E, B, Single> {
    /// Marks a list operation that pages as `spec` says, with items of `I`.
    pub fn paged<I>(self, spec: &'static PageSpec) -> Call<'a, T, E, B, Paged<I>> {
        self.with_mode(Paged {
            spec,
            from: Resume::Start,
            _item: std::marker::PhantomData,
        })
    }

    /// Marks an operation that answers with server-sent events of `I`.
    /// `data: [DONE]` ends the stream (OpenAI's sentinel) unless
    /// [`Call::until`] says otherwise.
    pub fn events<I>(self) -> Call<'a, T, E, B, Events<I>> {
        self.with_mode(Events {
            done: Some("[DONE]"),
            limits: Limits::default(),
            _item: std::marker::PhantomData,
        })
    }
}

/// The items of a paged list, as [`Call::paginate`] yields them: boxed, so
/// `.next().await` works on it as is.
pub type Items<'a, I, E> = futures_util::stream::BoxStream<'a, Result<I, PageError<E>>>;

/// The pages of a paged list, as [`Call::pages`] yields them.
pub type Pages<'a, T, E> = futures_util::stream::BoxStream<'a, Result<T, PageError<E>>>;

impl<'a, T, E, B: ?Sized, I> Call<'a, T, E, B, Paged<I>>
where
    T: Send + 'a,
    E: Send + 'a,
    I: DeserializeOwned + Send + 'a,
{
    /// Continues a listing where an error stopped it.
    pub fn resume(mut self, from: Resume) -> Self {
        self.mode_mut().from = from;
        self
    }

    /// Every item of every page, in order, each page fetched when the one
    /// before is used up.
    pub fn paginate(self) -> Items<'a, I, E> {
        self.pages_raw()
            .flat_map(|page| match page {
                Ok((_, items)) => stream::iter(items.into_iter().map(Ok).collect::<Vec<_>>()),
                Err(e) => stream::iter(vec![Err(e)]),
            })
            .boxed()
    }

    /// Every page, typed as the operation's answer.
    pub fn pages(self) -> Pages<'a, T, E> {
        self.pages_raw()
            .map(|page| page.map(|(page, _)| page))
            .boxed()
    }

    fn pages_raw(self) -> impl Stream<Item = Result<(T, Vec<I>), PageError<E>>> + Send + 'a {
        let (spec, from) = (self.mode().spec, self.mode().from.clone());
        let ready = self.ready();
        let state = Pager {
            ready,
            spec,
            next: Some(from),
        };
        stream::unfold(state, |mut state| async move {
            let at = state.next.take()?;
            let ready = match &mut state.ready {
                Ok(ready) => ready,
                Err(_) => {
                    let Err(error) =
                        std::mem::replace(&mut state.ready, Err(ApiError::Encode(String::new())))
                    else {
                        return None;
                    };
                    return Some((Err(PageError { error, resume: at }), state));
                }
            };
            match fetch(ready, state.spec, &at).await {
                Ok((page, items, next)) => {
                    // A cursor that does not move would list forever.
                    state.next = next.filter(|n| *n != at);
                    Some((Ok((page, items)), state))
                }
                Err(error) => Some((Err(PageError { error, resume: at }), state)),
            }
        })
    }
}

struct Pager<'a, T, E> {
    ready: Result<Ready<'a, T, E>, ApiError<E>>,
    spec: &'static PageSpec,
    /// The page to fetch next; `None` once the last was read or one failed.
    next: Option<Resume>,
}

/// Fetches the page at `at`: the typed page, its items, and the next.
async fn fetch<T, E, I: DeserializeOwned>(
    ready: &mut Ready<'_, T, E>,
    spec: &PageSpec,
    at: &Resume,
) -> Result<(T, Vec<I>, Option<Resume>), ApiError<E>> {
    ready.url = locate(&ready.url, at)?;
    let response = ready.execute(false).await?;
    let raw = read_raw(response).await;
    let page = ready.decode_raw(&raw)?;
    let body: Value = serde_json::from_slice(&raw.body)
        .map_err(|e| undecodable(&raw, &e).with_call(ready.facts()))?;
    let listed = if spec.items.is_empty() {
        Some(&body)
    } else {
        body.pointer(spec.items)
    };
    let listed = match listed {
        Some(Value::Array(items)) => items.as_slice(),
        Some(Value::Null) | None => &[],
        Some(_) => {
            return Err(
                undecodable(&raw, &format!("`{}` is not a list", spec.items))
                    .with_call(ready.facts()),
            );
        }
    };
    // Typed whole before any is handed out: a page that fails is fetched
    // again on resume, and none of its items is seen twice.
    let items = listed
        .iter()
        .map(|item| {
            serde_json::from_value(item.clone())
                .map_err(|e| undecodable(&raw, &e).with_call(ready.facts()))
        })
        .collect::<Result<Vec<I>, _>>()?;
    let next = next_page(spec.next, &body, &raw, listed, &ready.url);
    Ok((page, items, next))
}

fn undecodable<E>(raw: &Raw, why: &dyn fmt::Display) -> ApiError<E> {
    ApiError::Decode {
        status: raw.status,
        message: format!("the page cannot be listed: {why}"),
        body: raw.body.clone(),
        call: Default::default(),
    }
}

/// The URL of the page at `at`, from the current one.
fn locate<E>(current: &reqwest::Url, at: &Resume) -> Result<reqwest::Url, ApiError<E>> {
    match at {
        Resume::Start => Ok(current.clone()),
        Resume::Query { param, value } => {
            let mut url = current.clone();
            let kept: Vec<(String, String)> = url
                .query_pairs()
                .filter(|(k, _)| k != param)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            url.query_pairs_mut()
                .clear()
                .extend_pairs(kept)
                .append_pair(param, value);
            Ok(url)
        }
        Resume::Url(next) => current
            .join(next)
            .map_err(|e| ApiError::Encode(format!("the next page's URL {next:?}: {e}"))),
    }
}

fn next_page(
    next: NextPage,
    body: &Value,
    raw: &Raw,
    items: &[Value],
    url: &reqwest::Url,
) -> Option<Resume> {
    let text = |v: &Value| match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    match next {
        NextPage::AfterLastItem { more, id, param } => {
            if body.pointer(more) != Some(&Value::Bool(true)) {
                return None;
            }
            let value = items.last()?.get(id).and_then(text)?;
            Some(Resume::Query { param, value })
        }
        NextPage::Cursor { pointer, param } => {
            let value = body.pointer(pointer).and_then(text)?;
            Some(Resume::Query { param, value })
        }
        NextPage::Link => raw
            .headers
            .get_all(http::header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(link_next)
            .map(Resume::Url),
        NextPage::Offset { param, limit } => {
            if items.is_empty() {
                return None;
            }
            let query = |name: &str| {
                url.query_pairs()
                    .find(|(k, _)| k == name)
                    .and_then(|(_, v)| v.parse::<usize>().ok())
            };
            if let Some(limit) = limit.and_then(query)
                && items.len() < limit
            {
                return None;
            }
            let offset = query(param).unwrap_or(0) + items.len();
            Some(Resume::Query {
                param,
                value: offset.to_string(),
            })
        }
        NextPage::PageNumber { param, first, last } => {
            if items.is_empty() {
                return None;
            }
            let page = url
                .query_pairs()
                .find(|(k, _)| k == param)
                .and_then(|(_, v)| v.parse::<u64>().ok())
                .unwrap_or(first);
            // Pages read so far, this one included.
            let read = (page + 1).saturating_sub(first);
            let done = match last.and_then(|at| body.pointer(at)) {
                Some(Value::Bool(more)) => !more,
                Some(Value::Number(pages)) => pages.as_u64().is_some_and(|n| read >= n),
                _ => false,
            };
            (!done).then(|| Resume::Query {
                param,
                value: (page + 1).to_string(),
            })
        }
    }
}

/// The `rel="next"` target of one `Link` header value (RFC 8288), which
/// may list several links.
fn link_next(header: &str) -> Option<String> {
    let mut rest = header;
    loop {
        let start = rest.find('<')?;
        let end = start + rest[start..].find('>')?;
        let target = &rest[start + 1..end];
        let after = &rest[end + 1..];
        let params_end = after.find('<').unwrap_or(after.len());
        let params = &after[..params_end];
        let is_next = params.split(';').any(|p| {
            let p = p.trim().trim_end_matches(',').trim_end();
            p.strip_prefix("rel=").is_some_and(|v| {
                v.trim_matches('"')
                    .split_ascii_whitespace()
                    .any(|r| r.eq_ignore_ascii_case("next"))
            })
        });
        if is_next {
            return Some(target.to_owned());
        }
        rest = &after[params_end..];
    }
}

/// Why an event stream ended early.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The connection broke after the stream began. Nothing was sent again:
    /// the events received so far are all there is of this call.
    #[error(
        "the event stream broke after {received} event(s){}: {message}",
        last_event_id.as_deref().map(|id| format!(" (last id {id:?})")).unwrap_or_default()
    )]
    Broken {
        /// Events delivered before the break.
        received: usize,
        /// The last `id:` the server sent.
        last_event_id: Option<String>,
        /// The key the call was sent with, to reconcile by.
        key: Option<IdempotencyKey>,
        /// What the transport said.
        message: String,
    },
    /// A line or an event broke the decoder's bounds.
    #[error("{0}")]
    TooLarge(#[from] SseError),
    /// An event's data is not the declared type.
    #[error("event {received} does not match the API's schema: {message}")]
    Decode {
        /// Events delivered before this one.
        received: usize,
        /// What serde said.
        message: String,
        /// The event's data.
        data: String,
    },
}

/// The events of a streamed call, typed. Ends after the server's sentinel
/// (`data: [DONE]`), at the end of the body, or with an error.
pub struct EventStream<I> {
    inner: Pin<Box<dyn Stream<Item = Result<I, EventError>> + Send>>,
}

impl<I> fmt::Debug for EventStream<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

impl<I> Stream for EventStream<I> {
    type Item = Result<I, EventError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl<'a, T, E, B: ?Sized, I> Call<'a, T, E, B, Events<I>>
where
    T: Send + 'static,
    E: Send + 'static,
    I: DeserializeOwned + Send + 'static,
{
    /// Ends the stream at `data: <sentinel>`, or only at the end of the
    /// body with `None`.
    pub fn until(mut self, sentinel: Option<&'static str>) -> Self {
        self.mode_mut().done = sentinel;
        self
    }

    /// Bounds what one line and one event may hold.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.mode_mut().limits = limits;
        self
    }

    /// Sends the call and returns its events as they arrive. Until the
    /// first event, the call is retried as its class allows (a keyed call
    /// with its one key), a body that breaks before it included; an error
    /// status is typed as `.send()` types it.
    pub async fn stream(self) -> Result<EventStream<I>, ApiError<E>> {
        let (done, limits) = (self.mode().done, self.mode().limits);
        let class = self.spec().operation.class;
        let reconnects = class == RetryClass::Safe;
        let attempts = self.client().retry_client().policy().attempts();
        let deadline = Instant::now() + self.client().retry_client().policy().overall_deadline();
        let ready = self.ready()?;
        let response = ready.execute(true).await?;
        let response = opened(&ready, response).await?;
        let key = ready.key.clone();
        let again = reconnects.then(|| Reconnect {
            http: ready.http(),
            url: ready.url.clone(),
            headers: ready.headers.clone(),
            deadline,
        });
        // Before its first event a stream may be sent again, as the class
        // allows: a safe call, or a keyed one with its key.
        let resend = class.may_resend().then(|| Resend {
            ready: ready.detach(),
            left: attempts.saturating_sub(1),
            deadline,
        });
        let state = Reading {
            response: Some(response),
            resend,
            limits,
            decoder: SseDecoder::new(limits),
            queue: VecDeque::new(),
            received: 0,
            done,
            key,
            again,
            retry: Duration::from_secs(1),
            finished: false,
            _item: std::marker::PhantomData,
        };
        Ok(EventStream {
            inner: Box::pin(stream::unfold(state, |mut state| async move {
                let item = state.next().await?;
                Some((item, state))
            })),
        })
    }
}

/// Checks the head of a streamed answer: a success is returned to read; an
/// error status is read whole and typed.
async fn opened<T, E>(
    ready: &Ready<'_, T, E>,
    response: reqwest::Response,
) -> Result<reqwest::Response, ApiError<E>> {
    if response.status().is_success() {
        return Ok(response);
    }
    let raw = read_raw(response).await;
    match ready.decode_raw(&raw) {
        Err(e) => Err(e),
        Ok(_) => Err(ApiError::UnexpectedStatus {
            status: raw.status,
            headers: raw.headers,
            body: raw.body,
            call: ready.facts(),
        }),
    }
}

/// The call itself, to send again when its body breaks before the first
/// event.
struct Resend<T, E> {
    ready: Ready<'static, T, E>,
    /// Sends left.
    left: u32,
    deadline: Instant,
}

/// What a safe stream needs to reconnect.
struct Reconnect {
    http: reqwest::Client,
    url: reqwest::Url,
    headers: http::HeaderMap,
    deadline: Instant,
}

struct Reading<I, T, E> {
    response: Option<reqwest::Response>,
    resend: Option<Resend<T, E>>,
    limits: Limits,
    decoder: SseDecoder,
    queue: VecDeque<super::sse::Event>,
    received: usize,
    done: Option<&'static str>,
    key: Option<IdempotencyKey>,
    again: Option<Reconnect>,
    /// The server's reconnection delay (`retry:`).
    retry: Duration,
    finished: bool,
    _item: std::marker::PhantomData<fn() -> I>,
}

impl<I: DeserializeOwned, T, E> Reading<I, T, E> {
    async fn next(&mut self) -> Option<Result<I, EventError>> {
        loop {
            if self.finished {
                return None;
            }
            if let Some(event) = self.queue.pop_front() {
                if let Some(retry) = event.retry {
                    self.retry = retry;
                }
                if self.done.is_some_and(|d| d == event.data) {
                    self.finished = true;
                    return None;
                }
                let typed = serde_json::from_str(&event.data).map_err(|e| EventError::Decode {
                    received: self.received,
                    message: e.to_string(),
                    data: event.data.clone(),
                });
                self.received += 1;
                if typed.is_err() {
                    self.finished = true;
                }
                return Some(typed);
            }
            let response = self.response.as_mut()?;
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let mut out = Vec::new();
                    if let Err(e) = self.decoder.feed(&chunk, &mut out) {
                        self.finished = true;
                        return Some(Err(e.into()));
                    }
                    self.queue.extend(out);
                }
                Ok(None) => {
                    self.decoder.finish();
                    self.finished = true;
                    return None;
                }
                Err(e) => {
                    if self.send_again().await || self.reconnect().await {
                        continue;
                    }
                    self.finished = true;
                    return Some(Err(EventError::Broken {
                        received: self.received,
                        last_event_id: self.decoder.last_event_id().map(str::to_owned),
                        key: self.key.clone(),
                        message: e.to_string(),
                    }));
                }
            }
        }
    }

    /// Before the first event, a broken body is a failed attempt: the call
    /// is sent again (its key unchanged) while its attempts and deadline
    /// allow.
    async fn send_again(&mut self) -> bool {
        if self.received > 0 || !self.queue.is_empty() {
            return false;
        }
        let Some(resend) = &mut self.resend else {
            return false;
        };
        if resend.left == 0 || Instant::now() >= resend.deadline {
            return false;
        }
        resend.left -= 1;
        let Ok(response) = resend.ready.execute(true).await else {
            return false;
        };
        match opened(&resend.ready, response).await {
            Ok(response) => {
                self.response = Some(response);
                self.decoder = SseDecoder::new(self.limits);
                true
            }
            Err(_) => false,
        }
    }

    /// A safe stream with an event id reconnects with `Last-Event-ID`,
    /// after the server's `retry:` delay, inside the deadline.
    async fn reconnect(&mut self) -> bool {
        let (Some(again), Some(id)) = (&self.again, self.decoder.last_event_id()) else {
            return false;
        };
        if Instant::now() + self.retry >= again.deadline {
            return false;
        }
        tokio::time::sleep(self.retry).await;
        let Ok(value) = http::HeaderValue::from_str(id) else {
            return false;
        };
        let left = again.deadline.saturating_duration_since(Instant::now());
        let sent = again
            .http
            .get(again.url.clone())
            .headers(again.headers.clone())
            .header("last-event-id", value)
            .header(http::header::ACCEPT, "text/event-stream")
            .timeout(left)
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                self.response = Some(response);
                true
            }
            _ => false,
        }
    }
}

/// A body read as it arrives, chunk by chunk, never whole.
#[derive(Debug)]
pub struct ByteStream {
    response: reqwest::Response,
}

impl ByteStream {
    /// The answer's status.
    pub fn status(&self) -> http::StatusCode {
        self.response.status()
    }

    /// The answer's headers (`Content-Length`, `Content-Type`).
    pub fn headers(&self) -> &http::HeaderMap {
        self.response.headers()
    }

    /// The next chunk, or `None` at the end of the body.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, reqwest::Error> {
        self.response.chunk().await
    }

    /// The chunks as a stream.
    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, reqwest::Error>> {
        stream::unfold(self, |mut body| async move {
            match body.chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), body)),
                Ok(None) => None,
                Err(e) => Some((Err(e), body)),
            }
        })
    }
}

impl<'a, T, E, B: ?Sized, M> Call<'a, T, E, B, M> {
    /// Sends the call and hands back a successful answer's body unread,
    /// to be read chunk by chunk (a 2 GB download never sits in memory).
    /// The call is retried as its class allows until the head arrives;
    /// an error status is read and typed as `.send()` types it.
    pub async fn send_streaming(self) -> Result<ByteStream, ApiError<E>> {
        let ready = self.ready()?;
        let response = ready.execute(true).await?;
        let response = opened(&ready, response).await?;
        Ok(ByteStream { response })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers_name_their_next_page() {
        let github = "<https://api.github.com/repositories/1/issues?page=2>; rel=\"next\", \
                      <https://api.github.com/repositories/1/issues?page=9>; rel=\"last\"";
        assert_eq!(
            link_next(github).as_deref(),
            Some("https://api.github.com/repositories/1/issues?page=2")
        );
        assert_eq!(
            link_next("</p?page=1>; rel=\"prev first\", </p?page=3>; title=\"x\"; rel=next")
                .as_deref(),
            Some("/p?page=3")
        );
        assert_eq!(link_next("</p?page=1>; rel=\"prev\""), None);
        assert_eq!(link_next("garbage"), None);
    }
}
