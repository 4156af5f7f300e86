//! The worked retry schedule: what `x-retry` allows, attempt by attempt, in
//! the worst case (every attempt times out, every wait is the longest the
//! backoff can draw). The arithmetic is the client runtime's
//! (`idem_runtime::client::Backoff` and `RetryPolicy::attempt_timeout_for`),
//! done here on the model so the page needs no client.

use std::time::Duration;

use idem_runtime::protocol::P99_TIMEOUT_FACTOR;

use crate::model::RetryPolicy;
use crate::vocab::{Backoff, Budget};

/// One attempt of the worked schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The longest wait before it (zero for the first attempt).
    pub wait_max: Duration,
    /// The shortest wait before it (decorrelated jitter never waits less
    /// than `base`; full jitter can wait nothing).
    pub wait_min: Duration,
    /// When it starts at the latest, from the start of the call.
    pub starts_by: Duration,
    /// Its timeout: 3 × p99 where one is declared, else an even share of
    /// what is left; never past the deadline.
    pub timeout: Duration,
    /// When it ends at the latest.
    pub ends_by: Duration,
}

/// The schedule of one retry policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The attempts that fit inside the deadline, in order.
    pub steps: Vec<Step>,
    /// Attempts the policy allows that the deadline leaves no time for.
    pub cut_by_deadline: u32,
    /// The sum of the longest waits of the attempts that fit.
    pub total_wait_max: Duration,
}

/// The longest wait before retry number `retry` (0 for the first retry).
pub fn wait_ceiling(backoff: Backoff, base: Duration, cap: Duration, retry: u32) -> Duration {
    match backoff {
        // random(0, min(cap, base · 2^retry))
        Backoff::FullJitter => {
            let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
            base.saturating_mul(factor).min(cap)
        }
        // min(cap, random(base, 3 · previous)), previous starting at base:
        // the window's top grows by 3× per retry.
        Backoff::DecorrelatedJitter => {
            let factor = 3u32
                .checked_pow(retry.saturating_add(1))
                .unwrap_or(u32::MAX);
            base.saturating_mul(factor).min(cap)
        }
    }
}

/// The shortest wait before a retry.
pub fn wait_floor(backoff: Backoff, base: Duration, cap: Duration) -> Duration {
    match backoff {
        Backoff::FullJitter => Duration::ZERO,
        Backoff::DecorrelatedJitter => base.min(cap),
    }
}

/// The per-attempt timeout when `remaining` is left and `attempts_left`
/// attempts (this one included) may still be made.
pub fn attempt_timeout(p99: Option<Duration>, remaining: Duration, attempts_left: u32) -> Duration {
    let wanted = match p99 {
        Some(p99) => p99.saturating_mul(P99_TIMEOUT_FACTOR),
        None => remaining / attempts_left.max(1),
    };
    wanted.min(remaining)
}

/// The worst-case schedule of `policy`.
pub fn schedule(policy: &RetryPolicy) -> Schedule {
    let mut steps = Vec::new();
    let mut clock = Duration::ZERO;
    let mut total_wait_max = Duration::ZERO;
    let attempts = policy.max_attempts.max(1);
    let mut cut_by_deadline = 0;
    for attempt in 1..=attempts {
        let (wait_max, wait_min) = if attempt == 1 {
            (Duration::ZERO, Duration::ZERO)
        } else {
            (
                wait_ceiling(policy.backoff, policy.base, policy.cap, attempt - 2),
                wait_floor(policy.backoff, policy.base, policy.cap),
            )
        };
        let starts_by = clock.saturating_add(wait_max);
        // A wait that would end past the deadline is not taken: the call
        // stops instead, as the client runtime does.
        if attempt > 1 && starts_by >= policy.deadline {
            cut_by_deadline = attempts - attempt + 1;
            break;
        }
        let remaining = policy.deadline.saturating_sub(starts_by);
        let timeout = attempt_timeout(policy.p99, remaining, attempts - attempt + 1);
        let ends_by = starts_by.saturating_add(timeout);
        total_wait_max = total_wait_max.saturating_add(wait_max);
        steps.push(Step {
            attempt,
            wait_max,
            wait_min,
            starts_by,
            timeout,
            ends_by,
        });
        clock = ends_by;
    }
    Schedule {
        steps,
        cut_by_deadline,
        total_wait_max,
    }
}

/// How many retries a full retry budget pays for, by kind (`None`: the
/// kind costs nothing, so the budget never stops it).
pub fn budget_retries(budget: &Budget) -> (Option<u32>, Option<u32>) {
    let per = |cost: u32| (cost > 0).then(|| budget.capacity / cost);
    (per(budget.transient_cost), per(budget.throttle_cost))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn full_jitter_windows_match_the_client() {
        // The client runtime's own table (client/backoff.rs).
        let windows: Vec<u128> = (0..9)
            .map(|r| wait_ceiling(Backoff::FullJitter, ms(100), ms(10_000), r).as_millis())
            .collect();
        assert_eq!(
            windows,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]
        );
        assert_eq!(
            wait_ceiling(Backoff::FullJitter, ms(100), ms(10_000), u32::MAX),
            ms(10_000)
        );
        let decorrelated: Vec<u128> = (0..4)
            .map(|r| wait_ceiling(Backoff::DecorrelatedJitter, ms(100), ms(2_000), r).as_millis())
            .collect();
        assert_eq!(decorrelated, [300, 900, 2000, 2000]);
    }

    #[test]
    fn default_policy_spends_the_deadline_in_even_shares() {
        let s = schedule(&RetryPolicy::default());
        let rows: Vec<(u32, u128, u128, u128, u128)> = s
            .steps
            .iter()
            .map(|st| {
                (
                    st.attempt,
                    st.wait_max.as_millis(),
                    st.starts_by.as_millis(),
                    st.timeout.as_millis(),
                    st.ends_by.as_millis(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (1, 0, 0, 10_000, 10_000),
                (2, 100, 10_100, 9_950, 20_050),
                (3, 200, 20_250, 9_750, 30_000),
            ]
        );
        assert_eq!(s.total_wait_max, ms(300));
        assert_eq!(s.cut_by_deadline, 0);
    }

    #[test]
    fn p99_timeouts_and_the_deadline_cut() {
        let policy = RetryPolicy {
            max_attempts: 5,
            p99: Some(ms(800)),
            ..RetryPolicy::default()
        };
        let s = schedule(&policy);
        assert!(s.steps.iter().all(|st| st.timeout == ms(2_400)));
        assert_eq!(s.steps.len(), 5);
        let tight = RetryPolicy {
            max_attempts: 10,
            base: ms(1_000),
            cap: ms(8_000),
            deadline: ms(5_000),
            p99: Some(ms(200)),
            ..RetryPolicy::default()
        };
        let s = schedule(&tight);
        // 0.6 s + 1 s + 0.6 s + 2 s + 0.6 s = 4.8 s; the next wait (4 s) would pass 5 s.
        assert_eq!(s.steps.len(), 3);
        assert_eq!(s.cut_by_deadline, 7);
        assert!(s.steps.iter().all(|st| st.ends_by <= tight.deadline));
    }

    #[test]
    fn budgets() {
        assert_eq!(budget_retries(&Budget::default()), (Some(35), Some(100)));
        let free = Budget {
            transient_cost: 0,
            ..Budget::default()
        };
        assert_eq!(budget_retries(&free), (None, Some(100)));
    }
}
