//! One attempt: run it under its timeout, then reduce what happened to an
//! [`Observation`] the classifier understands.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use reqwest::{Response, ResponseBuilderExt};

use super::class::Operation;
use super::classify::{Observation, retry_hint};
use super::clock::Clock;
use super::error::AttemptError;

/// What an attempt produced.
pub(super) enum Got {
    Response(Response),
    Failed(AttemptError),
}

/// How one attempt is read.
pub(super) struct Read {
    /// The attempt's timeout, already cut to fit the deadline.
    pub(super) timeout: Duration,
    /// Whether an idempotency key went out (key conflicts are then read).
    pub(super) key_sent: bool,
    /// Whether the whole body is read inside the timeout.
    pub(super) buffer_body: bool,
}

/// Runs one attempt under its timeout and reduces the result to an
/// observation. `Err` is a request that can never succeed (builder or
/// redirect error).
pub(super) async fn run<Fut>(
    clock: &dyn Clock,
    future: Fut,
    read: Read,
) -> Result<(Observation, Got), reqwest::Error>
where
    Fut: Future<Output = Result<Response, reqwest::Error>>,
{
    let Read {
        timeout,
        key_sent,
        buffer_body,
    } = read;
    let started = clock.now();
    let result = tokio::select! {
        biased;
        result = future => Some(result),
        () = clock.sleep(timeout) => None,
    };
    let response = match result {
        None => {
            return Ok((
                Observation::TimedOut,
                Got::Failed(AttemptError::TimedOut { after: timeout }),
            ));
        }
        Some(Err(error)) if error.is_builder() || error.is_redirect() => return Err(error),
        Some(Err(error)) if error.is_connect() => {
            return Ok((
                Observation::NotSent,
                Got::Failed(AttemptError::Connect { source: error }),
            ));
        }
        Some(Err(error)) => {
            let observation = if error.is_timeout() {
                Observation::TimedOut
            } else {
                Observation::Interrupted
            };
            return Ok((
                observation,
                Got::Failed(AttemptError::Connection { source: error }),
            ));
        }
        Some(Ok(response)) => response,
    };
    let status = response.status();
    let conflict =
        key_sent && (status == StatusCode::CONFLICT || status == StatusCode::UNPROCESSABLE_ENTITY);
    if !conflict && !buffer_body {
        let hint = retry_hint(response.headers());
        return Ok((
            Observation::Status { status, hint },
            Got::Response(response),
        ));
    }
    // The body is read inside what is left of the attempt's timeout: a server
    // that sends its headers and then stalls fails this attempt, it does not
    // hold the call past its deadline. (A key conflict's body is always read:
    // its machine-readable code tells the two conflicts apart.)
    let left = timeout.saturating_sub(clock.now().saturating_duration_since(started));
    let (parts, body) = split(response);
    let body = tokio::select! {
        biased;
        body = body => body,
        () = clock.sleep(left) => {
            return Ok((
                Observation::TimedOut,
                Got::Failed(AttemptError::BodyStalled { status, after: timeout }),
            ));
        }
    };
    let body = match body {
        Ok(body) => body,
        Err(error) => {
            return Ok((
                Observation::Interrupted,
                Got::Failed(AttemptError::Connection { source: error }),
            ));
        }
    };
    let observation = if conflict && contains(&body, b"idempotency_key_in_use") {
        Observation::KeyInUse
    } else if conflict && contains(&body, b"idempotency_key_reused") {
        Observation::KeyReused
    } else {
        Observation::Status {
            status,
            hint: retry_hint(&parts.headers),
        }
    };
    Ok((observation, Got::Response(rebuild(parts, body))))
}

pub(super) fn into_error(got: Got) -> AttemptError {
    match got {
        Got::Failed(error) => error,
        Got::Response(response) => AttemptError::Status {
            status: response.status(),
        },
    }
}

pub(super) fn why_not_resent(operation: &Operation) -> String {
    let mut why = format!(
        "{} is `{}`: it takes no idempotency key, so the request may already have taken effect and \
         sending it again could repeat that effect; check the outcome before trying again",
        operation.name, operation.class
    );
    if let Some(warning) = operation.warning {
        why.push_str(" (");
        why.push_str(warning.trim_end_matches('.'));
        why.push(')');
    }
    why
}

/// What a response was, minus its body.
struct Parts {
    status: StatusCode,
    version: http::Version,
    headers: HeaderMap,
    url: reqwest::Url,
}

fn split(response: Response) -> (Parts, impl Future<Output = Result<Bytes, reqwest::Error>>) {
    let parts = Parts {
        status: response.status(),
        version: response.version(),
        headers: response.headers().clone(),
        url: response.url().clone(),
    };
    (parts, response.bytes())
}

fn rebuild(parts: Parts, body: Bytes) -> Response {
    let mut builder = http::Response::builder()
        .status(parts.status)
        .version(parts.version)
        .url(parts.url);
    if let Some(headers) = builder.headers_mut() {
        *headers = parts.headers;
    }
    match builder.body(body.clone()) {
        Ok(response) => Response::from(response),
        // Status and version came from a parsed response; this cannot fail,
        // and if it did the body still reaches the caller.
        Err(_) => Response::from(http::Response::new(body)),
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
