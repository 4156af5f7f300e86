#![cfg(feature = "client")]
#![allow(
    clippy::unwrap_used,
    reason = "helpers of a test binary: a failed unwrap is a failed test"
)]
//! Property tests: jitter stays inside its window, and no logical call ever
//! outlives its deadline or its attempt limit, whatever the server does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::client::{
    Backoff, Operation, RetryBudget, RetryClass, RetryClient, RetryPolicy, SeededRandom,
};
use proptest::prelude::*;

proptest! {
    #[test]
    fn full_jitter_stays_in_its_window(
        base_ms in 1u64..5_000,
        cap_ms in 1u64..120_000,
        retry in 0u32..80,
        seed in any::<u64>(),
    ) {
        let (base, cap) = (Duration::from_millis(base_ms), Duration::from_millis(cap_ms));
        let backoff = Backoff::full_jitter(base, cap);
        let random = SeededRandom::new(seed);
        let window = base.saturating_mul(2u32.saturating_pow(retry.min(31))).min(cap);
        prop_assert_eq!(backoff.ceiling(retry), window);
        for _ in 0..8 {
            let wait = backoff.delay(retry, Duration::ZERO, &random);
            prop_assert!(wait <= window, "{:?} > {:?}", wait, window);
        }
    }

    #[test]
    fn decorrelated_jitter_stays_in_its_window(
        base_ms in 1u64..5_000,
        cap_ms in 1u64..120_000,
        previous_ms in 0u64..200_000,
        seed in any::<u64>(),
    ) {
        let (base, cap) = (Duration::from_millis(base_ms), Duration::from_millis(cap_ms));
        let previous = Duration::from_millis(previous_ms);
        let backoff = Backoff::decorrelated_jitter(base, cap);
        let random = SeededRandom::new(seed);
        let low = base.min(cap);
        let high = (previous.max(base) * 3).min(cap);
        for retry in 0..8 {
            let wait = backoff.delay(retry, previous, &random);
            prop_assert!(wait >= low && wait <= high, "{:?} not in [{:?}, {:?}]", wait, low, high);
        }
    }

    #[test]
    fn a_call_never_outlives_its_deadline_or_attempt_limit(
        steps in prop::collection::vec(step(), 1..12),
        class in prop::sample::select(RetryClass::ALL.to_vec()),
        max_attempts in 1u32..7,
        deadline_ms in 1u64..60_000,
        base_ms in 1u64..3_000,
        cap_ms in 1u64..20_000,
        decorrelated in any::<bool>(),
        p99_ms in prop::option::of(1u64..10_000),
        seed in any::<u64>(),
    ) {
        let (base, cap) = (Duration::from_millis(base_ms), Duration::from_millis(cap_ms));
        let backoff = if decorrelated {
            Backoff::decorrelated_jitter(base, cap)
        } else {
            Backoff::full_jitter(base, cap)
        };
        let deadline = Duration::from_millis(deadline_ms);
        let mut policy = RetryPolicy::default()
            .max_attempts(max_attempts)
            .deadline(deadline)
            .backoff(backoff);
        if let Some(p99) = p99_ms {
            policy = policy.p99(Duration::from_millis(p99));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let (elapsed, attempts, result_ok) = runtime.block_on(run(policy, class, steps, seed));
        prop_assert!(elapsed <= deadline, "took {:?}, deadline {:?}", elapsed, deadline);
        prop_assert!(attempts <= max_attempts as usize);
        prop_assert!(attempts >= 1 || !result_ok);
        if !class.may_resend() {
            // Every scripted step reaches the server, so nothing may follow it.
            prop_assert!(attempts <= 1, "unsafe operation sent {} times", attempts);
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// Answer `status` after `latency`, maybe with `Retry-After`.
    Answer {
        status: u16,
        latency: Duration,
        retry_after: Option<String>,
    },
    Hang,
}

fn step() -> impl Strategy<Value = Step> {
    let retry_after = prop::option::of(prop_oneof![
        (0u64..40).prop_map(|s| format!("retry-after:{s}")),
        (0u64..40_000).prop_map(|ms| format!("retry-after-ms:{ms}")),
        Just("retry-after:garbage".to_owned()),
    ]);
    prop_oneof![
        4 => (
            prop::sample::select(vec![200u16, 400, 409, 429, 500, 502, 503, 504]),
            0u64..20_000,
            retry_after,
        )
            .prop_map(|(status, latency, retry_after)| Step::Answer {
                status,
                latency: Duration::from_millis(latency),
                retry_after,
            }),
        1 => Just(Step::Hang),
    ]
}

async fn run(
    policy: RetryPolicy,
    class: RetryClass,
    steps: Vec<Step>,
    seed: u64,
) -> (Duration, usize, bool) {
    let client = RetryClient::builder(reqwest::Client::new())
        .policy(policy)
        .budget(RetryBudget::unlimited())
        .random(Arc::new(SeededRandom::new(seed)))
        .build();
    let steps = Arc::new(Mutex::new(VecDeque::from(steps)));
    let attempts = Arc::new(Mutex::new(0usize));
    let op = Operation::new("propertyCall", class);
    let start = tokio::time::Instant::now();
    let result = client
        .execute_with(&op, None, None, |_| {
            *attempts.lock().unwrap() += 1;
            let step = steps.lock().unwrap().pop_front().unwrap_or(Step::Hang);
            async move {
                match step {
                    Step::Answer {
                        status,
                        latency,
                        retry_after,
                    } => {
                        tokio::time::sleep(latency).await;
                        let mut response = http::Response::builder().status(status);
                        if let Some((name, value)) =
                            retry_after.as_deref().and_then(|h| h.split_once(':'))
                        {
                            response = response.header(name, value);
                        }
                        Ok(reqwest::Response::from(response.body("").unwrap()))
                    }
                    Step::Hang => std::future::pending().await,
                }
            }
        })
        .await;
    let elapsed = start.elapsed();
    let attempts = *attempts.lock().unwrap();
    (elapsed, attempts, result.is_ok())
}
