//! The PostgreSQL backend.
//!
//! # Execution model
//!
//! The store's API is synchronous (the host calls it from async handlers and
//! from threads alike). The sync `postgres` crate cannot serve that: each
//! call starts a runtime and panics inside the host's tokio runtime. So the
//! store owns a small tokio runtime (2 threads) whose only tasks are the
//! tokio-postgres connections (socket I/O) and the `LISTEN` loop; a call
//! takes a connection from a small pool and waits for the client future
//! with `futures_executor::block_on` on the caller's thread. Client futures
//! only exchange messages with their connection task, so this works from any
//! thread, inside a tokio runtime or not, and blocks exactly like a SQLite
//! call does (use `spawn_blocking` from async code on hot paths).
//!
//! # Liveness of owners
//!
//! Each open store holds a dedicated connection with a session advisory
//! lock on a random 64-bit key; runs it starts record `pgo_<key in hex>` as
//! their owner. The server drops the lock when that connection ends, however
//! the process died, so `mark_interrupted_runs` asks "can I take the owner's
//! lock?" exactly as the SQLite backend does with file locks.
//!
//! # Migrations
//!
//! `migrations/postgres/NNNN_*.sql`, compiled in. Applied at open in one
//! transaction under a transaction advisory lock (concurrent opens queue),
//! recorded in `capstan_schema`. A database with a newer version is refused
//! ([`StoreError::SchemaTooNew`]); one with tables but no `capstan_schema`
//! is someone else's ([`StoreError::ForeignDatabase`]).

mod endpoint;
mod queries;

use endpoint::Endpoint;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_postgres::{Client, Statement};

use crate::error::{Result, StoreError};
use crate::notify::Notifier;

/// The migrations, in order: migration `n` (1-based) takes the database from
/// version `n - 1` to `n`.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/postgres/0001_init.sql"),
    include_str!("../../migrations/postgres/0002_run_requests.sql"),
    include_str!("../../migrations/postgres/0003_approved_always.sql"),
    include_str!("../../migrations/postgres/0004_run_user.sql"),
    include_str!("../../migrations/postgres/0005_run_start_order.sql"),
    include_str!("../../migrations/postgres/0006_run_checkpoint.sql"),
    include_str!("../../migrations/postgres/0007_approval_grant.sql"),
];

/// The PostgreSQL schema version this build reads and writes.
pub const PG_SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Advisory lock key serialising migrations (`"Cpst"` twice).
const MIGRATION_LOCK: i64 = 0x4370_7374_4370_7374;

/// Idle connections kept for reuse; more are opened under load and closed
/// when returned to a full pool.
const MAX_IDLE: usize = 8;

pub(crate) struct PgStore {
    /// The URL without its password, as errors name it.
    url: String,
    path: PathBuf,
    endpoint: Endpoint,
    rt: RuntimeGuard,
    idle: Mutex<Vec<Pooled>>,
    owner_id: String,
    /// Holds the owner's advisory lock for as long as the store is open.
    _owner: Client,
    /// Bumped by the `LISTEN` task (see [`listen`]).
    notifier: Arc<Notifier>,
}

/// The store's runtime. Dropping a runtime blocks, which panics inside an
/// async context (the host may drop the last `Arc<Store>`, or fail to open
/// one, inside a task): shut it down in the background instead. Its tasks
/// (the connections) end with it.
struct RuntimeGuard(Option<tokio::runtime::Runtime>);

#[allow(
    clippy::expect_used,
    reason = "the Option is only taken in Drop: present whenever this runs"
)]
impl RuntimeGuard {
    fn get(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("present until drop")
    }
}

impl Drop for RuntimeGuard {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.url)
            .field("owner_id", &self.owner_id)
            .finish_non_exhaustive()
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// A tokio-postgres error in words: the server's message and detail for
/// database errors (whose `Display` is only "db error").
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{} ({})", db.message(), db.code().code());
        if let Some(d) = db.detail() {
            s.push_str(": ");
            s.push_str(d);
        }
        return s;
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// Waits for a future on this thread (see the module docs).
pub(crate) fn wait<F: Future>(f: F) -> F::Output {
    futures_executor::block_on(f)
}

/// A connection in the pool, with the statements prepared on it (the hot
/// paths: one round trip per statement instead of parse-then-execute).
pub(crate) struct Pooled {
    client: Client,
    statements: HashMap<&'static str, Statement>,
}

/// A pooled connection; returned to the pool on drop unless it is closed.
pub(crate) struct Conn<'a> {
    store: &'a PgStore,
    client: Option<Pooled>,
}

#[allow(
    clippy::expect_used,
    reason = "the Option is only taken in Drop: present whenever this runs"
)]
impl Conn<'_> {
    /// `sql` prepared on this connection, once per connection.
    pub(crate) async fn statement(&mut self, sql: &'static str) -> Result<Statement> {
        let pooled = self.client.as_mut().expect("present until drop");
        if let Some(s) = pooled.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = pooled
            .client
            .prepare(sql)
            .await
            .map_err(|e| self.store.err(e))?;
        pooled.statements.insert(sql, s.clone());
        Ok(s)
    }
}

#[allow(
    clippy::expect_used,
    reason = "the Option is only taken in Drop: present whenever this runs"
)]
impl std::ops::Deref for Conn<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client.as_ref().expect("present until drop").client
    }
}

#[allow(
    clippy::expect_used,
    reason = "the Option is only taken in Drop: present whenever this runs"
)]
impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client.as_mut().expect("present until drop").client
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.client.take()
            && !c.client.is_closed()
        {
            let mut idle = self
                .store
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if idle.len() < MAX_IDLE {
                idle.push(c);
            }
        }
    }
}

impl PgStore {
    pub(crate) fn open(url: &str) -> Result<PgStore> {
        let shown = redact(url);
        let endpoint = Endpoint::parse(url, &shown)?;
        let rt = RuntimeGuard(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("capstan-pg")
                .enable_all()
                .build()
                .map_err(|e| StoreError::Open {
                    path: PathBuf::from(&shown),
                    reason: format!("cannot start the PostgreSQL client runtime: {e}"),
                })?,
        ));
        let notifier = Arc::new(Notifier::default());
        let first = connect(rt.get(), &endpoint, &shown)?;
        let owner = connect(rt.get(), &endpoint, &shown)?;
        let mut store = PgStore {
            path: PathBuf::from(&shown),
            url: shown,
            endpoint,
            rt,
            idle: Mutex::new(vec![Pooled {
                client: first,
                statements: HashMap::new(),
            }]),
            owner_id: String::new(),
            _owner: owner,
            notifier,
        };
        store.migrate()?;
        listen(&store.rt, &store.endpoint, &store.notifier).map_err(|detail| StoreError::Open {
            path: store.path.clone(),
            reason: format!("cannot LISTEN for new events: {detail}"),
        })?;
        let key = fastrand::i64(..);
        wait(store._owner.execute("SELECT pg_advisory_lock($1)", &[&key]))
            .map_err(|e| store.err(e))?;
        store.owner_id = owner_id(key);
        Ok(store)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn owner_id(&self) -> &str {
        &self.owner_id
    }

    pub(crate) fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// Maps a PostgreSQL error to a [`StoreError`] naming this database.
    pub(crate) fn err(&self, e: tokio_postgres::Error) -> StoreError {
        StoreError::Postgres {
            url: self.url.clone(),
            detail: describe(&e),
        }
    }

    /// A connection from the pool, or a new one.
    pub(crate) fn conn(&self) -> Result<Conn<'_>> {
        let reused = loop {
            let next = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match next {
                Some(c) if c.client.is_closed() => continue,
                other => break other,
            }
        };
        let client = match reused {
            Some(c) => c,
            None => Pooled {
                client: connect(self.rt.get(), &self.endpoint, &self.url)?,
                statements: HashMap::new(),
            },
        };
        Ok(Conn {
            store: self,
            client: Some(client),
        })
    }

    fn migrate(&self) -> Result<()> {
        let mut conn = self.conn()?;
        let fail = |e: tokio_postgres::Error, version: u32, previous: u32| StoreError::Postgres {
            url: self.url.clone(),
            detail: format!(
                "cannot migrate to schema v{version}: {}; the database was left at v{previous}",
                describe(&e)
            ),
        };
        wait(async {
            let tx = conn.transaction().await.map_err(|e| self.err(e))?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await
                .map_err(|e| self.err(e))?;
            let marked: bool = tx
                .query_one("SELECT to_regclass('capstan_schema') IS NOT NULL", &[])
                .await
                .map_err(|e| self.err(e))?
                .get(0);
            let current: u32 = if marked {
                let v: i32 = tx
                    .query_one("SELECT COALESCE(MAX(version), 0) FROM capstan_schema", &[])
                    .await
                    .map_err(|e| self.err(e))?
                    .get(0);
                u32::try_from(v).unwrap_or(0)
            } else {
                let tables: i64 = tx
                    .query_one(
                        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
                        &[],
                    )
                    .await
                    .map_err(|e| self.err(e))?
                    .get(0);
                if tables > 0 {
                    return Err(StoreError::ForeignDatabase {
                        path: self.path.clone(),
                        detail: format!(
                            "its schema has {tables} tables and no capstan_schema table"
                        ),
                    });
                }
                tx.batch_execute(
                    "CREATE TABLE capstan_schema (
                         version    INTEGER PRIMARY KEY,
                         applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                )
                .await
                .map_err(|e| fail(e, 1, 0))?;
                0
            };
            if current > PG_SCHEMA_VERSION {
                return Err(StoreError::SchemaTooNew {
                    path: self.path.clone(),
                    found: current,
                    supported: PG_SCHEMA_VERSION,
                });
            }
            for version in current + 1..=PG_SCHEMA_VERSION {
                tx.batch_execute(MIGRATIONS[version as usize - 1])
                    .await
                    .map_err(|e| fail(e, version, current))?;
                tx.execute(
                    "INSERT INTO capstan_schema (version) VALUES ($1)",
                    &[&(version as i32)],
                )
                .await
                .map_err(|e| fail(e, version, current))?;
            }
            tx.commit()
                .await
                .map_err(|e| fail(e, PG_SCHEMA_VERSION, current))
        })
    }

    /// Whether the store that recorded `owner` is still open somewhere.
    /// Unreadable owner ids count as dead (they cannot hold a lock); errors
    /// count as alive (wrongly interrupting a live run is the worse mistake).
    pub(crate) fn is_alive(&self, owner: &str) -> bool {
        let Some(key) = owner
            .strip_prefix("pgo_")
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        else {
            return false;
        };
        let key = key as i64;
        let Ok(conn) = self.conn() else {
            return true;
        };
        wait(async {
            match conn
                .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
                .await
            {
                Ok(row) if row.get::<_, bool>(0) => {
                    let _ = conn.execute("SELECT pg_advisory_unlock($1)", &[&key]).await;
                    false
                }
                _ => true,
            }
        })
    }
}

impl Drop for PgStore {
    /// Releases the owner lock before returning, so a neighbour asking right
    /// after sees this store gone (closing the connection releases it too,
    /// but the server notices that a moment later). The runtime and the
    /// connections go with the fields.
    fn drop(&mut self) {
        let _ = wait(self._owner.batch_execute("SELECT pg_advisory_unlock_all()"));
    }
}

fn owner_id(key: i64) -> String {
    format!("pgo_{:016x}", key as u64)
}

/// Opens a connection whose I/O runs as a task on `rt`.
fn connect(rt: &tokio::runtime::Runtime, endpoint: &Endpoint, url: &str) -> Result<Client> {
    let endpoint = endpoint.clone();
    let task = rt.spawn(async move { endpoint.connect(None).await.map(|(client, _)| client) });
    match wait(task) {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(StoreError::Open {
            path: PathBuf::from(url),
            reason: format!(
                "cannot connect to PostgreSQL: {}; check that the server runs there and the \
                 URL's host, port, user, password and database{}",
                describe(&e),
                if tls_failure(&e) {
                    ", and for TLS that the server's certificate names that host and chains to \
                     the CA in sslrootcert (or a system CA)"
                } else {
                    ""
                }
            ),
        }),
        Err(e) => Err(StoreError::Open {
            path: PathBuf::from(url),
            reason: format!("the connection task failed: {e}"),
        }),
    }
}

/// Whether a connection error came from the TLS handshake.
fn tls_failure(e: &tokio_postgres::Error) -> bool {
    let text = format!("{e:?}").to_ascii_lowercase();
    text.contains("certificate") || text.contains("tls") || text.contains("ssl")
}

/// How long the `LISTEN` task waits before reconnecting after losing its
/// connection (a server restart, a network cut).
const LISTEN_RETRY: Duration = Duration::from_secs(1);

/// Starts the task that holds a `LISTEN capstan_events` connection and
/// bumps `notifier` on every notification, reconnecting (and bumping once,
/// for what it may have missed) whenever the connection is lost. Returns
/// once the first `LISTEN` is in place, or its error.
fn listen(
    rt: &RuntimeGuard,
    endpoint: &Endpoint,
    notifier: &Arc<Notifier>,
) -> std::result::Result<(), String> {
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let endpoint = endpoint.clone();
    let notifier = notifier.clone();
    rt.get().spawn(async move {
        let mut ready = Some(ready_tx);
        loop {
            let outcome = listen_once(&endpoint, &notifier).await;
            if let Some(r) = ready.take() {
                let failed = outcome.as_ref().err().cloned();
                let _ = r.send(failed.map_or(Ok(()), Err));
                if outcome.is_err() {
                    return;
                }
            }
            if let Ok((client, connection_done)) = outcome {
                notifier.bump();
                let _ = connection_done.await;
                drop(client);
            }
            tokio::time::sleep(LISTEN_RETRY).await;
        }
    });
    ready_rx
        .recv()
        .map_err(|_| "the LISTEN task stopped".to_owned())?
}

/// Connects and listens. Returns the client (dropping it closes the
/// connection) and the connection task, which finishes when the connection
/// ends.
async fn listen_once(
    endpoint: &Endpoint,
    notifier: &Arc<Notifier>,
) -> std::result::Result<(Client, tokio::task::JoinHandle<()>), String> {
    let (client, pump) = endpoint
        .connect(Some(notifier.clone()))
        .await
        .map_err(|e| describe(&e))?;
    let listened = client.batch_execute("LISTEN capstan_events").await;
    if let Err(e) = listened {
        pump.abort();
        return Err(describe(&e));
    }
    Ok((client, pump))
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            super::redact("postgres://me:s3cret@db:5432/capstan"),
            "postgres://me:***@db:5432/capstan"
        );
        assert_eq!(
            super::redact("postgres://me@db/capstan"),
            "postgres://me@db/capstan"
        );
        assert_eq!(
            super::redact("postgresql:///x?host=/tmp"),
            "postgresql:///x?host=/tmp"
        );
    }
}
