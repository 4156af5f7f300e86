//! Seeing a COMMIT that PostgreSQL acknowledged without its synchronous
//! standby.
//!
//! When a backend waiting for its synchronous standby to confirm a commit
//! is cancelled (a cancel request, or a standby that Patroni or an
//! operator took out of `synchronous_standby_names` while the backend was
//! being cancelled), PostgreSQL stops waiting and answers the COMMIT as a
//! success, with a warning:
//!
//! ```text
//! WARNING:  canceling wait for synchronous replication due to user request
//! DETAIL:  The transaction has already committed locally, but might not have been replicated to the standby.
//! ```
//!
//! The commit is then visible on that server and may be missing from the
//! standby a failover promotes. A key record committed so must not answer
//! its caller: the request is answered as retryable instead, and the store
//! discards its connections (see [`Suspect`](super::primary::Suspect)).
//!
//! sqlx offers no hook for notices: it logs each through `tracing`, under
//! the target `sqlx::postgres::notice`, while it reads the COMMIT's reply.
//! So the COMMIT is polled with a dispatcher of the store's own as the
//! default ([`tracing::instrument::WithSubscriber`]), which records that
//! warning in a task-local flag and passes every event, span and filter
//! decision on to the dispatcher that was the default when the store first
//! committed, so the application's logging is unchanged.

use std::cell::Cell;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use tracing::instrument::WithSubscriber as _;
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber, span};

/// The target sqlx logs PostgreSQL's notices under.
const NOTICE_TARGET: &str = "sqlx::postgres::notice";

tokio::task_local! {
    /// Set while a watched COMMIT is polled: the warning seen, if any.
    static SEEN: Cell<Option<&'static str>>;
}

/// Which of PostgreSQL's messages for an abandoned synchronous-replication
/// wait `message` is, if any. Both come with the detail "The transaction
/// has already committed locally, but might not have been replicated to
/// the standby"; the second ends the connection too.
pub(crate) fn abandoned_wait(message: &str) -> Option<&'static str> {
    if !message.contains("synchronous replication") {
        return None;
    }
    if message.contains("terminating connection") {
        Some("canceling the wait for synchronous replication and terminating connection")
    } else if message.contains("cancel") {
        Some("canceling wait for synchronous replication")
    } else {
        None
    }
}

/// The dispatcher a store's COMMITs are polled under.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommitWatch(Arc<OnceLock<Dispatch>>);

impl CommitWatch {
    /// Runs `commit` under the watching dispatcher; returns its output and
    /// the warning PostgreSQL sent with it, if it abandoned a wait for
    /// synchronous replication.
    pub(crate) async fn run<F: Future>(&self, commit: F) -> (F::Output, Option<&'static str>) {
        let dispatch = self
            .0
            .get_or_init(|| {
                let inner = tracing::dispatcher::get_default(Dispatch::clone);
                Dispatch::new(Watch { inner })
            })
            .clone();
        SEEN.scope(Cell::new(None), async move {
            let out = commit.with_subscriber(dispatch).await;
            (out, SEEN.with(Cell::get))
        })
        .await
    }
}

/// Records the warning, and passes everything to `inner`.
struct Watch {
    inner: Dispatch,
}

fn is_notice(metadata: &Metadata<'_>) -> bool {
    metadata.target() == NOTICE_TARGET
}

/// Reads an event's `message` field.
struct Message(Option<&'static str>);

impl tracing::field::Visit for Message {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0 = abandoned_wait(value);
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = abandoned_wait(&format!("{value:?}"));
        }
    }
}

impl Subscriber for Watch {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if is_notice(metadata) {
            Interest::sometimes()
        } else {
            self.inner.register_callsite(metadata)
        }
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        // The warning's level; the application's dispatcher states its own.
        Some(tracing::level_filters::LevelFilter::WARN)
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        is_notice(metadata) || self.inner.enabled(metadata)
    }

    fn event(&self, event: &Event<'_>) {
        if is_notice(event.metadata()) {
            let mut message = Message(None);
            event.record(&mut message);
            if let Some(seen) = message.0 {
                let _ = SEEN.try_with(|cell| cell.set(Some(seen)));
            }
            if !self.inner.enabled(event.metadata()) {
                return;
            }
        }
        self.inner.event(event);
    }

    fn new_span(&self, span: &span::Attributes<'_>) -> span::Id {
        self.inner.new_span(span)
    }

    fn record(&self, span: &span::Id, values: &span::Record<'_>) {
        self.inner.record(span, values);
    }

    fn record_follows_from(&self, span: &span::Id, follows: &span::Id) {
        self.inner.record_follows_from(span, follows);
    }

    fn enter(&self, span: &span::Id) {
        self.inner.enter(span);
    }

    fn exit(&self, span: &span::Id) {
        self.inner.exit(span);
    }

    fn clone_span(&self, id: &span::Id) -> span::Id {
        self.inner.clone_span(id)
    }

    fn try_close(&self, id: span::Id) -> bool {
        self.inner.try_close(id)
    }

    fn current_span(&self) -> tracing_core::span::Current {
        self.inner.current_span()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_abandoned_waits_are_recognised_and_nothing_else() {
        assert!(
            abandoned_wait("canceling wait for synchronous replication due to user request")
                .is_some()
        );
        assert!(
            abandoned_wait(
                "canceling the wait for synchronous replication and terminating connection due \
                 to administrator command"
            )
            .is_some()
        );
        assert_eq!(abandoned_wait("there is no transaction in progress"), None);
        assert_eq!(
            abandoned_wait("synchronous replication is not configured"),
            None
        );
    }

    #[tokio::test]
    async fn a_warning_logged_while_a_commit_is_polled_is_seen_and_passed_on() {
        let watch = CommitWatch::default();
        let (out, seen) = watch
            .run(async {
                tracing::warn!(
                    target: "sqlx::postgres::notice",
                    message = "canceling wait for synchronous replication due to user request"
                );
                7
            })
            .await;
        assert_eq!(out, 7);
        assert!(seen.is_some());
        let (_, quiet) = watch
            .run(async {
                tracing::warn!(target: "sqlx::postgres::notice", message = "another notice");
            })
            .await;
        assert_eq!(quiet, None);
    }
}
