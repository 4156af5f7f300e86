//! Building an [`Idempotency`]: its store, scope source and policy.

use super::*;

impl<DB: Backend> Idempotency<DB> {
    /// Starts a builder over `store`.
    pub fn builder(store: Store<DB>) -> IdempotencyBuilder<DB> {
        IdempotencyBuilder {
            store,
            policy: Policy::default(),
            scope: None,
            resume: None,
            credential_key: None,
        }
    }
}

/// Builds an [`Idempotency`]; a scope source is mandatory: an extractor of
/// the caller ([`IdempotencyBuilder::scope`]), or, for operations scoped by
/// credential, the key their credentials are digested with
/// ([`IdempotencyBuilder::credential_digest_key`]).
pub struct IdempotencyBuilder<DB: Backend> {
    pub(super) store: Store<DB>,
    pub(super) policy: Policy,
    pub(super) scope: Option<Arc<dyn ScopeExtractor>>,
    pub(super) resume: Option<ResumePolicy>,
    pub(super) credential_key: Option<Arc<[u8]>>,
}

impl<DB: Backend> std::fmt::Debug for IdempotencyBuilder<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyBuilder")
            .field("policy", &self.policy)
            .field("scope_configured", &self.scope.is_some())
            .finish_non_exhaustive()
    }
}

impl<DB: Backend> IdempotencyBuilder<DB> {
    /// Sets the policy (defaults to [`Policy::new`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets where the scope comes from: the authenticated caller.
    pub fn scope(mut self, extractor: impl ScopeExtractor) -> Self {
        self.scope = Some(Arc::new(extractor));
        self
    }

    /// The secret that credential-scoped operations
    /// (`x-idempotency.scope: credential`) digest the caller's credential
    /// with (HMAC-SHA-256): the key table stores the digest, never the
    /// token. At least 32 bytes, from your secret store, the same on every
    /// replica and across restarts: a new key is a new scope for every
    /// caller.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_runtime::server::{Idempotency, Store};
    /// let secret = std::env::var("IDEM_SCOPE_KEY")?; // 32 bytes or more
    /// let store = Store::open_sqlite("sqlite::memory:").await?;
    /// let idem = Idempotency::builder(store).credential_digest_key(secret).build()?;
    /// # Ok(()) }
    /// ```
    pub fn credential_digest_key(mut self, key: impl AsRef<[u8]>) -> Self {
        self.credential_key = Some(Arc::from(key.as_ref()));
        self
    }

    /// Opts in to one scope for every caller: any caller who guesses another's
    /// key receives that caller's stored response. Only for single-tenant
    /// services; the audit's `global-key-scope` rule flags it in a spec.
    pub fn global_scope_shared_by_all_callers(mut self) -> Self {
        tracing::warn!(
            "idempotency keys are scoped globally: callers can collide and read each other's responses"
        );
        self.scope = Some(Arc::new(GlobalScope));
        self
    }

    /// Resumes phased requests on `schedule` in every policy derived from
    /// this one ([`Idempotency::with_policy`]), in place of what each policy
    /// (and so the spec's `x-idempotency.resume`) says. For a deployment
    /// that must differ from the published contract, such as a staging
    /// system or a test that cannot wait out minutes of backoff.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use idem_runtime::server::{HeaderScope, Idempotency, ResumePolicy, Store};
    /// let store = Store::open_sqlite("sqlite::memory:").await?;
    /// let idem = Idempotency::builder(store)
    ///     .scope(HeaderScope::new("x-account-id"))
    ///     .resume_override(ResumePolicy { base: Duration::from_millis(50), ..ResumePolicy::default() })
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn resume_override(mut self, schedule: ResumePolicy) -> Self {
        self.resume = Some(schedule);
        self
    }

    /// Checks the configuration.
    pub fn build(mut self) -> Result<Idempotency<DB>, ConfigError> {
        if let Some(key) = &self.credential_key
            && key.len() < MIN_DIGEST_KEY
        {
            return Err(ConfigError::DigestKeyTooShort {
                len: key.len(),
                min: MIN_DIGEST_KEY,
            });
        }
        if self.scope.is_none() && self.credential_key.is_none() {
            return Err(ConfigError::MissingScope);
        }
        let scope = self.scope;
        if let Some(schedule) = self.resume {
            self.policy = self.policy.resume(schedule);
        }
        let validated = self.policy.validate()?;
        super::fits_columns::<DB>(&self.policy)?;
        Ok(Idempotency {
            inner: Arc::new(Inner {
                store: self.store,
                header: validated.header,
                replay_headers: validated.replay_headers,
                scope,
                shared: Arc::new(Shared {
                    operations: RwLock::new(HashMap::new()),
                    horizons: RwLock::new(vec![(
                        self.policy.lock_timeout,
                        self.policy.reaper_after,
                    )]),
                    resume: self.resume,
                    credential_key: self.credential_key,
                    replication_warned: std::sync::Mutex::new(None),
                }),
                policy: self.policy,
            }),
        })
    }
}
