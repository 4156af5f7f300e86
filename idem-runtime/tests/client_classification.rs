#![cfg(feature = "client")]
//! The classification table of docs/client.md, row by row: what each
//! outcome of an attempt leads to, for each retry class.

use http::StatusCode;
use idem_runtime::client::{Observation, RetryClass, RetryCost, Verdict, classify};

const ACCEPT: Verdict = Verdict::Accept;
const RETRY: Verdict = Verdict::Retry(RetryCost::Transient);
const THROTTLED: Verdict = Verdict::Retry(RetryCost::Throttle);
const FREE: Verdict = Verdict::Retry(RetryCost::Free);
const UNKNOWN: Verdict = Verdict::OutcomeUnknown;
const ONCE: Verdict = Verdict::ServerErrorLimit;
const DECLINED: Verdict = Verdict::Declined;
const REUSED: Verdict = Verdict::KeyReused;

fn status(code: u16) -> Observation {
    status_hint(code, None)
}

fn status_hint(code: u16, hint: Option<bool>) -> Observation {
    Observation::Status {
        status: StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT),
        hint,
    }
}

/// (row, observation, 500s already retried, [safe, keyed, unsafe-documented, unsafe])
type Row = (&'static str, Observation, u32, [Verdict; 4]);

fn table() -> Vec<Row> {
    let mut rows: Vec<Row> = vec![
        ("connection refused", Observation::NotSent, 0, [RETRY; 4]),
        (
            "timeout",
            Observation::TimedOut,
            0,
            [RETRY, RETRY, UNKNOWN, UNKNOWN],
        ),
        (
            "connection reset",
            Observation::Interrupted,
            0,
            [RETRY, RETRY, UNKNOWN, UNKNOWN],
        ),
        ("circuit open", Observation::CircuitOpen, 0, [FREE; 4]),
        (
            "429",
            status(429),
            0,
            [THROTTLED, THROTTLED, UNKNOWN, UNKNOWN],
        ),
        ("502", status(502), 0, [RETRY, RETRY, UNKNOWN, UNKNOWN]),
        ("503", status(503), 0, [RETRY, RETRY, UNKNOWN, UNKNOWN]),
        ("504", status(504), 0, [RETRY, RETRY, UNKNOWN, UNKNOWN]),
        (
            "first 500",
            status(500),
            0,
            [RETRY, RETRY, UNKNOWN, UNKNOWN],
        ),
        ("second 500", status(500), 1, [ONCE, ONCE, UNKNOWN, UNKNOWN]),
        ("409 in use", Observation::KeyInUse, 0, [THROTTLED; 4]),
        ("409 reused", Observation::KeyReused, 0, [REUSED; 4]),
        (
            "503 + should-retry false",
            status_hint(503, Some(false)),
            0,
            [DECLINED, DECLINED, UNKNOWN, UNKNOWN],
        ),
        (
            "second 500 + should-retry true",
            status_hint(500, Some(true)),
            1,
            [RETRY, RETRY, UNKNOWN, UNKNOWN],
        ),
        (
            "409 + should-retry true",
            status_hint(409, Some(true)),
            0,
            [RETRY, RETRY, ACCEPT, ACCEPT],
        ),
        (
            "200 + should-retry true",
            status_hint(200, Some(true)),
            0,
            [ACCEPT; 4],
        ),
    ];
    for code in [
        200, 201, 202, 204, 301, 304, 400, 401, 403, 404, 405, 408, 409, 410, 412, 413, 422, 451,
        501, 505, 507,
    ] {
        rows.push(("definite answer", status(code), 0, [ACCEPT; 4]));
    }
    rows
}

#[test]
fn classification_table() {
    let mut mismatches = Vec::new();
    for (row, observation, retried, expected) in table() {
        for (class, want) in RetryClass::ALL.into_iter().zip(expected) {
            let got = classify(class, &observation, retried);
            if got != want {
                mismatches.push(format!(
                    "{row} ({observation:?}) for {class}: got {got:?}, want {want:?}"
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn no_status_below_500_other_than_429_is_ever_retried_without_a_hint() {
    for code in 100..500u16 {
        let Ok(status) = StatusCode::from_u16(code) else {
            continue;
        };
        if code == 429 {
            continue;
        }
        for class in RetryClass::ALL {
            let verdict = classify(class, &Observation::Status { status, hint: None }, 0);
            assert_eq!(verdict, Verdict::Accept, "{code} for {class}");
        }
    }
}

#[test]
fn unsafe_classes_are_never_resent_once_the_request_may_have_arrived() {
    let arrived = (100..600u16)
        .filter_map(|c| StatusCode::from_u16(c).ok())
        .flat_map(|status| {
            [None, Some(true), Some(false)].map(|hint| Observation::Status { status, hint })
        })
        .chain([Observation::TimedOut, Observation::Interrupted]);
    for observation in arrived {
        for class in [RetryClass::UnsafeDocumented, RetryClass::Unsafe] {
            for retried in 0..3 {
                let verdict = classify(class, &observation, retried);
                assert!(
                    !matches!(verdict, Verdict::Retry(_)),
                    "{observation:?} for {class}: {verdict:?}"
                );
            }
        }
    }
}
