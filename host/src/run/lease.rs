//! Runs on replicas: `capstan serve` processes sharing one PostgreSQL store
//! (docs/DEPLOY.md). The replica that starts a run claims it with a lease and
//! renews it (the heartbeat); every replica sweeps for leases that expired
//! (their replica died or lost the database), marks those runs `interrupted`
//! and appends their terminal event, `run.failed` with reason
//! `lease-expired`, at the run's next seq, so a replay from any replica ends.
//!
//! On SQLite (one machine, the default) none of this runs: a dead process's
//! runs are marked interrupted when the next Capstan process opens the file.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use capstan_protocol::{Envelope, Event, FailureReason, Usage};
use capstan_store::{Backend, EventRecord, Store, StoreError};

use crate::config::store::StoreSection;
use crate::dirs::Dirs;

/// The store `[store]` (or `--store`) names, else the SQLite file in the data
/// dir. A bad URL or an unreachable database is an error naming the URL
/// (password hidden) and what to check.
pub fn open_store(dirs: &Dirs, section: &StoreSection) -> Result<Store> {
    match section.url.as_deref() {
        None => Store::open(dirs.data.join("capstan.db")).context("opening Capstan's database"),
        Some(url) => Store::open_url(url).with_context(|| {
            format!(
                "cannot open the store at {}: check that the database server runs and accepts \
                 connections from here, and that the user, password, host, port and database in \
                 the URL are right (`[store] url` in capstan.toml, or `capstan serve --store`); \
                 the database must exist (`createdb`), Capstan creates its tables",
                capstan_store::redact_url(url.trim())
            )
        }),
    }
}

/// This process as one replica of many: its lease owner id and lease time.
pub struct Replica {
    store: Arc<Store>,
    owner: String,
    ttl: Duration,
}

impl Replica {
    /// A replica when the store is shared (PostgreSQL); `None` on SQLite.
    pub fn for_store(store: Arc<Store>, section: &StoreSection) -> Option<Arc<Self>> {
        if store.backend() != Backend::Postgres {
            return None;
        }
        let owner = store.owner_id()?.to_string();
        Some(Arc::new(Self {
            store,
            owner,
            ttl: section.lease(),
        }))
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often the heartbeat renews this replica's leases: thrice per lease.
    pub fn heartbeat_every(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(100))
    }

    /// How often to look for expired leases of other replicas.
    pub fn sweep_every(&self) -> Duration {
        (self.ttl / 2).max(Duration::from_millis(200))
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Claims a run this replica just started.
    pub fn claim(&self, run_id: &str) -> Result<(), StoreError> {
        self.store
            .claim_run(run_id, &self.owner, self.ttl)
            .map(|_| ())
    }

    /// Renews this replica's leases; returns the runs whose lease was lost
    /// (another replica interrupted them): their work must stop.
    pub fn renew(&self, run_ids: &[String]) -> Vec<String> {
        let mut lost = Vec::new();
        for id in run_ids {
            match self.store.renew_lease(id, &self.owner, self.ttl) {
                Ok(_) => {}
                Err(StoreError::LeaseLost { .. }) => lost.push(id.clone()),
                // A run that ended between the listing and now, or a
                // database hiccup: the next beat tries again.
                Err(e) => tracing::warn!("renewing the lease of run {id}: {e}"),
            }
        }
        lost
    }

    /// Marks `interrupted` the runs whose lease expired and ends each one's
    /// event stream with `run.failed` (`lease-expired`), in one transaction
    /// per sweep: each expired run is marked, and its event appended, by
    /// exactly one sweeping replica. Returns the runs it marked.
    ///
    /// Runs whose process is gone before it took a lease (killed between
    /// starting the run and claiming it), or runs of a `capstan chat` or
    /// `ask` on this database that died, are ended the same way.
    pub fn sweep(&self) -> Result<Vec<String>, StoreError> {
        let mut ids = self
            .store
            .interrupt_expired_leases(Some(&|run, seq| ending(run, seq, Ended::LeaseExpired)))?;
        let orphans = self
            .store
            .mark_interrupted_runs(Some(&|run, seq| ending(run, seq, Ended::ProcessGone)))?;
        ids.extend(orphans);
        Ok(ids)
    }
}

/// Why a run another process ran was marked interrupted.
#[derive(Debug, Clone, Copy)]
pub enum Ended {
    /// Its replica stopped renewing the lease.
    LeaseExpired,
    /// Its process is gone (it held no lease).
    ProcessGone,
}

/// The terminal event of a run another process ran and this one marked
/// interrupted: `run.failed`, reason `lease-expired`, at `seq` (the run's
/// next). The store appends it in the transaction that marks the run, so
/// streams following the run from any replica end, and a sweeper that dies
/// midway leaves neither half.
pub fn ending(run_id: &str, seq: u64, why: Ended) -> EventRecord {
    let ts = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let message = match why {
        Ended::LeaseExpired => {
            "the Capstan replica running this run stopped renewing its lease (it was stopped or \
             lost the database) and the lease expired; another replica marked the run \
             interrupted. Work it had started may be incomplete; ask again to run it anew"
        }
        Ended::ProcessGone => {
            "the Capstan process running this run is gone (it stopped before the run was \
             leased); another process marked the run interrupted. Ask again to run it anew"
        }
    };
    let event = Event::RunFailed {
        reason: FailureReason::LeaseExpired,
        message: message.to_string(),
        usage: Usage::default(),
    };
    let kind = event.name().to_string();
    let envelope = Envelope {
        seq,
        run_id: run_id.to_string(),
        ts: ts.clone(),
        event,
    };
    EventRecord {
        run_id: run_id.to_string(),
        seq,
        ts,
        kind,
        json: serde_json::to_string(&envelope).unwrap_or_default(),
    }
}
