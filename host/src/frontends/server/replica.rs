//! `capstan serve` as one replica of several over a shared PostgreSQL store
//! (docs/DEPLOY.md). What a single server keeps in memory is reached through
//! the database here:
//!
//! - **Leases.** The replica that starts a run claims it
//!   ([`crate::run::lease::Replica`]); a background thread renews the leases
//!   of its runs (a third of `[store] lease_secs`) and sweeps for expired
//!   ones of other replicas. With `[store] resume = "safe"` (the default) it
//!   takes over each one that can go on safely and continues it from its
//!   last completed task (`run.resumed`, see `run::orchestrator::resume`);
//!   the others it marks `interrupted` with a terminal `run.failed`
//!   (`lease-expired`).
//! - **Streams.** A run running on another replica is followed by tailing
//!   its stored events ([`tail`]): a cursor read, then `wait_events`
//!   (PostgreSQL `LISTEN`/`NOTIFY`), on a blocking thread, until the run's
//!   terminal event. Seqs come from the store, so `Last-Event-ID` replay is
//!   the same on every replica.
//! - **Cancels and approval decisions** sent to a replica that does not run
//!   the run are left in the store's `run_requests`; the owner's thread takes
//!   the ones for its runs and open approvals every [`REQUEST_POLL`] and
//!   applies them. A decision waits (up to [`DECISION_WAIT`]) for the owner
//!   to take it, so an unknown approval is still a 404.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use capstan_protocol::Envelope;
use capstan_store::{RunRequestKind, RunStatus, Store};
use tokio::sync::mpsc;

use super::error::ApiError;
use super::runs::{Resume, RunManager, StreamSlot, Subscription, is_terminal};
use crate::config::store::ResumePolicy;
use crate::plugins::services::approval::Via;
use crate::run::lease::Replica;

/// How often the owner looks for requests sent to other replicas.
pub const REQUEST_POLL: Duration = Duration::from_millis(200);
/// How long a replica waits for the owner to take a forwarded decision
/// before answering that no such approval is open.
pub const DECISION_WAIT: Duration = Duration::from_secs(3);
/// The longest one `wait_events` call of a tail blocks (then the run's
/// status is checked, so a tail never outlives its run).
const TAIL_WAIT: Duration = Duration::from_secs(1);

/// Starts the replica's background thread (heartbeat, sweep, requests) when
/// the store is shared; nothing on SQLite. The thread ends with the manager.
pub fn start(manager: &Arc<RunManager>) {
    let Some(replica) = manager.replica().cloned() else {
        return;
    };
    let weak = Arc::downgrade(manager);
    // Resumed runs are spawned from the thread onto the server's runtime.
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        crate::errln!("error: the replica's heartbeat needs the server's runtime; not started");
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("capstan-replica".into())
        .spawn(move || background(weak, replica, runtime));
    if let Err(e) = spawned {
        crate::errln!("error: cannot start the replica's heartbeat thread: {e}");
    }
}

fn background(manager: Weak<RunManager>, replica: Arc<Replica>, runtime: tokio::runtime::Handle) {
    let mut next_beat = Instant::now();
    let mut next_sweep = Instant::now();
    loop {
        let Some(manager) = manager.upgrade() else {
            return;
        };
        let now = Instant::now();
        if now >= next_beat {
            next_beat = now + replica.heartbeat_every();
            let ids: Vec<String> = manager
                .active_runs()
                .into_iter()
                .filter(|r| !r.ended())
                .map(|r| r.run_id.clone())
                .collect();
            for lost in replica.renew(&ids) {
                crate::errln!(
                    "error: run {lost} lost its lease (another replica marked it interrupted); \
                     stopping it here"
                );
                if let Some(run) = manager.active_run(&lost) {
                    run.cancel();
                }
            }
        }
        if now >= next_sweep {
            next_sweep = now + replica.sweep_every();
            if manager.app().config.store.resume == ResumePolicy::Safe {
                take_over(&manager, &replica, &runtime);
            }
            match replica.sweep() {
                Ok(ids) if !ids.is_empty() => tracing::info!(
                    "marked {} run(s) of a stopped replica interrupted (lease expired): {}",
                    ids.len(),
                    ids.join(", ")
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!("sweeping for expired run leases: {e}"),
            }
        }
        take_requests(&manager, &replica);
        drop(manager);
        std::thread::sleep(REQUEST_POLL);
    }
}

/// Takes over the runs of dead replicas that can go on safely, and continues
/// them here; the sweep that follows interrupts the rest.
fn take_over(manager: &Arc<RunManager>, replica: &Replica, runtime: &tokio::runtime::Handle) {
    let expired = match replica.store().expired_leases() {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!("looking for runs of stopped replicas: {e}");
            return;
        }
    };
    for run_id in expired {
        match manager.resume(&run_id, runtime) {
            Ok(()) => crate::errln!(
                "resumed run {run_id}: its replica stopped; continuing from its last completed task"
            ),
            Err(Resume::Unsafe(why)) => {
                tracing::info!("run {run_id} of a stopped replica is not resumed: {why}")
            }
            // Another replica was quicker, or the run ended meanwhile.
            Err(Resume::Taken) => {}
        }
    }
}

/// Applies the cancels and decisions other replicas left for this one's runs.
fn take_requests(manager: &Arc<RunManager>, replica: &Replica) {
    let runs = manager.active_runs();
    let mut targets: Vec<String> = Vec::new();
    for run in &runs {
        targets.push(run.run_id.clone());
        targets.extend(run.open_approvals());
    }
    let requests = match replica.store().take_run_requests(&targets) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("reading requests from other replicas: {e}");
            return;
        }
    };
    for request in requests {
        match request.kind {
            RunRequestKind::Cancel => {
                if let Some(run) = manager.active_run(&request.target) {
                    run.cancel();
                }
            }
            RunRequestKind::Decide {
                decision,
                decided_by,
            } => {
                let via = decided_by
                    .as_deref()
                    .and_then(via_from_str)
                    .unwrap_or(Via::HttpToken);
                let decided = manager.app().broker.decide(&request.target, decision, via);
                if let Err(e) = decided {
                    tracing::warn!(
                        "a decision on approval {} from another replica was not applied: {e}",
                        request.target
                    );
                }
            }
        }
    }
}

fn via_from_str(s: &str) -> Option<Via> {
    [
        Via::Terminal,
        Via::Stdio,
        Via::HttpToken,
        Via::HttpCookie,
        Via::HttpNoToken,
        Via::McpClient,
    ]
    .into_iter()
    .find(|v| v.as_str() == s)
}

/// A cancel for a run another replica runs: left for its owner.
pub fn forward_cancel(replica: &Replica, run_id: &str) -> Result<(), ApiError> {
    replica
        .store()
        .add_run_request(run_id, &RunRequestKind::Cancel)?;
    Ok(())
}

/// A decision on an approval no run here waits for: left for the replica
/// whose run does, and waited for. `Ok(false)` when nobody took it within
/// [`DECISION_WAIT`] (no such open approval anywhere); it is withdrawn then.
pub fn forward_decision(
    replica: &Replica,
    approval_id: &str,
    decision: capstan_store::Decision,
    via: Via,
) -> Result<bool, ApiError> {
    let store = replica.store();
    let id = store.add_run_request(
        approval_id,
        &RunRequestKind::Decide {
            decision,
            decided_by: Some(via.as_str().to_string()),
        },
    )?;
    let wait = || -> Result<bool, ApiError> {
        let deadline = Instant::now() + DECISION_WAIT;
        while Instant::now() < deadline {
            if !store.run_request_pending(id)? {
                return Ok(true);
            }
            std::thread::sleep(REQUEST_POLL / 4);
        }
        // Withdrawn unless taken in the meantime.
        Ok(!store.withdraw_run_request(id)?)
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

/// Whether a stored run is running on another replica (so it is followed
/// through the store).
pub fn running_elsewhere(store: &Store, run_id: &str) -> Result<bool, ApiError> {
    Ok(store
        .get_run(run_id)?
        .is_some_and(|r| r.status == RunStatus::Running))
}

/// The stored events of a run another replica runs, then the rest as they
/// are stored, until its terminal event (or until it stops running).
pub fn tail(store: Arc<Store>, run_id: &str, slot: StreamSlot) -> Result<Subscription, ApiError> {
    let stored = store.events_since(run_id, None)?;
    let mut after = stored.last().map(|e| e.seq);
    let backlog: Vec<Arc<Envelope>> = stored
        .iter()
        .filter_map(|e| parse(run_id, &e.json))
        .collect();
    if backlog.iter().any(|e| is_terminal(&e.event)) {
        return Ok(Subscription::from_parts(backlog, None, slot));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let run = run_id.to_string();
    tokio::task::spawn_blocking(move || {
        loop {
            if tx.is_closed() {
                return;
            }
            let events = match store.wait_events(&run, after, TAIL_WAIT) {
                Ok(events) => events,
                Err(e) => {
                    tracing::warn!("following run {run} through the store: {e}");
                    return;
                }
            };
            if events.is_empty() {
                // No terminal event may ever come (a run interrupted when its
                // process exited has none): stop once it is not running and
                // nothing is left to read.
                let running = store
                    .get_run(&run)
                    .map(|r| r.is_some_and(|r| r.status == RunStatus::Running))
                    .unwrap_or(false);
                if !running && store.events_since(&run, after).is_ok_and(|e| e.is_empty()) {
                    return;
                }
                continue;
            }
            for e in events {
                after = Some(e.seq);
                if let Some(env) = parse(&run, &e.json) {
                    let end = is_terminal(&env.event);
                    if tx.send(env).is_err() || end {
                        return;
                    }
                }
            }
        }
    });
    Ok(Subscription::from_parts(backlog, Some(rx), slot))
}

fn parse(run_id: &str, json: &str) -> Option<Arc<Envelope>> {
    match serde_json::from_str::<Envelope>(json) {
        Ok(env) => Some(Arc::new(env)),
        Err(e) => {
            tracing::warn!("skipping a stored event of {run_id} this build cannot read: {e}");
            None
        }
    }
}
