//! "Always for this workspace" (`approved-always` on a `network.connect`
//! approval): the proxy's rule is written into the user's capstan.toml
//! (config::network_always) and kept by this proxy for the rest of the run.
//! A write that fails still lets the host through for this session, and the
//! person reads why in the feed (an `activity` naming the file and the error).

use std::path::PathBuf;

use capstan_egress::Decision as EgressDecision;
use capstan_protocol::Event;

use crate::config::network_always::{Written, write_rule};
use crate::plugins::context::TaskScope;

/// Writes `rule` for the workspace `root` into `file` and says so.
pub(super) async fn write(
    scope: &TaskScope,
    file: PathBuf,
    root: PathBuf,
    rule: String,
    home: Option<PathBuf>,
) -> EgressDecision {
    let (f, r, rl) = (file.clone(), root.clone(), rule.clone());
    let written = tokio::task::spawn_blocking(move || write_rule(&f, &r, &rl, home.as_deref()))
        .await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("the writer stopped: {e}")));
    let place = format!("[network.workspace.\"{}\"] allow", root.display());
    let (kind, message, decision) = match written {
        Ok(Written::Added) => (
            "network.rule_written",
            format!(
                "allowed \"{rule}\" for this workspace: added to {place} in {}",
                file.display()
            ),
            EgressDecision::Always,
        ),
        Ok(Written::AlreadyThere) => (
            "network.rule_written",
            format!("\"{rule}\" is already in {place} in {}", file.display()),
            EgressDecision::Always,
        ),
        Err(e) => (
            "network.rule_failed",
            format!(
                "warning: could not write \"{rule}\" to {place} in {}: {e:#}; it is allowed for \
                 this session only (add it there by hand to keep it)",
                file.display()
            ),
            EgressDecision::Session,
        ),
    };
    if decision == EgressDecision::Session {
        tracing::warn!("{message}");
    }
    scope.run.events.emit(Event::Activity {
        task_id: Some(scope.task_id.clone()),
        kind: kind.into(),
        message,
        data: serde_json::json!({"rule": rule, "file": file, "workspace": root}),
    });
    decision
}
