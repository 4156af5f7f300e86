//! `idem keys`: what happened to a key, read from a running deployment's
//! key store (SQLite or PostgreSQL), and the one write an operator makes:
//! an exhausted phased record made due again for the completer.
//!
//! Exit codes: 0 done; 1 no such record; 2 bad input, a database that
//! cannot be reached, or one whose key tables this idem does not know.

use std::io::Write;
use std::str::FromStr;
use std::time::Duration;

use idem_runtime::server::{
    Inspect, KeyState, ListFilter, Replication, Schema, Store, StoreError, credential_digest,
};
use idem_runtime::sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use idem_runtime::sqlx::{MySql, Postgres, Sqlite};

use super::shared::{EXIT_CLEAN, EXIT_ERROR};

mod patroni;
mod render;

/// How many scopes `show KEY` lists when several hold the key.
pub(crate) const SCOPES_LISTED: i64 = 20;

/// Exit code: the record asked for does not exist.
pub const EXIT_NOT_FOUND: i32 = 1;

/// The environment variable `--credential-from-env` reads the credential from.
pub const CREDENTIAL_ENV: &str = "IDEM_CREDENTIAL";
/// The environment variable holding the server's credential digest key.
pub const DIGEST_KEY_ENV: &str = "IDEM_CREDENTIAL_DIGEST_KEY";

#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    /// The key store: `sqlite://path/to/app.db` or `postgres://…`.
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        value_name = "URL",
        global = true
    )]
    pub database_url: Option<String>,
    #[arg(long, value_enum, default_value_t = KeysFormat::Human, global = true)]
    pub format: KeysFormat,
    /// The PostgreSQL URL names a pooler in transaction mode (PgBouncer's
    /// `pool_mode = transaction`): statements are unnamed, never cached.
    #[arg(long, global = true)]
    pub behind_pooler: bool,
    #[command(subcommand)]
    pub command: KeysCommand,
}

/// How `idem keys` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeysFormat {
    Human,
    Json,
}

#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Everything the store holds about one key: state, times, phase steps,
    /// the stored response, the completer's schedule, when it is reaped.
    /// Without a scope, finds the scopes that hold the key.
    Show {
        key: String,
        /// The caller's scope the key is stored under (an account id, or a
        /// credential digest `cred:…`).
        #[arg(long, conflicts_with = "credential_from_env")]
        scope: Option<String>,
        /// For `scope: credential`: digest the credential in IDEM_CREDENTIAL
        /// under the key in IDEM_CREDENTIAL_DIGEST_KEY (both read from the
        /// environment, never from arguments) with this security scheme's
        /// name, as the server does.
        #[arg(long, value_name = "SCHEME")]
        credential_from_env: Option<String>,
        /// Bytes of the stored response body shown before it is cut.
        #[arg(long, value_name = "BYTES", default_value_t = 4096)]
        body_limit: usize,
        /// The deployment's `reaper-after`, to say when the record goes.
        #[arg(long, value_name = "DURATION", default_value = "72h", value_parser = duration)]
        reaper_after: Duration,
    },
    /// The records an operator looks at, oldest first.
    List {
        #[arg(long, value_enum)]
        state: Option<StateArg>,
        /// Only records of this phased operation (its operationId).
        #[arg(long, value_name = "ID")]
        operation: Option<String>,
        /// Only records claimed longer ago than this (`30s`, `10m`, `2h`, `3d`).
        #[arg(long, value_name = "DURATION", value_parser = duration)]
        older_than: Option<Duration>,
        #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        limit: u32,
    },
    /// Counts by state and operation, the oldest record in flight, and what
    /// the next reaper pass deletes.
    Stats {
        /// The deployment's `reaper-after`.
        #[arg(long, value_name = "DURATION", default_value = "72h", value_parser = duration)]
        reaper_after: Duration,
        /// A Patroni member's REST API (`http://db1:8008`): names the
        /// member the store reads, its role, and the cluster's
        /// synchronous mode, from `GET /cluster` and `GET /config`.
        #[arg(long, value_name = "URL")]
        patroni: Option<String>,
    },
    /// Make an exhausted phased record due again: the completer resumes it
    /// from its recovery point (finished steps never run again), with a
    /// fresh resume schedule. Refused for a record in any other state.
    Resume {
        key: String,
        #[arg(long)]
        scope: String,
    },
}

/// A state, as the command line spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StateArg {
    InFlight,
    Complete,
    Exhausted,
}

impl From<StateArg> for KeyState {
    fn from(s: StateArg) -> Self {
        match s {
            StateArg::InFlight => KeyState::InFlight,
            StateArg::Complete => KeyState::Complete,
            StateArg::Exhausted => KeyState::Exhausted,
        }
    }
}

fn duration(text: &str) -> Result<Duration, String> {
    crate::vocab::parse_duration(text).ok_or_else(|| {
        format!("{text:?} is not a duration: write a number and a unit, such as 30s, 10m, 2h or 3d")
    })
}

/// A refusal to print on standard error, with its exit code.
struct Failure {
    code: i32,
    message: String,
}

impl Failure {
    fn input(message: impl Into<String>) -> Self {
        Failure {
            code: EXIT_ERROR,
            message: message.into(),
        }
    }

    fn store(e: StoreError) -> Self {
        Failure::input(format!("the key store failed: {e}"))
    }
}

/// What a command printed and how it ended.
pub(crate) struct Done {
    pub(crate) text: String,
    pub(crate) code: i32,
}

/// Runs `idem keys`; returns the exit code.
pub fn run(args: &KeysArgs, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = writeln!(stderr, "error: cannot start a runtime: {e}");
            return EXIT_ERROR;
        }
    };
    match runtime.block_on(dispatch(args)) {
        Ok(done) => {
            let _ = stdout.write_all(done.text.as_bytes());
            done.code
        }
        Err(failure) => {
            let _ = writeln!(stderr, "error: {}", failure.message);
            failure.code
        }
    }
}

async fn dispatch(args: &KeysArgs) -> Result<Done, Failure> {
    let Some(url) = args.database_url.as_deref().filter(|u| !u.is_empty()) else {
        return Err(Failure::input(
            "no key store named: pass --database-url URL or set DATABASE_URL",
        ));
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        // A host list (`postgres://db1,db2/app`) reaches its primary.
        let connected = if args.behind_pooler {
            Store::connect_postgres_pooled(url, 2).await
        } else {
            Store::connect_postgres(url, 2).await
        };
        let store = connected.map_err(|e| match e {
            StoreError::Database(idem_runtime::sqlx::Error::Configuration(_)) => Failure::input(
                format!("{} is not a usable PostgreSQL URL: {e}", redact(url)),
            ),
            e => Failure::input(format!("cannot reach {}: {e}", redact(url))),
        })?;
        on::<Postgres>(store, url, args).await
    } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        let url = url.replacen("mariadb://", "mysql://", 1);
        let store = Store::connect_mysql(&url, 2)
            .await
            .map_err(|e| Failure::input(format!("cannot reach {}: {e}", redact(&url))))?;
        on::<MySql>(store, &url, args).await
    } else if url.starts_with("sqlite:") {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| Failure::input(format!("{url} is not an SQLite URL: {e}")))?
            // An operator's typo must not leave an empty database behind.
            .create_if_missing(false)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(|e| Failure::input(format!("cannot open {url}: {e}")))?;
        on::<Sqlite>(Store::new(pool), url, args).await
    } else {
        Err(Failure::input(format!(
            "{} is not a key store URL: it starts with sqlite:, postgres:// or mysql://",
            redact(url)
        )))
    }
}

/// The URL with its password, if any, replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

async fn on<DB: Inspect>(store: Store<DB>, url: &str, args: &KeysArgs) -> Result<Done, Failure> {
    match DB::schema(&store).await.map_err(Failure::store)? {
        Schema::Missing => {
            return Err(Failure::input(format!(
                "{} holds no idem key tables (idem_keys, idem_schema_migrations): is it the \
                 service's database, and has a server of it started once?",
                redact(url)
            )));
        }
        Schema::Version { found, known } if found > known => {
            return Err(Failure::input(format!(
                "the key tables are at schema version {found}, newer than this idem knows \
                 ({known}): use the idem of the version the servers run"
            )));
        }
        Schema::Version { found, known } if found < known => {
            return Err(Failure::input(format!(
                "the key tables are at schema version {found}, older than this idem's \
                 ({known}): start a server of this version once (it migrates), or use the idem \
                 the servers run"
            )));
        }
        Schema::Version { .. } => {}
    }
    let json = args.format == KeysFormat::Json;
    match &args.command {
        KeysCommand::Show {
            key,
            scope,
            credential_from_env,
            body_limit,
            reaper_after,
        } => {
            let scope = match (scope, credential_from_env) {
                (Some(scope), _) => Some(scope.clone()),
                (None, Some(scheme)) => Some(credential_scope(scheme)?),
                (None, None) => None,
            };
            let view = render::ShowView {
                body_limit: *body_limit,
                reaper_after: *reaper_after,
                json,
            };
            show(&store, key, scope.as_deref(), &view).await
        }
        KeysCommand::List {
            state,
            operation,
            older_than,
            limit,
        } => {
            let now = idem_runtime::chrono::Utc::now().timestamp_millis();
            let filter = ListFilter {
                state: state.map(KeyState::from),
                operation: operation.clone(),
                claimed_before: older_than.map(|d| now - millis(d)),
                limit: i64::from(*limit),
            };
            let records = DB::list(&store, &filter).await.map_err(Failure::store)?;
            Ok(Done {
                text: render::list(&records, now, json),
                code: EXIT_CLEAN,
            })
        }
        KeysCommand::Stats {
            reaper_after,
            patroni,
        } => {
            let now = idem_runtime::chrono::Utc::now().timestamp_millis();
            let stats = DB::stats(&store, now - millis(*reaper_after))
                .await
                .map_err(Failure::store)?;
            let replication = replication::<DB>(&store).await?;
            let member = match patroni {
                Some(url) => Some(
                    patroni::member(url, replication.as_ref().and_then(|r| r.server.as_deref()))
                        .await,
                ),
                None => None,
            };
            Ok(Done {
                text: render::stats(
                    &stats,
                    replication.as_ref(),
                    member.as_ref(),
                    now,
                    *reaper_after,
                    json,
                ),
                code: EXIT_CLEAN,
            })
        }
        KeysCommand::Resume { key, scope } => resume(&store, key, scope, json).await,
    }
}

/// How the store's primary replicates (`None` on SQLite).
async fn replication<DB: Inspect>(store: &Store<DB>) -> Result<Option<Replication>, Failure> {
    let mut tx = store
        .pool()
        .begin()
        .await
        .map_err(|e| Failure::store(e.into()))?;
    let replication = DB::replication(&mut tx, store.settings())
        .await
        .map_err(Failure::store)?;
    tx.commit().await.map_err(|e| Failure::store(e.into()))?;
    Ok(replication)
}

/// `d` in milliseconds, as the key store keeps times.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The scope of a credential-scoped key, from the environment only.
fn credential_scope(scheme: &str) -> Result<String, Failure> {
    let read = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Failure::input(format!(
                    "--credential-from-env reads {name} from the environment, and it is not set"
                ))
            })
    };
    let credential = read(CREDENTIAL_ENV)?;
    let digest_key = read(DIGEST_KEY_ENV)?;
    Ok(credential_digest(
        digest_key.as_bytes(),
        &[(scheme, credential.as_bytes())],
    ))
}

async fn show<DB: Inspect>(
    store: &Store<DB>,
    key: &str,
    scope: Option<&str>,
    view: &render::ShowView,
) -> Result<Done, Failure> {
    let scope = match scope {
        Some(scope) => scope.to_owned(),
        None => {
            let scopes = DB::scopes_holding(store, key, SCOPES_LISTED + 1)
                .await
                .map_err(Failure::store)?;
            match scopes.as_slice() {
                [] => return Ok(render::not_found(key, None, view.json)),
                [only] => only.clone(),
                many => return Ok(render::scopes(key, many, view.json)),
            }
        }
    };
    let Some(found) = DB::inspect(store, &scope, key)
        .await
        .map_err(Failure::store)?
    else {
        return Ok(render::not_found(key, Some(&scope), view.json));
    };
    let now = idem_runtime::chrono::Utc::now().timestamp_millis();
    Ok(Done {
        text: render::show(&found, now, view),
        code: EXIT_CLEAN,
    })
}

async fn resume<DB: Inspect>(
    store: &Store<DB>,
    key: &str,
    scope: &str,
    json: bool,
) -> Result<Done, Failure> {
    let Some(before) = DB::inspect(store, scope, key)
        .await
        .map_err(Failure::store)?
    else {
        return Ok(render::not_found(key, Some(scope), json));
    };
    let record = &before.record;
    if record.state != KeyState::Exhausted || record.operation.is_none() {
        let what = match (record.state, &record.operation) {
            (KeyState::Exhausted, None) => "exhausted without an operation".to_owned(),
            (state, _) => state.as_str().replace('_', "-"),
        };
        return Err(Failure::input(format!(
            "{key} under {scope} is {what}: only an exhausted phased record can be resumed; \
             nothing was changed"
        )));
    }
    let now = idem_runtime::chrono::Utc::now().timestamp_millis();
    if !DB::resume(store, scope, key, now)
        .await
        .map_err(Failure::store)?
    {
        return Err(Failure::input(format!(
            "{key} under {scope} changed while it was read (another resume, or the reaper); \
             nothing was changed: run `idem keys show` again"
        )));
    }
    Ok(Done {
        text: render::resumed(&before, now, json),
        code: EXIT_CLEAN,
    })
}
