//! The retry budget: a token bucket shared by every clone of a client.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// What kind of failure a retry answers, which decides its price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetryCost {
    /// Connection errors, timeouts, 500, 502, 503, 504: the server may be
    /// struggling, so these are expensive and drain the bucket fast.
    Transient,
    /// 429 and the in-flight key conflict: the server is up and said when
    /// to come back, so these are cheaper.
    Throttle,
    /// Nothing was sent (the circuit breaker refused the attempt locally):
    /// the retry costs the server nothing and is not charged.
    Free,
}

/// Token-bucket sizes, the `x-retry.budget` vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetConfig {
    /// Tokens when full (default 500).
    pub capacity: u32,
    /// Price of a retry after a transient error (default 14).
    pub transient_cost: u32,
    /// Price of a retry after throttling (default 5).
    pub throttle_cost: u32,
    /// Tokens returned by a call whose first attempt succeeds (default 1).
    /// A retry that succeeds returns what it paid instead.
    pub success_refund: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            capacity: 500,
            transient_cost: 14,
            throttle_cost: 5,
            success_refund: 1,
        }
    }
}

/// A fleet-wide cap on retries, distinct from the per-call attempt limit.
///
/// Each retry spends tokens. A first attempt that succeeds returns
/// `success_refund`, and a retry that succeeds returns what it paid (the rule
/// of AWS's SDKs), so ordinary loss, where retries mostly succeed, costs the
/// bucket nothing. During an outage no retry succeeds, nothing comes back,
/// and failures drain the bucket within a few dozen retries, after which only
/// first attempts go out and the outage adds no retry load at all. Successes
/// refill it once the server recovers.
///
/// Cloning shares the bucket, and so does cloning the
/// [`RetryClient`](super::RetryClient) that holds it: one budget per
/// downstream service is the intended granularity.
///
/// ```
/// use idem_runtime::client::{RetryBudget, RetryCost};
/// let budget = RetryBudget::default();
/// assert_eq!(budget.available(), Some(500));
/// assert!(budget.try_spend(RetryCost::Transient));
/// assert_eq!(budget.available(), Some(486));
/// budget.refund_success();
/// assert_eq!(budget.available(), Some(487));
/// // The retry it paid for succeeded: its price comes back.
/// budget.refund(budget.price(RetryCost::Transient));
/// assert_eq!(budget.available(), Some(500));
/// ```
#[derive(Debug, Clone)]
pub struct RetryBudget {
    inner: Option<Arc<Bucket>>,
}

#[derive(Debug)]
struct Bucket {
    config: BudgetConfig,
    tokens: AtomicU32,
    rejections: AtomicU64,
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::new(BudgetConfig::default())
    }
}

impl RetryBudget {
    /// A full bucket of the given size.
    ///
    /// ```
    /// use idem_runtime::client::{BudgetConfig, RetryBudget};
    /// let budget = RetryBudget::new(BudgetConfig { capacity: 100, ..BudgetConfig::default() });
    /// assert_eq!(budget.available(), Some(100));
    /// ```
    pub fn new(config: BudgetConfig) -> Self {
        Self {
            inner: Some(Arc::new(Bucket {
                config,
                tokens: AtomicU32::new(config.capacity),
                rejections: AtomicU64::new(0),
            })),
        }
    }

    /// No budget at all: every retry the policy allows goes out. Only for
    /// comparisons and single-caller tools; a fleet needs a real bucket.
    pub fn unlimited() -> Self {
        Self { inner: None }
    }

    /// The bucket's sizes, or `None` when unlimited.
    pub fn config(&self) -> Option<BudgetConfig> {
        self.inner.as_ref().map(|b| b.config)
    }

    /// Tokens left, or `None` when unlimited.
    pub fn available(&self) -> Option<u32> {
        self.inner
            .as_ref()
            .map(|b| b.tokens.load(Ordering::Relaxed))
    }

    /// Retries refused because the bucket was empty, since creation.
    pub fn rejections(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |b| b.rejections.load(Ordering::Relaxed))
    }

    /// What one retry of this kind costs (0 when unlimited).
    pub fn price(&self, cost: RetryCost) -> u32 {
        match (&self.inner, cost) {
            (None, _) | (_, RetryCost::Free) => 0,
            (Some(bucket), RetryCost::Transient) => bucket.config.transient_cost,
            (Some(bucket), RetryCost::Throttle) => bucket.config.throttle_cost,
        }
    }

    /// Takes the price of one retry; `false` (and no change) when the bucket
    /// cannot pay it, in which case the retry must not be sent.
    pub fn try_spend(&self, cost: RetryCost) -> bool {
        let price = self.price(cost);
        let Some(bucket) = &self.inner else {
            return true;
        };
        let paid = bucket
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                t.checked_sub(price)
            })
            .is_ok();
        if !paid {
            bucket.rejections.fetch_add(1, Ordering::Relaxed);
        }
        paid
    }

    /// Returns the success refund, for a call whose first attempt
    /// succeeded; never beyond capacity.
    pub fn refund_success(&self) {
        if let Some(bucket) = &self.inner {
            self.refund(bucket.config.success_refund);
        }
    }

    /// Returns `tokens`, never beyond capacity: what a retry that succeeded
    /// paid ([`price`](Self::price)).
    pub fn refund(&self, tokens: u32) {
        let Some(bucket) = &self.inner else {
            return;
        };
        let capacity = bucket.config.capacity;
        // fetch_update only fails when the closure returns None, which it never does.
        let _ = bucket
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(tokens).min(capacity))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_bucket() {
        let a = RetryBudget::default();
        let b = a.clone();
        assert!(a.try_spend(RetryCost::Throttle));
        assert_eq!(b.available(), Some(495));
    }

    #[test]
    fn an_empty_bucket_refuses_without_going_negative() {
        let budget = RetryBudget::new(BudgetConfig {
            capacity: 20,
            ..BudgetConfig::default()
        });
        assert!(budget.try_spend(RetryCost::Transient));
        assert!(!budget.try_spend(RetryCost::Transient));
        assert_eq!(budget.available(), Some(6));
        assert!(budget.try_spend(RetryCost::Throttle));
        assert_eq!(budget.available(), Some(1));
        assert!(budget.try_spend(RetryCost::Free));
        assert_eq!(budget.rejections(), 1);
    }

    #[test]
    fn refunds_stop_at_capacity() {
        let budget = RetryBudget::default();
        for _ in 0..10 {
            budget.refund_success();
        }
        assert_eq!(budget.available(), Some(500));
    }

    #[test]
    fn a_successful_retry_earns_back_exactly_its_price() {
        let budget = RetryBudget::new(BudgetConfig {
            capacity: 100,
            ..BudgetConfig::default()
        });
        assert!(budget.try_spend(RetryCost::Transient));
        assert!(budget.try_spend(RetryCost::Throttle));
        assert_eq!(budget.available(), Some(81));
        budget.refund(budget.price(RetryCost::Throttle));
        assert_eq!(budget.available(), Some(86));
        budget.refund(budget.price(RetryCost::Transient));
        budget.refund(budget.price(RetryCost::Transient));
        assert_eq!(budget.available(), Some(100));
        assert_eq!(RetryBudget::unlimited().price(RetryCost::Transient), 0);
    }

    #[test]
    fn unlimited_always_pays() {
        let budget = RetryBudget::unlimited();
        assert!((0..10_000).all(|_| budget.try_spend(RetryCost::Transient)));
        assert_eq!(budget.available(), None);
    }
}
