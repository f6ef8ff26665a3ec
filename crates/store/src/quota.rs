//! Per-user quotas on starting runs: runs in flight, runs started per
//! minute, and model tokens over the last day.
//!
//! A quota is checked in the transaction that inserts the run (see
//! [`crate::Store::start_run_exclusive`]), against the runs table itself, so
//! it holds across processes and replicas sharing the database: on SQLite
//! the write lock serialises starts, on PostgreSQL a transaction-scoped
//! advisory lock per user does. Nothing is counted in memory, so a replica
//! that dies loses no count, and a run that ends frees its slot the moment
//! its status commits.

use std::time::{Duration, SystemTime};

use crate::time::format_rfc3339_millis;

/// One user's limits. `None` means no limit of that kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Quota {
    /// Who the runs belong to (recorded on each run).
    pub user: String,
    /// Runs of the user `running` at once.
    pub max_running: Option<u32>,
    /// Runs the user may start in any 60 seconds.
    pub max_per_minute: Option<u32>,
    /// Model tokens (input and output) the user's runs may use in any
    /// 24 hours; runs in flight count with what they have used so far.
    pub max_tokens_per_day: Option<u64>,
    /// USD the user's runs may cost in any 24 hours (runs in flight count
    /// with what they cost so far; models without a price cost nothing).
    pub max_cost_per_day: Option<f64>,
}

/// Which limit of a [`Quota`] refused a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaKind {
    /// `max_running`.
    Running,
    /// `max_per_minute`.
    PerMinute,
    /// `max_tokens_per_day`.
    TokensPerDay,
    /// `max_cost_per_day`.
    CostPerDay,
}

impl QuotaKind {
    /// The limit as a person reads it, e.g. "runs in flight".
    pub fn describe(self) -> &'static str {
        match self {
            Self::Running => "runs in flight",
            Self::PerMinute => "runs started per minute",
            Self::TokensPerDay => "model tokens per 24 hours",
            Self::CostPerDay => "USD of model use per 24 hours",
        }
    }

    /// The config key that sets it (under `[[server.user]]`).
    pub fn key(self) -> &'static str {
        match self {
            Self::Running => "max_runs",
            Self::PerMinute => "runs_per_minute",
            Self::TokensPerDay => "tokens_per_day",
            Self::CostPerDay => "usd_per_day",
        }
    }
}

/// What the database says about a user's recent runs, read in the starting
/// transaction.
pub(crate) struct Usage {
    pub running: u64,
    /// Runs started in the last minute, and the oldest of them.
    pub last_minute: u64,
    pub oldest_in_minute: Option<String>,
    /// Tokens of runs started in the last day, and the oldest such run.
    pub tokens_day: u64,
    pub cost_day: f64,
    pub oldest_in_day: Option<String>,
}

const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The window starts (RFC 3339, comparable as text with `started_at`):
/// one minute and one day before now.
pub(crate) fn windows() -> (String, String) {
    let now = SystemTime::now();
    let ago = |d: Duration| format_rfc3339_millis(now.checked_sub(d).unwrap_or(now));
    (ago(MINUTE), ago(DAY))
}

impl Quota {
    /// Whether `usage` leaves room for one more run; the refusal otherwise.
    pub(crate) fn admit(&self, usage: &Usage) -> Result<(), crate::StoreError> {
        let refuse = |kind: QuotaKind, limit: u64, oldest: Option<&str>, window: Duration| {
            crate::StoreError::QuotaExceeded {
                user: self.user.clone(),
                kind,
                limit,
                retry_after_secs: retry_after(oldest, window),
            }
        };
        if let Some(max) = self.max_running
            && usage.running >= u64::from(max)
        {
            return Err(refuse(QuotaKind::Running, max.into(), None, Duration::ZERO));
        }
        if let Some(max) = self.max_per_minute
            && usage.last_minute >= u64::from(max)
        {
            return Err(refuse(
                QuotaKind::PerMinute,
                max.into(),
                usage.oldest_in_minute.as_deref(),
                MINUTE,
            ));
        }
        if let Some(max) = self.max_tokens_per_day
            && usage.tokens_day >= max
        {
            return Err(refuse(
                QuotaKind::TokensPerDay,
                max,
                usage.oldest_in_day.as_deref(),
                DAY,
            ));
        }
        if let Some(max) = self.max_cost_per_day
            && usage.cost_day >= max
        {
            // The limit in cents, as the error reports whole numbers.
            return Err(refuse(
                QuotaKind::CostPerDay,
                (max * 100.0).round() as u64,
                usage.oldest_in_day.as_deref(),
                DAY,
            ));
        }
        Ok(())
    }
}

/// Seconds until the oldest run in a window leaves it (at least 1); for
/// runs in flight, which end when they end, a short retry.
fn retry_after(oldest: Option<&str>, window: Duration) -> u64 {
    const IN_FLIGHT_RETRY: u64 = 5;
    let Some(started) = oldest.and_then(crate::time::parse_rfc3339_millis) else {
        return IN_FLIGHT_RETRY;
    };
    let leaves = started + window;
    leaves
        .duration_since(SystemTime::now())
        .map(|d| d.as_secs() + 1)
        .unwrap_or(1)
}
