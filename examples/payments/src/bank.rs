//! A bank on loopback, for the scenarios and the tests: it takes transfers
//! and notifications with an idempotency key, logs every call, and can be
//! told to refuse transfers or to be down.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use idem_runtime::axum::{self, http::HeaderMap, http::StatusCode, routing::post};

/// How the bank answers a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `200` with a reference.
    Accept,
    /// `402`: the payout is refused, a final answer.
    Refuse,
    /// `503`: the bank is down, try later.
    Down,
}

/// One call the bank received.
#[derive(Debug, Clone)]
pub struct Call {
    /// `transfers` or `notifications`.
    pub endpoint: &'static str,
    /// The idempotency key it carried.
    pub key: String,
    /// When it arrived.
    pub at: Instant,
    /// Whether it was answered with a success.
    pub accepted: bool,
}

type Hook = Box<dyn Fn() + Send + Sync>;

struct State {
    transfers: Answer,
    /// How long a transfer takes to be answered.
    delay: Duration,
    calls: Vec<Call>,
    /// Runs once, on the first notification (a test kills the server there).
    on_first_notification: Option<Hook>,
}

/// The bank, serving until the runtime it was started on ends.
#[derive(Clone)]
pub struct Bank {
    state: Arc<Mutex<State>>,
    url: String,
}

impl std::fmt::Debug for Bank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bank").field("url", &self.url).finish()
    }
}

impl Bank {
    /// Starts the bank on an ephemeral loopback port, accepting transfers.
    pub async fn start() -> anyhow::Result<Bank> {
        let state = Arc::new(Mutex::new(State {
            transfers: Answer::Accept,
            delay: Duration::ZERO,
            calls: Vec::new(),
            on_first_notification: None,
        }));
        let on_transfer = {
            let state = Arc::clone(&state);
            move |headers: HeaderMap| {
                let state = Arc::clone(&state);
                async move {
                    let key = key_of(&headers);
                    let (answer, delay) = {
                        let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
                        let answer = s.transfers;
                        s.calls.push(Call {
                            endpoint: "transfers",
                            key: key.clone(),
                            at: Instant::now(),
                            accepted: answer == Answer::Accept,
                        });
                        (answer, s.delay)
                    };
                    tokio::time::sleep(delay).await;
                    match answer {
                        Answer::Accept => (StatusCode::OK, format!("ref-{}", prefix(&key))),
                        Answer::Refuse => (
                            StatusCode::PAYMENT_REQUIRED,
                            "insufficient funds in the payout account".to_owned(),
                        ),
                        Answer::Down => (StatusCode::SERVICE_UNAVAILABLE, "down".to_owned()),
                    }
                }
            }
        };
        let on_notification = {
            let state = Arc::clone(&state);
            move |headers: HeaderMap| {
                let state = Arc::clone(&state);
                async move {
                    let hook = {
                        let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
                        s.calls.push(Call {
                            endpoint: "notifications",
                            key: key_of(&headers),
                            at: Instant::now(),
                            accepted: true,
                        });
                        s.on_first_notification.take()
                    };
                    if let Some(hook) = hook {
                        hook();
                    }
                    "notified"
                }
            }
        };
        let app = axum::Router::new()
            .route("/transfers", post(on_transfer))
            .route("/notifications", post(on_notification));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Bank { state, url })
    }

    /// Where the bank listens.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How transfers are answered from now on.
    pub fn answer_transfers(&self, answer: Answer) {
        self.lock().transfers = answer;
    }

    /// Every transfer is answered `delay` after it arrives.
    pub fn answer_after(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    /// Runs `hook` once, when the first notification arrives.
    pub fn on_first_notification(&self, hook: impl Fn() + Send + Sync + 'static) {
        self.lock().on_first_notification = Some(Box::new(hook));
    }

    /// Every call so far, in arrival order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The calls to one endpoint.
    pub fn calls_to(&self, endpoint: &str) -> Vec<Call> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.endpoint == endpoint)
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn key_of(headers: &HeaderMap) -> String {
    headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn prefix(key: &str) -> &str {
    key.get(..8).unwrap_or(key)
}
