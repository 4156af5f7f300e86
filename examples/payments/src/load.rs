//! Keyed load for the scenarios across machines: workers charging orders
//! (each logical charge with its own key, optionally sent twice at once to
//! two servers), workers paying out, and what it all left in the database.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idem_runtime::client::IdempotencyKey;

use crate::api::{Client, CreateChargeParams, CreatePayoutParams, NewPayout};
use crate::demo::{fetch_for, order_body};

/// What a kind of call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Charge,
    Payout,
}

/// Calls left without an answer: their number, and the key to settle them with.
type Pending = Vec<(usize, IdempotencyKey)>;

/// Workers making calls until stopped.
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    next: Arc<AtomicUsize>,
    /// HTTP requests the calls made, duplicates included (not retries).
    sent: Arc<AtomicUsize>,
    acked: Arc<Mutex<BTreeMap<usize, String>>>,
    pending: Arc<Mutex<Pending>>,
    workers: tokio::task::JoinSet<()>,
}

/// What a load did, once stopped.
#[derive(Debug, Default)]
pub(crate) struct Done {
    pub(crate) calls: usize,
    pub(crate) sent: usize,
    /// Calls whose caller got a success, with their keys.
    pub(crate) acked: BTreeMap<usize, String>,
    pub(crate) pending: Pending,
}

pub(crate) fn charge_params(account: &str) -> CreateChargeParams {
    CreateChargeParams {
        x_account_id: account.to_owned(),
    }
}

pub(crate) fn payout_params(account: &str) -> CreatePayoutParams {
    CreatePayoutParams {
        x_account_id: account.to_owned(),
    }
}

pub(crate) fn payout_body(n: usize) -> NewPayout {
    NewPayout {
        vendor_id: format!("vendor-{n}"),
        amount: 5_000 + i64::try_from(n).unwrap_or(0),
    }
}

/// One call with `key` through `client`; `true` on a success.
pub(crate) async fn call(
    client: &Client,
    kind: Kind,
    account: &str,
    n: usize,
    key: IdempotencyKey,
) -> bool {
    match kind {
        Kind::Charge => client
            .charges()
            .create(&charge_params(account), &order_body(n))
            .idempotency_key(key)
            .send()
            .await
            .is_ok(),
        Kind::Payout => client
            .payouts()
            .create(&payout_params(account), &payout_body(n))
            .idempotency_key(key)
            .send()
            .await
            .is_ok(),
    }
}

impl Load {
    /// `workers` workers spread over `clients`, each making one call at a
    /// time with a fresh key; each call is sent `copies` times at once with
    /// that key, spread over the servers, and counts as acknowledged when
    /// any copy answered with a success. Calls number from `first`.
    pub(crate) fn start(
        kind: Kind,
        clients: &[Client],
        workers: usize,
        account: &str,
        copies: usize,
        first: usize,
    ) -> Load {
        let mut load = Load {
            stop: Arc::default(),
            next: Arc::new(AtomicUsize::new(first)),
            sent: Arc::default(),
            acked: Arc::default(),
            pending: Arc::default(),
            workers: tokio::task::JoinSet::new(),
        };
        for w in 0..workers {
            let spread: Vec<Client> = (0..copies.max(1))
                .map(|c| clients[(w + c) % clients.len()].clone())
                .collect();
            let (stop, next, sent) = (
                Arc::clone(&load.stop),
                Arc::clone(&load.next),
                Arc::clone(&load.sent),
            );
            let (acked, pending, account) = (
                Arc::clone(&load.acked),
                Arc::clone(&load.pending),
                account.to_owned(),
            );
            load.workers.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let key = IdempotencyKey::new_v4();
                    sent.fetch_add(spread.len(), Ordering::Relaxed);
                    let mut answers = tokio::task::JoinSet::new();
                    for client in &spread {
                        let (client, account, key) = (client.clone(), account.clone(), key.clone());
                        answers.spawn(async move { call(&client, kind, &account, n, key).await });
                    }
                    let mut ok = false;
                    while let Some(answer) = answers.join_next().await {
                        ok |= answer.unwrap_or(false);
                    }
                    if ok {
                        acked
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(n, key.as_str().to_owned());
                    } else {
                        pending
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((n, key));
                        // What a job runner does with a call it could not
                        // settle: set it aside for later, and pause.
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                }
            });
        }
        load
    }

    /// Stops the workers once their calls in progress end.
    pub(crate) async fn stop(mut self, first: usize) -> Done {
        self.stop.store(true, Ordering::Relaxed);
        while self.workers.join_next().await.is_some() {}
        Done {
            calls: self.next.load(Ordering::Relaxed) - first,
            sent: self.sent.load(Ordering::Relaxed),
            acked: take(&self.acked),
            pending: take(&self.pending),
        }
    }
}

fn take<T: Default>(shared: &Mutex<T>) -> T {
    std::mem::take(&mut *shared.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Settles the calls left without an answer: the same call with the same
/// key, every 500ms for up to 15 s, until each has its answer. Returns how
/// many were settled.
pub(crate) async fn reconcile(
    client: &Client,
    kind: Kind,
    account: &str,
    done: &mut Done,
) -> usize {
    let mut pending = std::mem::take(&mut done.pending);
    let unknown = pending.len();
    for _ in 0..30 {
        let mut still = Vec::new();
        for (n, key) in pending {
            if call(client, kind, account, n, key.clone()).await {
                done.acked.insert(n, key.as_str().to_owned());
            } else {
                still.push((n, key));
            }
        }
        pending = still;
        if pending.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let settled = unknown - pending.len();
    done.pending = pending;
    settled
}

/// What the database holds for the charges of `account`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counted {
    /// Charges beyond the first of an order.
    pub(crate) duplicates: usize,
    /// Acknowledged calls whose charge (or payout record) is missing.
    pub(crate) lost: usize,
    /// Keys still in flight.
    pub(crate) stuck: usize,
}

/// Counts the charges of `account` against the orders acknowledged, on
/// PostgreSQL or MariaDB.
pub(crate) async fn count_charges(
    url: &str,
    account: &str,
    acked: &BTreeMap<usize, String>,
) -> anyhow::Result<Counted> {
    let per_order: Vec<(String, i64)> = fetch_for(
        url,
        "SELECT order_id, COUNT(*) FROM charges WHERE account = $1 GROUP BY order_id",
        account,
    )
    .await?;
    let present: HashMap<String, i64> = per_order.into_iter().collect();
    let duplicates = present
        .values()
        .map(|n| usize::try_from(n - 1).unwrap_or(0))
        .sum();
    let lost = acked
        .keys()
        .filter(|n| !present.contains_key(&order_body(**n).order_id))
        .count();
    Ok(Counted {
        duplicates,
        lost,
        stuck: stuck(url, account).await?,
    })
}

/// `idem_key`, as text on every engine (MariaDB reports its byte-compared
/// column as binary).
fn key_column(url: &str) -> &'static str {
    if url.starts_with("mysql:") {
        "CONVERT(idem_key USING utf8mb4)"
    } else {
        "idem_key"
    }
}

/// Counts the payouts of `account`: acknowledged ones whose key has no
/// complete record.
pub(crate) async fn count_payouts(
    url: &str,
    account: &str,
    acked: &BTreeMap<usize, String>,
) -> anyhow::Result<Counted> {
    let complete: Vec<(String,)> = fetch_for(
        url,
        &format!(
            "SELECT {} FROM idem_keys WHERE scope = $1 AND state = 'complete'",
            key_column(url)
        ),
        account,
    )
    .await?;
    let complete: HashSet<String> = complete.into_iter().map(|(k,)| k).collect();
    Ok(Counted {
        duplicates: 0,
        lost: acked.values().filter(|k| !complete.contains(*k)).count(),
        stuck: stuck(url, account).await?,
    })
}

async fn stuck(url: &str, account: &str) -> anyhow::Result<usize> {
    let counted: Vec<(i64,)> = fetch_for(
        url,
        "SELECT COUNT(*) FROM idem_keys WHERE scope = $1 AND state = 'in_flight'",
        account,
    )
    .await?;
    Ok(counted
        .first()
        .map_or(0, |(n,)| usize::try_from(*n).unwrap_or(0)))
}
