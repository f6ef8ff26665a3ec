//! Workspace changes: what a sandboxed command (or a plugin's file write)
//! changed, landed at once or held for review, and kept for undo.
//!
//! The sandbox stages a command's writes (`capstan_sandbox::changes`); this
//! module decides what happens to them: `[changes] apply = "apply"` lands
//! them at once through the change store (`capstan-changes`: atomic, with a
//! journal, previous versions kept), `"review"` holds them as an approval
//! (the person approves the diff, not the command; deny discards). Changes
//! to protected paths always go to review, whatever the profile. Either
//! way one `workspace.changes` event says what changed.

use std::path::Path;
use std::sync::Arc;

use capstan_changes::{Origin, Record, Store};
use capstan_store::Decision;

use super::approval::{ApprovalAsk, ApprovalBroker};
use crate::config::changes::{ApplyMode, ChangesSection};
use crate::plugins::bindings::{approval, types};
use crate::plugins::context::{Capture, RunContext, TaskScope};
use capstan_protocol::{ChangedFile, Event};

/// Opens the change store in the data dir (finishing any landing a crash
/// cut short).
pub fn open_store(data: &Path, section: &ChangesSection) -> anyhow::Result<Store> {
    let (store, recovery) = Store::open(data.join("changes"), section.retention())?;
    for id in &recovery.finished {
        tracing::warn!(change_set = %id, "finished a landing or undo a crash interrupted");
    }
    for e in &recovery.errors {
        tracing::error!("cannot finish an interrupted landing: {e}");
    }
    Ok(store)
}

impl Capture {
    /// The protected paths among `record`'s changes.
    pub fn protected_hits(&self, record: &Record) -> Vec<String> {
        let mut hits = Vec::new();
        for c in &record.changes {
            for p in std::iter::once(&c.path).chain(c.from.iter()) {
                if is_protected(p, &self.protected) && !hits.contains(p) {
                    hits.push(p.clone());
                }
            }
        }
        hits
    }

    /// Why `record` must be reviewed before it stays (empty: it need not).
    pub fn review_reasons(&self, record: &Record) -> Vec<String> {
        let hits = self.protected_hits(record);
        let mut reasons = Vec::new();
        if self.apply == ApplyMode::Review {
            reasons.push("this workspace reviews every change before it lands".to_string());
        }
        if !hits.is_empty() {
            reasons.push(format!(
                "protected paths are changed (always reviewed): {}",
                hits.join(", ")
            ));
        }
        reasons
    }

    /// Settles a captured change set: land, or review then land or discard.
    /// Emits `workspace.changes`. Returns an error message when the changes
    /// did not reach the workspace for another reason than a denied review.
    pub async fn settle(
        self: &Arc<Self>,
        scope: &TaskScope,
        broker: &ApprovalBroker,
        id: String,
        set: capstan_changes::ChangeSet,
        source: &str,
        cwd: &str,
    ) -> Result<Option<Record>, String> {
        if set.is_empty() {
            self.store.retire_staging(&set.staging);
            return Ok(None);
        }
        let origin = Origin {
            run_id: scope.run.run_id.clone(),
            task_id: scope.task_id.clone(),
            source: source.to_owned(),
        };
        let me = self.clone();
        let prepared = {
            let id = id.clone();
            tokio::task::spawn_blocking(move || me.store.prepare(&id, &set, origin))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cannot keep the previous versions: {e}"))?
        };
        let reasons = self.review_reasons(&prepared);
        let record = if reasons.is_empty() {
            self.land(&id, Some(prepared)).await?
        } else {
            emit(scope, &prepared, &reasons);
            let files = prepared.changes.len();
            let ask = ApprovalAsk {
                action: "workspace.changes".into(),
                command: format!(
                    "apply the changes of `{source}` ({files} file{}, change set {id})",
                    if files == 1 { "" } else { "s" }
                ),
                cwd: cwd.to_owned(),
                risk: capstan_policy::Risk::Write,
                reasons: reasons.clone(),
                always: None,
            };
            match broker.ask(scope, ask).await {
                Decision::Approved | Decision::ApprovedForSession | Decision::ApprovedAlways => {
                    self.land(&id, None).await?
                }
                _ => {
                    let me = self.clone();
                    let id2 = id.clone();
                    tokio::task::spawn_blocking(move || me.store.discard(&id2))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.to_string())?
                }
            }
        };
        emit(scope, &record, &reasons);
        Ok(Some(record))
    }

    /// Lands set `id`: `prepared`, the record `prepare` just returned, when
    /// it lands at once (not read back); by id after a review.
    async fn land(self: &Arc<Self>, id: &str, prepared: Option<Record>) -> Result<Record, String> {
        let me = self.clone();
        let id = id.to_owned();
        tokio::task::spawn_blocking(move || {
            let landed = match prepared {
                Some(record) => me.store.land_prepared(record),
                None => me.store.land(&id),
            };
            // Retention, at most hourly.
            if let Err(e) = me.store.maybe_gc(std::time::Duration::from_secs(3600)) {
                tracing::warn!("cannot apply the change store's retention: {e}");
            }
            landed
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("the changes could not land: {e}"))
    }
}

/// Whether `path` is one of `protected` (a trailing `/` covers the tree;
/// `capstan.toml` and `.envrc` count at the root only).
pub fn is_protected(path: &str, protected: &[String]) -> bool {
    protected.iter().any(|p| match p.strip_suffix('/') {
        Some(dir) => path == dir || path.starts_with(&format!("{dir}/")),
        None => path == p,
    })
}

/// `workspace.changes` for a record.
pub fn emit(scope: &TaskScope, record: &Record, reasons: &[String]) {
    scope
        .run
        .events
        .emit(event(record, Some(&scope.task_id), reasons));
}

/// The `workspace.changes` event of a record.
pub fn event(record: &Record, task_id: Option<&str>, reasons: &[String]) -> Event {
    let (before, after) = record.sizes();
    Event::WorkspaceChanges {
        task_id: task_id.unwrap_or(&record.origin.task_id).to_owned(),
        change_set: record.id.clone(),
        state: record.state,
        source: record.origin.source.clone(),
        review_reasons: reasons.to_vec(),
        bytes_before: before,
        bytes_after: after,
        files: files(record),
    }
}

pub fn files(record: &Record) -> Vec<ChangedFile> {
    record
        .changes
        .iter()
        .map(|c| ChangedFile {
            path: c.path.clone(),
            kind: c.kind,
            entry: c
                .new
                .as_ref()
                .or(c.old.as_ref())
                .map_or(capstan_changes::EntryType::File, |s| s.entry),
            from: c.from.clone(),
            old_size: c.old.as_ref().map(|s| s.size),
            new_size: c.new.as_ref().map(|s| s.size),
            old_mode: c.old.as_ref().map(|s| format!("{:o}", s.mode)),
            new_mode: c.new.as_ref().map(|s| format!("{:o}", s.mode)),
            diff: if c.binary { None } else { c.diff.clone() },
            summary: if c.binary { c.diff.clone() } else { None },
            undeclared: c.undeclared,
        })
        .collect()
}

impl Capture {
    /// The capture policy of commands in `workspace` (`None`: capture off, or
    /// the store cannot be opened, which is logged).
    pub fn for_workspace(data: &Path, section: &ChangesSection, workspace: &Path) -> Option<Self> {
        if !section.capture {
            return None;
        }
        match open_store(data, section) {
            Ok(store) => {
                let (apply, protected) = section.for_workspace(workspace);
                Some(Capture {
                    store,
                    apply,
                    protected,
                })
            }
            Err(e) => {
                tracing::error!("change capture is off: cannot open the change store: {e:#}");
                None
            }
        }
    }
}

/// Input fields that name a file a plugin operation writes.
const WRITE_FIELDS: &[&str] = &["path", "output", "output_path", "dest", "destination", "to"];

/// A snapshot of the files a plugin operation declares it writes.
pub struct PluginSnapshot {
    capture: Arc<Capture>,
    snap: capstan_changes::Snapshot,
}

/// Snapshots the workspace files named in a write operation's input (their
/// previous versions kept) and pictures the rest by stamp.
pub async fn snapshot_plugin(
    run: &RunContext,
    input: &serde_json::Value,
) -> Option<PluginSnapshot> {
    let capture = run.services.exec.as_ref()?.changes()?;
    let workspace = run.workspace.clone()?;
    let paths: Vec<String> = WRITE_FIELDS
        .iter()
        .filter_map(|f| input.get(*f)?.as_str())
        .map(|p| p.trim_start_matches("./").trim_end_matches('/').to_owned())
        .filter(|p| crate::workspace_gate::check_relative(p).is_ok())
        .collect();
    // Even with no path named, the rest of the workspace is pictured: a write
    // the operation did not declare still shows up in its change set.
    let c = capture.clone();
    let snap = tokio::task::spawn_blocking(move || c.store.snapshot(&workspace, &paths))
        .await
        .ok()?;
    match snap {
        Ok(snap) => {
            if !snap.watches_everything() {
                tracing::warn!(
                    "the workspace is too large to picture whole: only the files the plugin names in its input are watched"
                );
            }
            Some(PluginSnapshot { capture, snap })
        }
        Err(e) => {
            tracing::warn!("cannot snapshot the files a plugin writes: {e}");
            None
        }
    }
}

/// Records what a plugin operation changed and emits `workspace.changes`.
/// A plugin writes in place, so review comes after the write: when the
/// workspace reviews every change, or a protected path was written, the set
/// is shown as `pending` and the person decides; a denial takes it back
/// (previous versions restored, created files removed; a file the plugin did
/// not name stays as it is, as undo says) and is returned as the task's
/// failure message.
pub async fn record_plugin(
    scope: &TaskScope,
    snap: PluginSnapshot,
    source: String,
) -> Option<String> {
    let origin = Origin {
        run_id: scope.run.run_id.clone(),
        task_id: scope.task_id.clone(),
        source: source.clone(),
    };
    let PluginSnapshot { capture, snap } = snap;
    let c = capture.clone();
    let recorded = tokio::task::spawn_blocking(move || c.store.record_snapshot(snap, origin)).await;
    let record = match recorded {
        Ok(Ok(Some(record))) => record,
        Ok(Ok(None)) => return None,
        Ok(Err(e)) => {
            tracing::warn!("cannot record a plugin's file changes: {e}");
            return None;
        }
        Err(e) => {
            tracing::warn!("cannot record a plugin's file changes: {e}");
            return None;
        }
    };
    let reasons = capture.review_reasons(&record);
    if reasons.is_empty() {
        emit(scope, &record, &[]);
        return None;
    }
    let mut held = record.clone();
    held.state = capstan_changes::ChangeSetState::Pending;
    emit(scope, &held, &reasons);
    let files = record.changes.len();
    let ask = approval::ApprovalRequest {
        action: "workspace.changes".into(),
        detail: format!(
            "keep the changes `{source}` made ({files} file{}, change set {})",
            if files == 1 { "" } else { "s" },
            record.id
        ),
        risk: types::Risk::Write,
        reasons: reasons.clone(),
    };
    let decision = match &scope.run.services.approval {
        Some(approver) => approver.request(scope, ask).await,
        None => approval::Decision::Denied,
    };
    if matches!(
        decision,
        approval::Decision::Approved | approval::Decision::ApprovedForSession
    ) {
        emit(scope, &record, &reasons);
        return None;
    }
    let c = capture.clone();
    let id = record.id.clone();
    let undone = tokio::task::spawn_blocking(move || {
        let report = c.store.undo(&id, capstan_changes::Conflicts::Force)?;
        Ok::<_, capstan_changes::Error>((c.store.get(&id)?, report))
    })
    .await;
    match undone {
        Ok(Ok((after, report))) => {
            emit(scope, &after, &reasons);
            let mut msg = format!(
                "the changes `{source}` made were not approved and were taken back ({} path(s) restored)",
                report.restored.len()
            );
            for r in &report.refused {
                msg.push_str(&format!("; left as it is: {} ({})", r.path, r.why));
            }
            Some(msg)
        }
        Ok(Err(e)) => Some(format!(
            "the changes `{source}` made were not approved, and taking them back failed: {e}; see `capstan changes`"
        )),
        Err(e) => Some(format!(
            "the changes `{source}` made were not approved, and taking them back failed: {e}"
        )),
    }
}
