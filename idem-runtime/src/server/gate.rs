//! One turn at a time per key inside this process.
//!
//! A duplicate that arrives while its original still holds an uncommitted
//! claim cannot see that claim. On PostgreSQL the database makes it wait on
//! the unique index (bounded by a transaction-local `lock_timeout`), but on
//! SQLite the pool has one connection and the duplicate would queue for it
//! behind the original for as long as the handler runs, with no way to tell
//! that wait from ordinary writer contention. Taking a per-key turn before
//! the pool turns that into a wait the protocol can see and bound: a
//! duplicate queues on the turn (cancel-safe, holding no connection), and
//! when the bound passes it answers as for an in-flight key. On PostgreSQL
//! it also keeps a retry storm on one key from occupying pool connections.
//!
//! The gate only sees this process; across processes (several nodes on
//! PostgreSQL) the lock timeout on the claim statement is what bounds the wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

type Id = (String, String);

/// The turns of every key in use in this process, shared by clones of a store.
#[derive(Debug, Default)]
pub(crate) struct KeyGate {
    keys: Mutex<HashMap<Id, Entry>>,
}

#[derive(Debug)]
struct Entry {
    turn: Arc<Semaphore>,
    /// Requests holding or waiting for the turn: the entry goes when none is left.
    users: usize,
}

/// A registered user of a key's entry; unregisters on drop, waiting or not.
#[derive(Debug)]
struct Registration {
    gate: Arc<KeyGate>,
    id: Id,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut keys = self
            .gate
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = keys.get_mut(&self.id) {
            entry.users = entry.users.saturating_sub(1);
            if entry.users == 0 {
                keys.remove(&self.id);
            }
        }
    }
}

/// This request's turn on its key: held until its transaction has ended.
#[derive(Debug)]
pub(crate) struct Turn {
    _permit: OwnedSemaphorePermit,
    _registration: Registration,
}

impl KeyGate {
    /// Waits up to `wait` for the key's turn; `None` when another request
    /// with the same key held it all that time.
    pub(crate) async fn take(
        self: &Arc<Self>,
        scope: &str,
        key: &str,
        wait: Duration,
    ) -> Option<Turn> {
        let id = (scope.to_owned(), key.to_owned());
        let turn = {
            let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = keys.entry(id.clone()).or_insert_with(|| Entry {
                turn: Arc::new(Semaphore::new(1)),
                users: 0,
            });
            entry.users += 1;
            Arc::clone(&entry.turn)
        };
        let registration = Registration {
            gate: Arc::clone(self),
            id,
        };
        // The semaphore is never closed, so an error cannot occur; treat it
        // like a busy key rather than unwrap.
        match tokio::time::timeout(wait, turn.acquire_owned()).await {
            Ok(Ok(permit)) => Some(Turn {
                _permit: permit,
                _registration: registration,
            }),
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// Whether a request in this process holds the key's turn right now: an
    /// uncommitted claim no database read can see yet.
    pub(crate) fn is_held(&self, scope: &str, key: &str) -> bool {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.get(&(scope.to_owned(), key.to_owned()))
            .is_some_and(|entry| entry.turn.available_permits() == 0)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_turn_per_key_and_nothing_left_behind() {
        let gate = Arc::new(KeyGate::default());
        assert!(!gate.is_held("a", "k"));
        let first = gate.take("a", "k", Duration::from_millis(1)).await;
        assert!(first.is_some());
        assert!(gate.is_held("a", "k") && !gate.is_held("b", "k"));
        // Same key: refused once the bound passes. Another key or scope: free.
        assert!(
            gate.take("a", "k", Duration::from_millis(20))
                .await
                .is_none()
        );
        assert!(
            gate.take("b", "k", Duration::from_millis(1))
                .await
                .is_some()
        );
        assert!(
            gate.take("a", "j", Duration::from_millis(1))
                .await
                .is_some()
        );
        let waiter = {
            let gate = Arc::clone(&gate);
            tokio::spawn(
                async move { gate.take("a", "k", Duration::from_secs(60)).await.is_some() },
            )
        };
        drop(first);
        assert!(
            waiter.await.unwrap_or(false),
            "the waiter gets the turn once it is free"
        );
        assert_eq!(gate.len(), 0);
    }
}
