//! The retry loop: one logical call, many attempts, one key, one deadline.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, StatusCode};
use reqwest::{RequestBuilder, Response};

use super::attempt::{self, Got, into_error, why_not_resent};

use super::breaker::{CircuitBreaker, CircuitState, Permit};
use super::budget::{RetryBudget, RetryCost};
use super::class::Operation;
use super::classify::{Observation, Verdict, classify, is_breaker_failure, retry_after};
use super::clock::{Clock, RandomSource, ThreadRandom, TokioClock};
use super::error::{AttemptError, GiveUp, RetryError, chain};
use super::key::IdempotencyKey;
use super::observe;
use super::policy::RetryPolicy;

/// A reqwest client with bounded, key-aware retries.
///
/// Cheap to clone; clones share the retry budget, the circuit breakers, the
/// counters, the clock and the random source. Build one per downstream
/// service and pass clones around.
///
/// ```no_run
/// use idem_runtime::client::{Operation, RetryClass, RetryClient};
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// const CREATE_ORDER: Operation = Operation::new("createOrder", RetryClass::Keyed);
/// let client = RetryClient::new(reqwest::Client::new());
/// let response = client
///     .send(&CREATE_ORDER, |http| http.post("https://api.example.com/orders").body("{}"))
///     .await?;
/// # let _ = response; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RetryClient {
    http: reqwest::Client,
    policy: Arc<RetryPolicy>,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    budget: RetryBudget,
    breaker: Option<CircuitBreaker>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn RandomSource>,
    counters: Counters,
}

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    budget_rejections: AtomicU64,
    breaker_rejections: AtomicU64,
    outcome_unknown: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
}

/// A snapshot of a client's counters (shared by all its clones).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryMetrics {
    /// Logical calls started.
    pub calls: u64,
    /// Attempts made, first attempts included (breaker refusals included).
    pub attempts: u64,
    /// Retries made (attempts after the first).
    pub retries: u64,
    /// Retries refused because the budget was empty.
    pub budget_rejections: u64,
    /// Attempts refused locally by an open circuit breaker.
    pub breaker_rejections: u64,
    /// Calls that ended with "outcome unknown".
    pub outcome_unknown: u64,
    /// Calls that returned a response.
    pub succeeded: u64,
    /// Calls that returned an error.
    pub failed: u64,
    /// Tokens left in the retry budget (`None`: unlimited).
    pub budget_available: Option<u32>,
    /// Every host's breaker state (empty without a breaker).
    pub breakers: Vec<(String, CircuitState)>,
}

/// Builds a [`RetryClient`] with a non-default policy, budget, breaker,
/// clock or random source.
#[derive(Debug)]
pub struct RetryClientBuilder {
    http: reqwest::Client,
    policy: RetryPolicy,
    budget: RetryBudget,
    breaker: Option<CircuitBreaker>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn RandomSource>,
}

impl RetryClientBuilder {
    /// The retry policy (default [`RetryPolicy::default`]).
    ///
    /// ```
    /// # use idem_runtime::client::{RetryClient, RetryPolicy};
    /// let client = RetryClient::builder(reqwest::Client::new())
    ///     .policy(RetryPolicy::default().max_attempts(2))
    ///     .build();
    /// assert_eq!(client.policy().attempts(), 2);
    /// ```
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The retry budget (default: a fresh bucket of 500). Pass a clone of
    /// another client's budget to share one bucket between them.
    ///
    /// ```
    /// # use idem_runtime::client::{RetryBudget, RetryClient};
    /// let budget = RetryBudget::default();
    /// let a = RetryClient::builder(reqwest::Client::new()).budget(budget.clone()).build();
    /// let b = RetryClient::builder(reqwest::Client::new()).budget(budget).build();
    /// # let _ = (a, b);
    /// ```
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Per-host circuit breakers (default: none).
    ///
    /// ```
    /// # use idem_runtime::client::{BreakerConfig, CircuitBreaker, RetryClient};
    /// let client = RetryClient::builder(reqwest::Client::new())
    ///     .circuit_breaker(CircuitBreaker::new(BreakerConfig::default()))
    ///     .build();
    /// assert!(client.breaker().is_some());
    /// ```
    pub fn circuit_breaker(mut self, breaker: CircuitBreaker) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// The clock (default [`TokioClock`]).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use idem_runtime::client::{RetryClient, TokioClock};
    /// let client = RetryClient::builder(reqwest::Client::new())
    ///     .clock(Arc::new(TokioClock::new()))
    ///     .build();
    /// # let _ = client;
    /// ```
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The random source for jitter (default [`ThreadRandom`]).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use idem_runtime::client::{RetryClient, SeededRandom};
    /// let client = RetryClient::builder(reqwest::Client::new())
    ///     .random(Arc::new(SeededRandom::new(42)))
    ///     .build();
    /// # let _ = client;
    /// ```
    pub fn random(mut self, random: Arc<dyn RandomSource>) -> Self {
        self.random = random;
        self
    }

    /// The client.
    pub fn build(self) -> RetryClient {
        RetryClient {
            http: self.http,
            policy: Arc::new(self.policy),
            shared: Arc::new(Shared {
                budget: self.budget,
                breaker: self.breaker,
                clock: self.clock,
                random: self.random,
                counters: Counters::default(),
            }),
        }
    }
}

/// What one attempt knows about itself; handed to the closure of
/// [`RetryClient::execute_with`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Attempt {
    /// 1 for the first attempt.
    pub number: u32,
    /// The key of this logical call, the same on every attempt.
    pub key: Option<IdempotencyKey>,
    /// Time left before the call's deadline when the attempt starts.
    pub remaining: Duration,
    /// This attempt's timeout (never more than `remaining`).
    pub timeout: Duration,
    headers: HeaderMap,
    minted: bool,
}

impl Attempt {
    /// The headers every attempt must carry: the idempotency key (when there
    /// is one) and the remaining deadline in milliseconds.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }
}

/// One attempt, ready to go.
struct Prepared<Fut> {
    host: Option<String>,
    future: Fut,
}

/// A failed attempt, judged: retried at this price (with the failure, for
/// the checks after it), or the call ends with this.
enum Priced {
    Retry(RetryCost, AttemptError),
    End(Result<Response, RetryError>),
}

/// One attempt, sent: what was observed, what came back, and how long an
/// open breaker asks the retry to wait.
struct Sent {
    observation: Observation,
    got: Got,
    breaker_wait: Duration,
}

/// The key an inner hop sends: one derived from the inbound key in place of
/// a minted one, so the outer retry reaches the inner effect with it.
fn hop_key(
    inbound: Option<&crate::context::Inbound>,
    key: Option<IdempotencyKey>,
    minted: bool,
    operation: &Operation,
) -> Option<IdempotencyKey> {
    match (inbound, key) {
        (Some(inbound), Some(_)) if minted => inbound
            .next_inner_key(operation.name)
            .and_then(|k| IdempotencyKey::new(k).ok())
            .or_else(|| Some(IdempotencyKey::new_v4())),
        (_, key) => key,
    }
}

/// An attempt's share of the time left: its timeout, and the remaining
/// deadline it sends.
fn time_attempt(attempt: &mut Attempt, policy: &RetryPolicy, remaining: Duration) {
    attempt.remaining = remaining;
    attempt.timeout = policy.attempt_timeout_for(
        remaining,
        policy.max_attempts.saturating_sub(attempt.number) + 1,
    );
    if let Some(name) = &policy.deadline_header {
        let millis = remaining.as_millis().min(u128::from(u64::MAX)) as u64;
        attempt
            .headers
            .insert(name.clone(), HeaderValue::from(millis));
    }
}

/// The attempt a call starts from: the key set where the operation carries
/// it (a header, or the body the caller builds).
fn first_attempt(
    operation: &Operation,
    policy: &RetryPolicy,
    key: Option<IdempotencyKey>,
    minted: bool,
) -> Attempt {
    let mut attempt = Attempt {
        number: 0,
        key: None,
        remaining: Duration::ZERO,
        timeout: Duration::ZERO,
        headers: HeaderMap::new(),
        minted,
    };
    if let Some(key) = key {
        if operation.body_key.is_some() {
            // In the body, which the caller builds: no key header.
            attempt.key = Some(key);
        } else {
            attempt.set_key(key, &policy.key_header);
        }
    }
    // Until the first request is built, a minted key may still give way
    // to one the caller put on the request itself.
    attempt.minted = minted;
    attempt
}

impl RetryClient {
    /// A client with the default policy and a fresh budget of its own.
    pub fn new(http: reqwest::Client) -> Self {
        Self::builder(http).build()
    }

    /// A builder to configure the policy, budget, breaker, clock or randomness.
    pub fn builder(http: reqwest::Client) -> RetryClientBuilder {
        RetryClientBuilder {
            http,
            policy: RetryPolicy::default(),
            budget: RetryBudget::default(),
            breaker: None,
            clock: Arc::new(TokioClock::new()),
            random: Arc::new(ThreadRandom),
        }
    }

    /// A clone using another policy but sharing this client's budget,
    /// breakers, counters, clock and randomness: how per-operation
    /// `x-retry` overrides are applied.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use idem_runtime::client::{RetryClient, RetryPolicy};
    /// let client = RetryClient::new(reqwest::Client::new());
    /// let slow = client.with_policy(RetryPolicy::default().p99(Duration::from_secs(2)));
    /// # let _ = slow;
    /// ```
    pub fn with_policy(&self, policy: RetryPolicy) -> Self {
        Self {
            http: self.http.clone(),
            policy: Arc::new(policy),
            shared: Arc::clone(&self.shared),
        }
    }

    /// The underlying reqwest client.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The retry policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The shared retry budget.
    pub fn budget(&self) -> &RetryBudget {
        &self.shared.budget
    }

    /// The circuit breakers, if configured.
    pub fn breaker(&self) -> Option<&CircuitBreaker> {
        self.shared.breaker.as_ref()
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> RetryMetrics {
        let c = &self.shared.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RetryMetrics {
            calls: load(&c.calls),
            attempts: load(&c.attempts),
            retries: load(&c.retries),
            budget_rejections: load(&c.budget_rejections),
            breaker_rejections: load(&c.breaker_rejections),
            outcome_unknown: load(&c.outcome_unknown),
            succeeded: load(&c.succeeded),
            failed: load(&c.failed),
            budget_available: self.shared.budget.available(),
            breakers: self
                .shared
                .breaker
                .as_ref()
                .map(CircuitBreaker::states)
                .unwrap_or_default(),
        }
    }

    /// Sends one logical call, building each attempt with `build`.
    ///
    /// A `keyed` operation gets a fresh UUIDv4 key for this call, unless the
    /// built request already carries a valid key header (then that key is
    /// used on every attempt). Use [`send_with_key`](Self::send_with_key) to
    /// supply your own.
    ///
    /// Returns the response for any answer that retrying cannot change
    /// (2xx, 3xx, non-429 4xx, 501, …); everything else is a [`RetryError`].
    pub async fn send<F>(&self, operation: &Operation, build: F) -> Result<Response, RetryError>
    where
        F: FnMut(&reqwest::Client) -> RequestBuilder,
    {
        let key = operation
            .class
            .eq(&super::RetryClass::Keyed)
            .then(IdempotencyKey::new_v4);
        let minted = key.is_some();
        self.send_inner(operation, key, minted, build).await
    }

    /// Sends one logical call with a caller-chosen key (for example
    /// [`IdempotencyKey::derived`]), sent unchanged on every attempt.
    pub async fn send_with_key<F>(
        &self,
        operation: &Operation,
        key: IdempotencyKey,
        build: F,
    ) -> Result<Response, RetryError>
    where
        F: FnMut(&reqwest::Client) -> RequestBuilder,
    {
        self.send_inner(operation, Some(key), false, build).await
    }

    /// Sends one logical call of an operation whose key travels in the
    /// request body ([`Operation::body_key`]): `build` gets the call's key
    /// (the caller's, or one minted for a `keyed` operation) on every
    /// attempt and puts it in the body; no key header is sent.
    ///
    /// ```no_run
    /// use idem_runtime::client::{Operation, RetryClass, RetryClient};
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// const CREATE_PAYMENT: Operation =
    ///     Operation::new("CreatePayment", RetryClass::Keyed).body_key("idempotency_key");
    /// let client = RetryClient::new(reqwest::Client::new());
    /// let response = client
    ///     .send_body_keyed(&CREATE_PAYMENT, None, |http, key| {
    ///         let key = key.map(|k| k.as_str().to_owned());
    ///         http.post("https://api.example.com/v2/payments")
    ///             .body(format!(r#"{{"idempotency_key":{key:?},"amount":100}}"#))
    ///     })
    ///     .await?;
    /// # let _ = response; Ok(()) }
    /// ```
    pub async fn send_body_keyed<F>(
        &self,
        operation: &Operation,
        key: Option<IdempotencyKey>,
        mut build: F,
    ) -> Result<Response, RetryError>
    where
        F: FnMut(&reqwest::Client, Option<&IdempotencyKey>) -> RequestBuilder,
    {
        let (key, minted) = match key {
            Some(key) => (Some(key), false),
            None if operation.class == super::RetryClass::Keyed => {
                (Some(IdempotencyKey::new_v4()), true)
            }
            None => (None, false),
        };
        let http = self.http.clone();
        let prepare = move |attempt: &mut Attempt| -> Result<Prepared<_>, reqwest::Error> {
            let request = build(&http, attempt.key.as_ref()).build()?;
            Ok(dispatch(&http, request, attempt))
        };
        self.run(operation, key, minted, None, prepare).await
    }

    async fn send_inner<F>(
        &self,
        operation: &Operation,
        key: Option<IdempotencyKey>,
        minted: bool,
        mut build: F,
    ) -> Result<Response, RetryError>
    where
        F: FnMut(&reqwest::Client) -> RequestBuilder,
    {
        let http = self.http.clone();
        let key_header = self.policy.key_header.clone();
        let header_key = operation.body_key.is_none();
        let prepare = move |attempt: &mut Attempt| -> Result<Prepared<_>, reqwest::Error> {
            let request = build(&http).build()?;
            if header_key && attempt.number == 1 && attempt.minted {
                let supplied = request
                    .headers()
                    .get(&key_header)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| IdempotencyKey::new(v).ok());
                if let Some(supplied) = supplied {
                    attempt.set_key(supplied, &key_header);
                }
            }
            Ok(dispatch(&http, request, attempt))
        };
        self.run(operation, key, minted, None, prepare).await
    }

    /// The retry loop around any attempt you can express as a future, for
    /// callers who need more than a `RequestBuilder` (streamed bodies,
    /// another reqwest wrapper). Each attempt must send the headers of
    /// [`Attempt::headers`]. `host` (`host:port`) selects the circuit
    /// breaker; `None` bypasses it.
    ///
    /// ```no_run
    /// use idem_runtime::client::{IdempotencyKey, Operation, RetryClass, RetryClient};
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// const CONFIRM: Operation = Operation::new("confirmOrder", RetryClass::Keyed);
    /// let client = RetryClient::new(reqwest::Client::new());
    /// let http = client.http().clone();
    /// let key = IdempotencyKey::derived(["order", "739", "confirm"])?;
    /// let response = client
    ///     .execute_with(&CONFIRM, Some(key), Some("api.example.com:443"), |attempt| {
    ///         http.post("https://api.example.com/orders/739/confirm")
    ///             .headers(attempt.headers().clone())
    ///             .send()
    ///     })
    ///     .await?;
    /// # let _ = response; Ok(()) }
    /// ```
    pub async fn execute_with<F, Fut>(
        &self,
        operation: &Operation,
        key: Option<IdempotencyKey>,
        host: Option<&str>,
        mut attempt: F,
    ) -> Result<Response, RetryError>
    where
        F: FnMut(&Attempt) -> Fut,
        Fut: Future<Output = Result<Response, reqwest::Error>>,
    {
        let (key, minted) = match key {
            Some(key) => (Some(key), false),
            None if operation.class == super::RetryClass::Keyed => {
                (Some(IdempotencyKey::new_v4()), true)
            }
            None => (None, false),
        };
        let prepare = move |a: &mut Attempt| -> Result<Prepared<Fut>, reqwest::Error> {
            Ok(Prepared {
                host: None,
                future: attempt(a),
            })
        };
        self.run(operation, key, minted, host.map(str::to_owned), prepare)
            .await
    }

    async fn run<P, Fut>(
        &self,
        operation: &Operation,
        key: Option<IdempotencyKey>,
        minted: bool,
        fixed_host: Option<String>,
        mut prepare: P,
    ) -> Result<Response, RetryError>
    where
        P: FnMut(&mut Attempt) -> Result<Prepared<Fut>, reqwest::Error>,
        Fut: Future<Output = Result<Response, reqwest::Error>>,
    {
        let shared = &*self.shared;
        // Inside a request being served: an inner hop (see `crate::context`).
        let inbound = crate::context::current();
        let inner;
        let policy = match &inbound {
            Some(inbound) => {
                inner = self.policy.as_inner_hop(inbound);
                &inner
            }
            None => &*self.policy,
        };
        let key = hop_key(inbound.as_ref(), key, minted, operation);
        let clock = &*shared.clock;
        shared.counters.calls.fetch_add(1, Ordering::Relaxed);
        let deadline_at = clock.now().checked_add(policy.deadline);
        let left_at =
            |now: Instant| deadline_at.map_or(Duration::MAX, |d| d.saturating_duration_since(now));

        let mut attempt = first_attempt(operation, policy, key, minted);
        let mut server_errors_retried = 0u32;
        let mut previous_wait = Duration::ZERO;
        // What the retry in flight paid the budget: returned if it succeeds.
        let mut paid = 0u32;
        loop {
            attempt.number += 1;
            let started = clock.now();
            let remaining = left_at(started);
            if remaining.is_zero() {
                return self.fail(RetryError::DeadlineExceeded {
                    operation: operation.name,
                    key: attempt.key.clone(),
                    attempts: attempt.number - 1,
                    deadline: policy.deadline,
                    last: None,
                });
            }
            time_attempt(&mut attempt, policy, remaining);

            let Sent {
                observation,
                got,
                breaker_wait,
            } = match self
                .send_one(
                    operation,
                    policy,
                    fixed_host.as_deref(),
                    &mut prepare,
                    &mut attempt,
                    started,
                )
                .await
            {
                Ok(sent) => sent,
                Err(error) => return self.fail(error),
            };

            let verdict = classify(operation.class, &observation, server_errors_retried);
            observe::attempt(operation.name, &observation, verdict);
            let server_wait = match &got {
                Got::Response(response) => retry_after(response.headers(), clock.system_time()),
                Got::Failed(_) => None,
            };
            let got = match (verdict, got) {
                (Verdict::Accept, Got::Response(response)) => {
                    return Ok(self.accepted(operation, &attempt, paid, response));
                }
                (_, got) => got,
            };
            let last = into_error(got);
            let give_up = |reason: GiveUp, last: AttemptError| {
                self.give_up(operation, &attempt, &observation, server_wait, reason, last)
            };
            let (cost, last) = match self.retry_cost(
                operation,
                &attempt,
                &observation,
                server_wait,
                verdict,
                last,
            ) {
                Priced::Retry(cost, last) => (cost, last),
                Priced::End(end) => return end,
            };

            // The attempt used what was left of the deadline (its timeout is
            // cut to fit) and failed: the deadline ran out, which is not the
            // same as a wait that would not fit.
            if left_at(clock.now()).is_zero() {
                return self.fail(RetryError::DeadlineExceeded {
                    operation: operation.name,
                    key: attempt.key.clone(),
                    attempts: attempt.number,
                    deadline: policy.deadline,
                    last: Some(last),
                });
            }
            if attempt.number >= policy.max_attempts {
                return give_up(
                    GiveUp::AttemptsExhausted {
                        max: policy.max_attempts,
                    },
                    last,
                );
            }
            let remaining = left_at(clock.now());
            if let Some(asked) = server_wait
                && asked >= remaining
            {
                let reason = GiveUp::RetryAfterBeyondDeadline {
                    retry_after: asked,
                    remaining,
                };
                return give_up(reason, last);
            }
            let retries_so_far = attempt.number - 1;
            let jitter = policy
                .backoff
                .delay(retries_so_far, previous_wait, &*shared.random);
            let wait = jitter
                .max(server_wait.unwrap_or_default())
                .max(breaker_wait);
            if wait >= remaining {
                return give_up(GiveUp::DeadlineTooClose { wait, remaining }, last);
            }
            let Some(price) = self.pay(cost) else {
                return give_up(GiveUp::BudgetExhausted, last);
            };
            paid = price;
            if matches!(observation, Observation::Status { status, .. } if status == StatusCode::INTERNAL_SERVER_ERROR)
            {
                server_errors_retried += 1;
            }
            self.log_retry(operation, &attempt, &last, server_wait, wait, remaining);
            previous_wait = wait;
            clock.sleep(wait).await;
        }
    }

    /// A call's accepted answer: the budget refunded (the first attempt's
    /// success, or what the retry paid), counted, and a replay noted.
    fn accepted(
        &self,
        operation: &Operation,
        attempt: &Attempt,
        paid: u32,
        response: Response,
    ) -> Response {
        if attempt.number == 1 {
            self.shared.budget.refund_success();
        } else {
            self.shared.budget.refund(paid);
        }
        observe::budget(&self.shared.budget);
        self.shared
            .counters
            .succeeded
            .fetch_add(1, Ordering::Relaxed);
        observe::call(operation.name, "ok");
        if response.headers().contains_key("idempotent-replayed") {
            tracing::debug!(
                operation = operation.name,
                attempt = attempt.number,
                "server replayed a stored response"
            );
        }
        response
    }

    /// Counts a retry and logs it, with what it waits for and what is left.
    fn log_retry(
        &self,
        operation: &Operation,
        attempt: &Attempt,
        last: &AttemptError,
        server_wait: Option<Duration>,
        wait: Duration,
        remaining: Duration,
    ) {
        self.shared.counters.retries.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            operation = operation.name,
            class = operation.class.as_str(),
            attempt = attempt.number,
            error = %last,
            next_wait_ms = wait.as_millis() as u64,
            retry_after_ms = server_wait.map(|d| d.as_millis() as u64),
            budget_remaining = self.shared.budget.available(),
            deadline_remaining_ms = remaining.saturating_sub(wait).as_millis() as u64,
            key = attempt.key.as_ref().map(IdempotencyKey::as_str),
            "retrying"
        );
    }

    /// Spends a retry's `cost` from the budget: what it paid, or `None`
    /// (counted) when the budget cannot pay it.
    fn pay(&self, cost: RetryCost) -> Option<u32> {
        if !self.shared.budget.try_spend(cost) {
            self.shared
                .counters
                .budget_rejections
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
        observe::budget(&self.shared.budget);
        Some(self.shared.budget.price(cost))
    }

    /// What a failed attempt's verdict means: the retry's price, or the
    /// call's end.
    fn retry_cost(
        &self,
        operation: &Operation,
        attempt: &Attempt,
        observation: &Observation,
        server_wait: Option<Duration>,
        verdict: Verdict,
        last: AttemptError,
    ) -> Priced {
        let give_up = |reason: GiveUp, last: AttemptError| {
            self.give_up(operation, attempt, observation, server_wait, reason, last)
        };
        match verdict {
            Verdict::Retry(cost) => Priced::Retry(cost, last),
            Verdict::Accept => {
                // Only a response is ever accepted; a failure reaching here
                // is reported as the attempt limit, never as success.
                Priced::End(give_up(
                    GiveUp::AttemptsExhausted {
                        max: attempt.number,
                    },
                    last,
                ))
            }
            Verdict::KeyReused => {
                let status = match &last {
                    AttemptError::Status { status } => *status,
                    _ => StatusCode::CONFLICT,
                };
                Priced::End(self.fail(RetryError::KeyReused {
                    operation: operation.name,
                    key: attempt.key.clone(),
                    attempts: attempt.number,
                    status,
                }))
            }
            Verdict::OutcomeUnknown => {
                self.shared
                    .counters
                    .outcome_unknown
                    .fetch_add(1, Ordering::Relaxed);
                Priced::End(self.fail(RetryError::OutcomeUnknown {
                    operation: operation.name,
                    class: operation.class,
                    key: attempt.key.clone(),
                    attempts: attempt.number,
                    why: why_not_resent(operation),
                    last,
                }))
            }
            Verdict::ServerErrorLimit => Priced::End(give_up(GiveUp::ServerErrorRetriedOnce, last)),
            Verdict::Declined => Priced::End(give_up(GiveUp::ServerDeclined, last)),
        }
    }

    /// Sends one attempt through the breaker: refused at once when the
    /// breaker is open for the host, otherwise prepared, sent and read
    /// under the attempt's timeout.
    async fn send_one<P, Fut>(
        &self,
        operation: &Operation,
        policy: &RetryPolicy,
        fixed_host: Option<&str>,
        prepare: &mut P,
        attempt: &mut Attempt,
        started: Instant,
    ) -> Result<Sent, RetryError>
    where
        P: FnMut(&mut Attempt) -> Result<Prepared<Fut>, reqwest::Error>,
        Fut: Future<Output = Result<Response, reqwest::Error>>,
    {
        let clock = &*self.shared.clock;
        // Retry → circuit breaker → call: the breaker sees every attempt,
        // and a refused one is never even prepared when the host is known.
        let mut breaker_wait = Duration::ZERO;
        let mut permit: Option<Permit> = None;
        let mut refused_host: Option<String> = None;
        let mut future = None;
        if let Some(host) = fixed_host {
            match self.admit(host, started) {
                Ok(p) => permit = p,
                Err(wait) => (breaker_wait, refused_host) = (wait, Some(host.to_owned())),
            }
        }
        if refused_host.is_none() {
            let prepared = match prepare(attempt) {
                Ok(prepared) => prepared,
                Err(source) => {
                    return Err(RetryError::Request {
                        operation: operation.name,
                        key: attempt.key.clone(),
                        attempts: attempt.number - 1,
                        source,
                    });
                }
            };
            if let (None, Some(host)) = (fixed_host, prepared.host) {
                match self.admit(&host, started) {
                    Ok(p) => permit = p,
                    Err(wait) => (breaker_wait, refused_host) = (wait, Some(host)),
                }
            }
            if refused_host.is_none() {
                future = Some(prepared.future);
            }
        }
        self.shared
            .counters
            .attempts
            .fetch_add(1, Ordering::Relaxed);

        let (observation, got) = match (future, refused_host) {
            (Some(future), _) => {
                let read = attempt::Read {
                    timeout: attempt.timeout,
                    key_sent: attempt.key.is_some(),
                    buffer_body: !policy.stream_body,
                };
                match attempt::run(clock, future, read).await {
                    Ok(outcome) => outcome,
                    Err(source) => {
                        return Err(RetryError::Request {
                            operation: operation.name,
                            key: attempt.key.clone(),
                            attempts: attempt.number,
                            source,
                        });
                    }
                }
            }
            (None, host) => (
                Observation::CircuitOpen,
                Got::Failed(AttemptError::CircuitOpen {
                    host: host.unwrap_or_default(),
                }),
            ),
        };
        if let Some(permit) = permit {
            permit.record(is_breaker_failure(&observation), clock.now());
        }
        Ok(Sent {
            observation,
            got,
            breaker_wait,
        })
    }

    /// Asks the breaker (if any) for leave to send to `host`; `Err` carries
    /// how long until it lets a trial through.
    fn admit(&self, host: &str, now: Instant) -> Result<Option<Permit>, Duration> {
        let Some(breaker) = &self.shared.breaker else {
            return Ok(None);
        };
        match breaker.acquire(host, now) {
            Ok(permit) => Ok(Some(permit)),
            Err(refused) => {
                self.shared
                    .counters
                    .breaker_rejections
                    .fetch_add(1, Ordering::Relaxed);
                Err(refused.retry_in)
            }
        }
    }

    fn give_up(
        &self,
        operation: &Operation,
        attempt: &Attempt,
        observation: &Observation,
        server_wait: Option<Duration>,
        reason: GiveUp,
        last: AttemptError,
    ) -> Result<Response, RetryError> {
        let error = if *observation == Observation::KeyInUse {
            RetryError::KeyInUse {
                operation: operation.name,
                key: attempt.key.clone(),
                attempts: attempt.number,
                retry_after: server_wait,
                reason,
            }
        } else {
            RetryError::GaveUp {
                operation: operation.name,
                key: attempt.key.clone(),
                attempts: attempt.number,
                reason,
                last,
            }
        };
        self.fail(error)
    }

    fn fail(&self, error: RetryError) -> Result<Response, RetryError> {
        self.shared.counters.failed.fetch_add(1, Ordering::Relaxed);
        observe::failed(&error);
        tracing::warn!(
            operation = error.operation(),
            attempts = error.attempts(),
            error = %chain(&error),
            budget_remaining = self.shared.budget.available(),
            "call failed"
        );
        Err(error)
    }
}

/// One attempt's request, with the attempt's headers, on its way: the host
/// (for the circuit breaker) and the future of its response.
fn dispatch(
    http: &reqwest::Client,
    mut request: reqwest::Request,
    attempt: &Attempt,
) -> Prepared<impl Future<Output = Result<Response, reqwest::Error>> + use<>> {
    for (name, value) in attempt.headers() {
        request.headers_mut().insert(name, value.clone());
    }
    let url = request.url();
    let host = url
        .host_str()
        .map(|h| format!("{h}:{}", url.port_or_known_default().unwrap_or(0)));
    Prepared {
        host,
        future: http.execute(request),
    }
}

impl Attempt {
    fn set_key(&mut self, key: IdempotencyKey, header: &http::HeaderName) {
        self.headers.insert(header.clone(), key.header_value());
        self.key = Some(key);
        self.minted = false;
    }
}
