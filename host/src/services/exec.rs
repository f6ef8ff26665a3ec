//! The `exec` host service: the only way a plugin runs a process.
//!
//! Order, every time: workspace bound? -> cwd inside the workspace? -> classify
//! the command (capstan-policy, authoritative; a plugin may only ask for a
//! stricter risk) -> workspace policy verdict (deny rules, profile) -> approval
//! gate if the verdict asks -> run in the OS sandbox (capstan-sandbox) -> one
//! `terminal.step` event with what happened.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capstan_policy::{Policy, Risk as PolicyRisk, Verdict};
use capstan_store::Decision;

use super::approval::{ApprovalAsk, ApprovalBroker};
use super::{ExecService, TaskScope};
use crate::protocol::Event;
use crate::runtime::bindings::{exec as wit, types::Risk as WitRisk};

/// Longest per-command timeout a plugin may ask for.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

pub struct Exec {
    pub policy: Policy,
    pub broker: Arc<ApprovalBroker>,
    pub default_timeout: Duration,
    /// Bytes kept per stream (head and tail).
    pub output_limit: usize,
}

impl Exec {
    pub fn new(policy: Policy, broker: Arc<ApprovalBroker>) -> Self {
        Self {
            policy,
            broker,
            default_timeout: Duration::from_secs(120),
            output_limit: 64 * 1024,
        }
    }
}

fn to_policy_risk(r: WitRisk) -> PolicyRisk {
    match r {
        WitRisk::ReadOnly => PolicyRisk::ReadOnly,
        WitRisk::Write => PolicyRisk::Write,
        WitRisk::Delete => PolicyRisk::Delete,
        WitRisk::Network => PolicyRisk::Network,
        WitRisk::Unknown => PolicyRisk::Unknown,
    }
}

fn to_wit_risk(r: PolicyRisk) -> WitRisk {
    match r {
        PolicyRisk::ReadOnly => WitRisk::ReadOnly,
        PolicyRisk::Write => WitRisk::Write,
        PolicyRisk::Delete => WitRisk::Delete,
        PolicyRisk::Network => WitRisk::Network,
        PolicyRisk::Unknown => WitRisk::Unknown,
    }
}

/// A cwd from a plugin: relative, inside the workspace after resolving links.
pub fn resolve_cwd(workspace: &Path, cwd: &str) -> Result<PathBuf, String> {
    let rel = Path::new(cwd);
    if rel.is_absolute() {
        return Err(format!(
            "cwd `{cwd}` must be relative to the workspace root"
        ));
    }
    if rel.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!("cwd `{cwd}` may not contain `..`"));
    }
    let joined = workspace.join(rel);
    let real = joined
        .canonicalize()
        .map_err(|e| format!("cwd `{cwd}`: {e}"))?;
    if !real.starts_with(workspace) {
        return Err(format!(
            "cwd `{cwd}` resolves outside the workspace (a symlink?)"
        ));
    }
    if !real.is_dir() {
        return Err(format!("cwd `{cwd}` is not a directory"));
    }
    Ok(real)
}

/// Shell-quote argv for display and for the audit trail.
fn display_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}

#[async_trait]
impl ExecService for Exec {
    async fn run(
        &self,
        scope: &TaskScope,
        req: wit::ExecRequest,
    ) -> Result<wit::ExecOutput, wit::ExecError> {
        let Some(workspace) = scope.run.workspace.clone() else {
            scope.run.events.emit(Event::WorkspaceRequired {
                task_ids: vec![scope.task_id.clone()],
                message: "running commands needs a workspace; pass --workspace DIR".into(),
            });
            return Err(wit::ExecError::WorkspaceRequired);
        };
        let cwd_rel = if req.cwd.is_empty() {
            ".".to_string()
        } else {
            req.cwd.clone()
        };
        let cwd = resolve_cwd(&workspace, &cwd_rel).map_err(wit::ExecError::InvalidRequest)?;

        let (text, evaluation, command) = match req.command {
            wit::Command::Shell(line) => {
                let ev = self.policy.evaluate_shell(&line);
                (line.clone(), ev, capstan_sandbox::Command::Shell(line))
            }
            wit::Command::Argv(argv) => {
                if argv.is_empty() {
                    return Err(wit::ExecError::InvalidRequest("argv is empty".into()));
                }
                let ev = self.policy.evaluate_argv(&argv);
                (
                    display_argv(&argv),
                    ev,
                    capstan_sandbox::Command::Argv(argv),
                )
            }
        };
        let classified = evaluation.classification.risk;
        let risk = capstan_policy::effective_risk(classified, req.min_risk.map(to_policy_risk));
        let mut reasons = evaluation.classification.reasons.clone();
        for why in &evaluation.explanation {
            // The policy may restate the classifier's reason: say it once.
            if !reasons.contains(why) {
                reasons.push(why.clone());
            }
        }
        let mut verdict = evaluation.verdict.clone();
        // The plugin asked for a stricter risk than the profile auto-runs.
        if risk > classified
            && verdict == Verdict::Allow
            && self
                .policy
                .profile
                .auto_run_up_to()
                .is_none_or(|max| risk > max)
        {
            reasons.push(format!("the plugin asked to treat this as `{risk}`"));
            verdict = Verdict::Ask;
        }
        let ask = ApprovalAsk {
            action: "exec".into(),
            command: text.clone(),
            cwd: cwd_rel.clone(),
            risk: risk.to_string(),
            reasons: reasons.clone(),
        };
        match verdict {
            Verdict::Deny { reason } => {
                self.broker.record_policy_denial(scope, &ask);
                return Err(wit::ExecError::Denied(format!(
                    "{reason} (workspace policy `{}`; change it with `capstan workspace add --profile` or the policy's allow/deny rules)",
                    serde_json::to_value(self.policy.profile)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default()
                )));
            }
            Verdict::Ask => match self.broker.ask(scope, ask).await {
                Decision::Approved | Decision::ApprovedForSession => {}
                Decision::Aborted => return Err(wit::ExecError::Cancelled),
                Decision::Denied => {
                    return Err(wit::ExecError::Denied(format!(
                        "`{text}` ({risk}) was not approved"
                    )));
                }
                Decision::Expired => {
                    return Err(wit::ExecError::Denied(format!(
                        "`{text}` ({risk}): nobody answered the approval in time"
                    )));
                }
            },
            Verdict::Allow => self.broker.record_policy_allow(scope, &ask),
        }

        let timeout = req
            .timeout_ms
            .map(|ms| Duration::from_millis(ms.into()))
            .unwrap_or(self.default_timeout)
            .min(MAX_TIMEOUT);
        let mut spec = capstan_sandbox::ExecSpec::new(command, workspace.clone());
        spec.cwd = cwd;
        spec.timeout = timeout;
        spec.output_limit = req
            .output_limit
            .map(|n| n as usize)
            .unwrap_or(self.output_limit)
            .clamp(1024, 16 << 20);
        spec.network = self.policy.network;
        spec.mode = match self.policy.sandbox {
            capstan_policy::SandboxMode::Required => capstan_sandbox::SandboxMode::Required,
            capstan_policy::SandboxMode::Off => capstan_sandbox::SandboxMode::Off,
        };
        spec.env = self
            .policy
            .env_allow
            .iter()
            .filter_map(|name| std::env::var(name).ok().map(|v| (name.clone(), v)))
            .collect();
        let outcome = capstan_sandbox::run(spec, scope.run.cancel.child_token()).await;
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                return Err(wit::ExecError::Failed(e.to_string()));
            }
        };
        let output_tail = tail(&format!("{}{}", outcome.stdout, outcome.stderr), 2000);
        scope.run.events.emit(Event::TerminalStep {
            task_id: scope.task_id.clone(),
            command: text.clone(),
            cwd: cwd_rel,
            risk: risk.to_string(),
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            duration_ms: outcome.duration.as_millis() as u64,
            output_tail,
            truncated_bytes: outcome.truncated_bytes,
            timed_out: outcome.timed_out,
        });
        if outcome.cancelled {
            return Err(wit::ExecError::Cancelled);
        }
        Ok(wit::ExecOutput {
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            stdout: outcome.stdout,
            stderr: outcome.stderr,
            truncated_bytes: outcome.truncated_bytes,
            duration_ms: outcome.duration.as_millis() as u64,
            timed_out: outcome.timed_out,
            risk: to_wit_risk(risk),
            reasons,
        })
    }
}
