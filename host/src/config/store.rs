//! `[store]` in the user's capstan.toml: where Capstan keeps sessions, runs
//! and events. Absent: the SQLite file in the data dir (one person, one
//! machine). A `postgres://` URL makes `capstan serve` a replica: several
//! servers sharing one database, each run leased to the replica running it
//! (docs/DEPLOY.md).
//!
//! ```toml
//! [store]
//! url = "postgres://capstan:secret@db.internal/capstan"
//! lease_secs = 30     # a dead replica's runs are taken over within this
//! resume = "safe"     # continue them from their last completed task ("off": interrupt)
//! ```
//!
//! `capstan serve --store URL` (or `CAPSTAN_STORE_URL`) overrides `url`.

use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize, Serializer};

/// Seconds a replica's lease on a run lasts unless `[store] lease_secs` says.
pub const DEFAULT_LEASE_SECS: u64 = 30;

/// `[store]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSection {
    /// `postgres://user:password@host:port/db`, `sqlite:PATH` or a path.
    /// Absent: `capstan.db` in the data dir. Shown (`capstan config show`)
    /// with its password as `***`.
    #[serde(serialize_with = "redacted")]
    pub url: Option<String>,
    /// How long a replica's lease on a run lasts without a heartbeat. The
    /// heartbeat renews it every third of this; a replica that dies has its
    /// runs marked `interrupted` by another within about this time.
    pub lease_secs: u64,
    /// What a replica does with a run whose replica died (its lease
    /// expired).
    pub resume: ResumePolicy,
}

/// `[store] resume`: what becomes of a run whose replica died.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResumePolicy {
    /// Mark it `interrupted` (`run.failed`, `lease-expired`); the person asks again.
    Off,
    /// Another replica continues it from its last completed task when that
    /// is safe: its plan was made, no task failed, and every task that was
    /// running can be run again without doing anything twice (a knowledge-base
    /// search, read-only commands, or a command still waiting for approval).
    /// Otherwise, as `off`.
    #[default]
    Safe,
}

impl Default for StoreSection {
    fn default() -> Self {
        Self {
            url: None,
            lease_secs: DEFAULT_LEASE_SECS,
            resume: ResumePolicy::default(),
        }
    }
}

impl StoreSection {
    /// Refuses values that cannot work, naming the key and the fix.
    pub fn check(&self) -> Result<()> {
        if self.lease_secs == 0 || self.lease_secs > 86_400 {
            anyhow::bail!(
                "[store] lease_secs = {} in capstan.toml: a lease lasts 1 to 86400 seconds; \
                 30 suits most deployments",
                self.lease_secs
            );
        }
        if let Some(url) = &self.url
            && url.trim().is_empty()
        {
            anyhow::bail!(
                "[store] url in capstan.toml is empty; write a postgres:// URL, or remove the \
                 key to use the SQLite file in the data dir"
            );
        }
        Ok(())
    }

    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_secs)
    }
}

/// The URL without its password, for printing the settings in force.
fn redacted<S: Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match url {
        Some(u) => s.serialize_some(&capstan_store::redact_url(u)),
        None => s.serialize_none(),
    }
}
