//! The two background jobs: the completer pushes abandoned phased requests
//! to completion, each when its backoff makes it due, until its schedule
//! runs out; the reaper deletes records past `reaper-after` and reports what
//! never finished.

use std::time::Duration;

use tokio::task::JoinHandle;

use super::clock::{ms, now_ms};
use super::engine::Idempotency;
use super::phased::RunEnd;
use super::store::StoreError;
use super::store::{Backend, ExhaustedRecord, KeyState, ReapedRecord, Replication, WatchedCounts};
use crate::metric;

/// How often the background jobs count the records in flight and
/// exhausted (`idem_records`): a read of every open record (phased, not yet
/// complete) through their index, so not every pass.
pub const RECORDS_EVERY: Duration = Duration::from_secs(30);

/// What one completer pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompleterReport {
    /// Abandoned records found.
    pub found: usize,
    /// Records driven to a stored response.
    pub completed: usize,
    /// Records left in flight (taken by someone else, still failing, or of
    /// an operation this process does not register).
    pub left: usize,
}

/// What one reaper pass did.
#[derive(Debug, Clone, Default)]
pub struct ReaperReport {
    /// Records deleted.
    pub deleted: usize,
    /// Deleted records that never completed; each was logged at `error`.
    pub unfinished: Vec<ReapedRecord>,
}

/// The most records a second a reaper pass deletes: a pass after an
/// outage or a deploy, with millions of records behind it, takes a small
/// and steady share of the store from the requests beside it: a batch of
/// 1,000 every 0.4 s on PostgreSQL, of 500 every 0.2 s on MariaDB, of 200
/// every 0.08 s on SQLite. A store that claims keys all day faster than
/// this would outgrow its reaper.
pub const REAPER_RATE: u32 = 2_500;

/// Counts one reaper batch in `idem_reaped_total`, by state.
fn count_reaped(deleted: &[ReapedRecord]) {
    let complete = deleted
        .iter()
        .filter(|r| r.state == KeyState::Complete)
        .count();
    for (state, count) in [
        ("complete", complete),
        ("incomplete", deleted.len() - complete),
    ] {
        if count > 0 {
            metrics::counter!(metric::REAPED_TOTAL, "state" => state)
                .increment(u64::try_from(count).unwrap_or(u64::MAX));
        }
    }
}

impl<DB: Backend> Idempotency<DB> {
    /// One completer pass: takes over up to `limit` in-flight phased records
    /// whose lock is older than `lock-timeout` and whose next run is due, and
    /// resumes each at its recovery point. A record is taken by one
    /// conditional `UPDATE`, so several processes sharing the store never run
    /// it twice for one due time; a run that fails schedules the next
    /// ([`ResumePolicy`](super::ResumePolicy)) or ends it `exhausted`.
    pub async fn complete_abandoned(&self, limit: usize) -> Result<CompleterReport, StoreError> {
        // Every policy sharing the store: its shortest lock timeout finds the
        // candidates, and each is taken over under its own operation's.
        let now = now_ms();
        let cutoff = now.saturating_sub(ms(self.horizons().0));
        let candidates = {
            let mut conn = self.store().pool().begin().await?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            DB::abandoned(&mut conn, self.store().settings(), cutoff, now, limit).await?
        };
        let mut report = CompleterReport {
            found: candidates.len(),
            ..CompleterReport::default()
        };
        for (scope, key) in candidates {
            let resumed = self.resume_abandoned(&scope, &key).await;
            if let Ok(Some((ended, operation))) = &resumed
                && let Some(outcome) = ended.label()
            {
                metrics::counter!(
                    metric::COMPLETER_RUNS_TOTAL,
                    "operation" => operation.clone(),
                    "outcome" => outcome,
                )
                .increment(1);
            }
            match resumed {
                Ok(Some((RunEnd::Completed | RunEnd::Final, _))) => {
                    tracing::info!(%scope, %key, "completer finished an abandoned request");
                    report.completed += 1;
                }
                Ok(_) => report.left += 1,
                Err(e) => {
                    tracing::warn!(%scope, %key, error = %e, "completer could not resume a request");
                    report.left += 1;
                }
            }
        }
        Ok(report)
    }

    /// One reaper pass: deletes every record claimed more than `reaper-after`
    /// ago, and logs at `error` each one that never completed, for a human
    /// to follow up.
    ///
    /// It deletes in batches of [`Backend::REAP_BATCH`] records, the oldest first,
    /// each in a transaction of its own: no batch holds its locks for longer
    /// than it takes to delete that many rows, and no more than a batch is
    /// read into the process at once. Between batches it rests, so that it
    /// deletes at most [`REAPER_RATE`] records a second, and at least as
    /// long as the batch took, so a slow store gives it at most half of one
    /// connection's time.
    pub async fn reap(&self) -> Result<ReaperReport, StoreError> {
        // The longest horizon of every policy sharing the store, so no
        // record goes before its own operation's `reaper-after`.
        let cutoff = now_ms().saturating_sub(ms(self.horizons().1));
        let mut report = ReaperReport::default();
        let mut from = 0;
        loop {
            let batch_started = std::time::Instant::now();
            let mut tx = self.store().pool().begin().await?;
            let deleted = DB::reap(
                &mut tx,
                self.store().settings(),
                from,
                cutoff,
                DB::REAP_BATCH,
            )
            .await?;
            tx.commit().await?;
            from = deleted.iter().map(|r| r.created_at).max().unwrap_or(from);
            let full = deleted.len() >= usize::try_from(DB::REAP_BATCH).unwrap_or(usize::MAX);
            report.deleted += deleted.len();
            count_reaped(&deleted);
            for record in deleted {
                if record.state != KeyState::Complete {
                    tracing::error!(
                        scope = %record.scope,
                        key = %record.key,
                        operation = record.operation.as_deref().unwrap_or("-"),
                        recovery_point = %record.recovery_point,
                        "reaper deleted a request that never completed; its effects stop at this recovery point"
                    );
                    report.unfinished.push(record);
                }
            }
            if !full {
                return Ok(report);
            }
            let took = batch_started.elapsed();
            let paced = Duration::from_secs_f64(DB::REAP_BATCH as f64 / f64::from(REAPER_RATE));
            tokio::time::sleep(paced.saturating_sub(took).max(took)).await;
        }
    }

    /// How many records are in the terminal state `exhausted`: requests whose
    /// foreign calls kept failing until their resume schedule ran out. Each
    /// was logged at `error` when it got there; alert on a count above zero.
    /// (A read of every open record through their index: poll it every
    /// minute or so, not per request.)
    pub async fn count_exhausted(&self) -> Result<u64, StoreError> {
        let mut conn = self.store().pool().begin().await?;
        let count = DB::count_exhausted(&mut conn, self.store().settings()).await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Counts the records in flight, exhausted and stale (in flight past
    /// the shortest `lock-timeout` with their next run due: what the
    /// completer should have taken), and sets the `idem_records{state}`
    /// gauges to them. The background jobs call it on their first pass and
    /// then at most every [`RECORDS_EVERY`]; it scans the key table.
    pub async fn refresh_record_gauges(&self) -> Result<WatchedCounts, StoreError> {
        let now = now_ms();
        let cutoff = now.saturating_sub(ms(self.horizons().0));
        let mut conn = self.store().pool().begin().await?;
        let counts = DB::count_watched(&mut conn, self.store().settings(), cutoff, now).await?;
        for (state, count) in [
            ("in_flight", counts.in_flight),
            ("exhausted", counts.exhausted),
            ("stale", counts.stale),
        ] {
            #[allow(clippy::cast_precision_loss, reason = "a gauge is an f64")]
            metrics::gauge!(metric::RECORDS, "state" => state).set(count as f64);
        }
        Ok(counts)
    }

    /// Asks the primary how it replicates, sets
    /// `idem_store_standbys_at_risk`, and logs a warning when a failover
    /// could lose acknowledged commits ([`Replication::warning`]): once,
    /// and again only when what it says changes. The background jobs call
    /// it on their first pass and then every [`RECORDS_EVERY`]. `None` on
    /// SQLite.
    pub async fn check_replication(&self) -> Result<Option<Replication>, StoreError> {
        let mut conn = self.store().pool().begin().await?;
        let replication = DB::replication(&mut conn, self.store().settings()).await?;
        conn.commit().await?;
        let at_risk = replication.as_ref().map_or(0, |r| r.at_risk().len());
        #[allow(clippy::cast_precision_loss, reason = "a gauge is an f64")]
        metrics::gauge!(metric::STORE_STANDBYS_AT_RISK).set(at_risk as f64);
        let warning = replication.as_ref().and_then(Replication::warning);
        let mut warned = self
            .inner
            .shared
            .replication_warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *warned != warning {
            match &warning {
                Some(text) => tracing::warn!("{text}"),
                None => tracing::info!("the key store's standbys are all synchronous now"),
            }
            *warned = warning;
        }
        Ok(replication)
    }

    /// Up to `limit` exhausted records, oldest first: what an operator
    /// settles, each with the recovery point its effects stop at.
    pub async fn exhausted(&self, limit: usize) -> Result<Vec<ExhaustedRecord>, StoreError> {
        let mut conn = self.store().pool().begin().await?;
        DB::exhausted(
            &mut conn,
            self.store().settings(),
            i64::try_from(limit).unwrap_or(i64::MAX),
        )
        .await
    }

    /// Runs the completer and the reaper every `every` until the handle is
    /// aborted (or dropped with the runtime). The reaper keeps its own
    /// time: a long pass (millions of records after an outage, at
    /// [`REAPER_RATE`]) never holds up the completer or the gauges.
    pub fn spawn_background_jobs(&self, every: Duration) -> JoinHandle<()> {
        let idem = self.clone();
        let reaper = self.clone();
        let reaping = async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = reaper.reap().await {
                    tracing::warn!(error = %e, "reaper pass failed");
                }
            }
        };
        let completing = async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut counted: Option<tokio::time::Instant> = None;
            loop {
                tick.tick().await;
                if counted.is_none_or(|at| at.elapsed() >= RECORDS_EVERY) {
                    counted = Some(tokio::time::Instant::now());
                    if let Err(e) = idem.refresh_record_gauges().await {
                        tracing::warn!(error = %e, "could not count the key records");
                    }
                    if let Err(e) = idem.check_replication().await {
                        tracing::debug!(error = %e, "could not read the primary's replication");
                    }
                }
                if let Err(e) = idem.complete_abandoned(100).await {
                    tracing::warn!(error = %e, "completer pass failed");
                }
            }
        };
        tokio::spawn(async move {
            tokio::join!(completing, reaping);
        })
    }
}
