//! The `exec` host service: the only way a plugin runs a process.
//!
//! Order, every time: workspace bound? -> cwd inside the workspace? -> read
//! the facts the classifier needs about where the command runs (the git
//! repository's configuration, the cwd) -> classify the command
//! (capstan-policy, authoritative; a plugin may only ask for a stricter risk)
//! -> workspace policy verdict (deny rules, protected files, profile) ->
//! approval gate if the verdict asks -> the grant (what the command may do:
//! write the workspace, reach the network; who said so) -> run in the OS
//! sandbox (capstan-sandbox) with exactly that grant and git's code-running
//! settings neutralised -> one `terminal.step` event with what happened and
//! the grant it ran under.
//!
//! The classifier only decides whether to ask. A command judged read-only
//! runs unasked with nothing granted: a read-only workspace, no network (not
//! even the hosts `[network]` allows), no credentials. So a classifier
//! mistake costs a failed command or a question, never a write or a
//! connection nobody granted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capstan_policy::{Context, Policy, Profile, RepoFacts, Risk as PolicyRisk, Verdict};
use capstan_store::Decision;

use super::approval::{ApprovalAsk, ApprovalBroker};
use crate::plugins::bindings::exec as wit;
use crate::plugins::context::{ExecService, TaskScope};
use capstan_protocol::{Event, Grant, GrantSource};

/// Longest per-command timeout a plugin may ask for.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

pub struct Exec {
    pub policy: Policy,
    pub broker: Arc<ApprovalBroker>,
    pub default_timeout: Duration,
    /// Bytes kept per stream (head and tail).
    pub output_limit: usize,
    /// `[sandbox]` limits and read paths for this workspace.
    pub sandbox: crate::config::SandboxSettings,
    /// `[changes]`: capture this workspace's changes (None: writes land directly).
    pub changes: Option<Arc<crate::plugins::context::Capture>>,
}

impl Exec {
    pub fn new(policy: Policy, broker: Arc<ApprovalBroker>) -> Self {
        Self {
            policy,
            broker,
            default_timeout: Duration::from_secs(120),
            output_limit: 64 * 1024,
            sandbox: crate::config::SandboxSection::default().settings_for(None, None),
            changes: None,
        }
    }

    /// With change capture (see `services::changes`).
    pub fn with_changes(mut self, changes: Option<crate::plugins::context::Capture>) -> Self {
        self.changes = changes.map(Arc::new);
        self
    }

    /// With the workspace's `[sandbox]` settings.
    pub fn with_sandbox(mut self, sandbox: crate::config::SandboxSettings) -> Self {
        // With a `[network]` policy the proxy decides each connection.
        self.policy.network_proxy = sandbox.network.is_some();
        self.sandbox = sandbox;
        self
    }
}

/// git configuration every command runs with, at command scope (which wins
/// over the repository's own files): no fsmonitor, hooks, pager, editor,
/// askpass, credential helper or signature program from the repository, no
/// `ext::` transport, no implicit bare repositories (a planted bare repo
/// brings its own config). Driver keys (`diff.<x>.textconv`,
/// `filter.<x>.clean`, `diff.external`, ...) cannot be neutralised this
/// way; the classifier makes git `unknown` when the repository sets them.
const GIT_CONFIG_OVERRIDES: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("gpg.program", "gpg"),
    ("gpg.openpgp.program", "gpg"),
    ("gpg.x509.program", "gpgsm"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("log.showSignature", "false"),
    ("protocol.ext.allow", "never"),
    ("safe.bareRepository", "explicit"),
    // The sandbox may run commands as another uid than the workspace's
    // owner; ownership is not what keeps repository config from running
    // code here (the overrides above and the host's scan are).
    ("safe.directory", "*"),
];

/// Environment variables set for every command, after the workspace's
/// allowed variables so that those cannot undo them. Git reads the
/// environment before any configuration file.
fn git_safety_env(workspace: &Path) -> Vec<(String, String)> {
    let ceiling = workspace.parent().unwrap_or(workspace);
    let mut env: Vec<(String, String)> = [
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_ATTR_NOSYSTEM", "1"),
        ("GIT_PAGER", "cat"),
        ("GIT_EDITOR", "true"),
        ("GIT_SEQUENCE_EDITOR", "true"),
        ("GIT_ASKPASS", ""),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_SSH_COMMAND", "ssh"),
        ("GIT_PROXY_COMMAND", ""),
        ("GIT_NO_LAZY_FETCH", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    // git looks for a repository no higher than the workspace: a parent
    // directory's repository (and its configuration) is not the agent's.
    env.push((
        "GIT_CEILING_DIRECTORIES".into(),
        ceiling.to_string_lossy().into_owned(),
    ));
    env.push((
        "GIT_CONFIG_COUNT".into(),
        GIT_CONFIG_OVERRIDES.len().to_string(),
    ));
    for (n, (key, value)) in GIT_CONFIG_OVERRIDES.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{n}"), (*key).to_owned()));
        env.push((format!("GIT_CONFIG_VALUE_{n}"), (*value).to_owned()));
    }
    env
}

/// `GIT_*` variables an `env_allow` entry may pass through: identities and
/// dates. Any other (`GIT_CONFIG_PARAMETERS`, `GIT_EXTERNAL_DIFF`,
/// `GIT_DIR`, `GIT_EXEC_PATH`, ...) could undo [`git_safety_env`].
fn allowed_git_var(name: &str) -> bool {
    !name.starts_with("GIT_")
        || matches!(
            name,
            "GIT_AUTHOR_NAME"
                | "GIT_AUTHOR_EMAIL"
                | "GIT_AUTHOR_DATE"
                | "GIT_COMMITTER_NAME"
                | "GIT_COMMITTER_EMAIL"
                | "GIT_COMMITTER_DATE"
        )
}

/// The verdict after a plugin's request for a stricter risk: a plugin may
/// only tighten, so a command the profile would auto-run asks when the
/// plugin's risk is above what the profile auto-runs. Returns the new
/// verdict and the reason to add, if it changed.
fn apply_plugin_floor(
    verdict: Verdict,
    classified: PolicyRisk,
    risk: PolicyRisk,
    profile: Profile,
) -> (Verdict, Option<String>) {
    if risk > classified
        && verdict == Verdict::Allow
        && profile.auto_run_up_to().is_none_or(|max| risk > max)
    {
        let why = format!("the plugin asked to treat this as `{risk}`");
        return (Verdict::Ask, Some(why));
    }
    (verdict, None)
}

/// A cwd from a plugin: relative, inside the workspace after resolving links
/// (the workspace gate's one rule for client-named paths).
pub fn resolve_cwd(workspace: &Path, cwd: &str) -> Result<PathBuf, String> {
    let real = crate::workspace_gate::confine(workspace, cwd).map_err(|e| format!("cwd {e}"))?;
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

/// A command the gate let through: what to show, what to run, how risky.
struct Gated {
    text: String,
    command: capstan_sandbox::Command,
    risk: PolicyRisk,
    reasons: Vec<String>,
    /// What the command may do: the sandbox gives it exactly this.
    grant: Grant,
}

/// A staging dir the sandbox writes the command's changes into, and the
/// store they settle in.
type Staging = (Arc<crate::plugins::context::Capture>, (String, PathBuf));

impl Exec {
    /// Classify the command, apply the policy and the plugin's risk floor,
    /// and ask a person when the verdict says so. Every path records its
    /// decision; only `Ok` lets the command run.
    async fn gate(
        &self,
        scope: &TaskScope,
        command: wit::Command,
        context: &Context,
        cwd_rel: &str,
        min_risk: Option<wit::Risk>,
    ) -> Result<Gated, wit::ExecError> {
        let (text, evaluation, command) = match command {
            wit::Command::Shell(line) => {
                let ev = self.policy.evaluate_shell_in(&line, context);
                (line.clone(), ev, capstan_sandbox::Command::Shell(line))
            }
            wit::Command::Argv(argv) => {
                if argv.is_empty() {
                    return Err(wit::ExecError::InvalidRequest("argv is empty".into()));
                }
                let ev = self.policy.evaluate_argv_in(&argv, context);
                (
                    display_argv(&argv),
                    ev,
                    capstan_sandbox::Command::Argv(argv),
                )
            }
        };
        let classified = evaluation.classification.risk;
        let risk = capstan_policy::effective_risk(classified, min_risk.map(PolicyRisk::from));
        let mut reasons = evaluation.classification.reasons.clone();
        for why in &evaluation.explanation {
            // The policy may restate the classifier's reason: say it once.
            if !reasons.contains(why) {
                reasons.push(why.clone());
            }
        }
        let (verdict, floor) = apply_plugin_floor(
            evaluation.verdict.clone(),
            classified,
            risk,
            self.policy.profile,
        );
        reasons.extend(floor);
        let ask = ApprovalAsk {
            action: "exec".into(),
            command: text.clone(),
            cwd: cwd_rel.to_string(),
            risk,
            reasons: reasons.clone(),
            always: None,
        };
        let source = match verdict {
            Verdict::Deny { reason } => {
                self.broker.record_policy_denial(scope, &ask);
                return Err(wit::ExecError::Denied(format!(
                    "{reason} (workspace policy `{}`; change it with `capstan workspace add --profile` or the policy's allow/deny rules)",
                    self.policy.profile
                )));
            }
            Verdict::Ask => match self.broker.ask_granting(scope, ask).await {
                (
                    Decision::Approved | Decision::ApprovedForSession | Decision::ApprovedAlways,
                    source,
                ) => source,
                (Decision::Aborted, _) => return Err(wit::ExecError::Cancelled),
                (Decision::Denied, _) => {
                    return Err(wit::ExecError::Denied(format!(
                        "`{text}` ({risk}) was not approved"
                    )));
                }
                (Decision::Expired, _) => {
                    return Err(wit::ExecError::Denied(format!(
                        "`{text}` ({risk}): nobody answered the approval in time"
                    )));
                }
            },
            Verdict::Allow => {
                // The policy says who granted its allow; a plugin that raised
                // a read-only command's risk within what the profile runs
                // unasked makes it the profile's grant.
                let source = match evaluation.allowed_by {
                    Some(GrantSource::None) if risk != PolicyRisk::ReadOnly => GrantSource::Profile,
                    by => by.unwrap_or(GrantSource::None),
                };
                self.broker
                    .record_policy_allow(scope, &ask, Grant::for_risk(source, risk));
                source
            }
        };
        Ok(Gated {
            text,
            command,
            risk,
            reasons,
            grant: Grant::for_risk(source, risk),
        })
    }

    /// The sandbox spec: the plugin's limits clamped to the host's, the
    /// policy's network and mode, only the git variables the policy passes.
    fn spec(
        &self,
        command: capstan_sandbox::Command,
        workspace: &Path,
        cwd: PathBuf,
        req: &wit::ExecRequest,
        grant: Grant,
    ) -> capstan_sandbox::ExecSpec {
        let mut spec = capstan_sandbox::ExecSpec::new(command, workspace.to_path_buf());
        spec.cwd = cwd;
        spec.timeout = req
            .timeout_ms
            .map(|ms| Duration::from_millis(ms.into()))
            .unwrap_or(self.default_timeout)
            .min(MAX_TIMEOUT);
        spec.output_limit = req
            .output_limit
            .map(|n| n as usize)
            .unwrap_or(self.output_limit)
            .clamp(1024, 16 << 20);
        spec.network = grant.network && self.policy.network;
        spec.mode = self.policy.sandbox;
        spec.limits = self.sandbox.limits.clone();
        spec.read = self.sandbox.read.clone();
        spec.env = self
            .policy
            .env_allow
            .iter()
            .filter(|name| allowed_git_var(name))
            .filter_map(|name| std::env::var(name).ok().map(|v| (name.clone(), v)))
            .collect();
        spec.env.extend(git_safety_env(workspace));
        spec
    }

    /// Whether the user allowed this workspace any network (`[policy]
    /// network`, or `[network]` rules through the egress proxy).
    fn network_allowed(&self) -> bool {
        self.policy.network || self.sandbox.network.is_some()
    }

    /// With a `[network]` policy the command's only way out is its own
    /// egress proxy, started here and finished after the command.
    fn egress(
        &self,
        scope: &TaskScope,
        spec: &mut capstan_sandbox::ExecSpec,
        cwd_rel: &str,
    ) -> Result<Option<super::egress::CommandProxy>, wit::ExecError> {
        let Some(network) = &self.sandbox.network else {
            return Ok(None);
        };
        let proxy = super::egress::start(
            network.clone(),
            scope,
            self.broker.clone(),
            cwd_rel.to_string(),
        )
        .map_err(|e| {
            wit::ExecError::Failed(format!(
                "cannot start the egress proxy for the [network] policy: {e:#}"
            ))
        })?;
        spec.set_network(capstan_sandbox::Network::Proxy {
            socket: proxy.socket().to_path_buf(),
        });
        // Brokered credentials: the command trusts the workspace CA.
        spec.read.extend(proxy.read.iter().cloned());
        spec.env.extend(proxy.env.iter().cloned());
        Ok(Some(proxy))
    }

    /// A staging dir for the command's changes, when capture is on and the
    /// sandbox is required (only the sandbox's layer can see every write).
    fn staging(
        &self,
        mode: capstan_sandbox::SandboxMode,
    ) -> Result<Option<Staging>, wit::ExecError> {
        match (&self.changes, mode) {
            (Some(c), capstan_sandbox::SandboxMode::Required) => Ok(Some((
                c.clone(),
                c.store
                    .new_staging()
                    .map_err(|e| wit::ExecError::Failed(format!("cannot capture changes: {e}")))?,
            ))),
            _ => Ok(None),
        }
    }
}

/// Land or hold (review) what the command changed; a note on stderr says
/// when the changes were discarded or could not be kept.
async fn settle_changes(
    scope: &TaskScope,
    broker: &ApprovalBroker,
    staging: Staging,
    outcome: &mut capstan_sandbox::ExecOutcome,
    text: &str,
    cwd_rel: &str,
) {
    let (capture, (id, dir)) = staging;
    let Some(set) = outcome.changes.take() else {
        let _ = std::fs::remove_dir_all(&dir);
        return;
    };
    match capture.settle(scope, broker, id, set, text, cwd_rel).await {
        Err(e) => outcome.stderr.push_str(&format!("\ncapstan: {e}\n")),
        Ok(Some(r)) if r.state == capstan_changes::ChangeSetState::Discarded => outcome
            .stderr
            .push_str("\ncapstan: the command's changes to the workspace were not approved and were discarded\n"),
        Ok(_) => {}
    }
}

#[async_trait]
impl ExecService for Exec {
    fn changes(&self) -> Option<Arc<crate::plugins::context::Capture>> {
        self.changes.clone()
    }

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
        let context = Context {
            cwd: cwd
                .strip_prefix(&workspace)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            repo: RepoFacts::scan(&workspace, &cwd),
        };
        let Gated {
            text,
            command,
            risk,
            reasons,
            grant,
        } = self
            .gate(scope, req.command.clone(), &context, &cwd_rel, req.min_risk)
            .await?;

        let mut spec = self.spec(command, &workspace, cwd, &req, grant);
        // The network, the `[network]` rules and their credentials go only to
        // a command granted the network: one judged read-only, or let run as a
        // write, reaches no host, whatever the user allowed for the workspace.
        let egress = if grant.network {
            self.egress(scope, &mut spec, &cwd_rel)?
        } else {
            None
        };
        // Without a write grant the workspace is read-only: the grant is
        // enforced, not the judgement trusted, and with nothing to capture
        // the command needs no change layer (most of a small command's cost).
        spec.workspace_read_only = !grant.write;
        let read_only =
            spec.workspace_read_only && spec.mode == capstan_sandbox::SandboxMode::Required;
        let staging = if spec.workspace_read_only {
            None
        } else {
            self.staging(spec.mode)?
        };
        spec.capture = staging.as_ref().map(|(_, (_, dir))| dir.clone());
        let outcome = capstan_sandbox::run(spec, scope.run.cancel.child_token()).await;
        let refused = match egress {
            Some(proxy) => proxy.finish().await,
            None => String::new(),
        };
        let mut outcome = match outcome {
            Ok(mut o) => {
                o.stderr.push_str(&refused);
                o
            }
            Err(e) => {
                if let Some((_, (_, dir))) = &staging {
                    let _ = std::fs::remove_dir_all(dir);
                }
                return Err(wit::ExecError::Failed(e.to_string()));
            }
        };
        if read_only
            && outcome.exit_code != Some(0)
            && outcome.stderr.contains("Read-only file system")
        {
            outcome.stderr.push_str(
                "\ncapstan: this command was judged read-only, so the workspace was read-only while it ran. \
                 To change files, run a command that says so (a redirect, or a program that writes); \
                 if this program writes without saying so, report it: the classifier is wrong about it.\n",
            );
        }
        if !grant.network && self.network_allowed() && outcome.exit_code != Some(0) {
            outcome.stderr.push_str(&format!(
                "\ncapstan: this command ran with no network: it was judged {risk}, and only a command \
                 granted the network (judged `network` and approved, or run under an allow rule) \
                 reaches the hosts this workspace allows.\n"
            ));
        }
        scope.run.events.emit(Event::TerminalStep {
            task_id: scope.task_id.clone(),
            command: text.clone(),
            cwd: cwd_rel.clone(),
            risk: risk.to_string(),
            grant,
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            duration_ms: outcome.duration.as_millis() as u64,
            output_tail: tail(&format!("{}{}", outcome.stdout, outcome.stderr), 2000),
            truncated_bytes: outcome.truncated_bytes,
            timed_out: outcome.timed_out,
        });
        if let Some(staging) = staging {
            settle_changes(scope, &self.broker, staging, &mut outcome, &text, &cwd_rel).await;
        }
        if outcome.cancelled {
            return Err(wit::ExecError::Cancelled);
        }
        // The host's own word, not the plugin's: a task whose command ran into
        // a sandbox limit fails with `resource-limit` (see runtime::invoke).
        if let Some(limit) = outcome.limit_hit {
            let message = format!("`{text}`: {limit}");
            let _ = scope.resource_limit.set(message.clone());
            return Err(wit::ExecError::Failed(message));
        }
        Ok(wit::ExecOutput {
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            stdout: outcome.stdout,
            stderr: outcome.stderr,
            truncated_bytes: outcome.truncated_bytes,
            duration_ms: outcome.duration.as_millis() as u64,
            timed_out: outcome.timed_out,
            risk: risk.into(),
            reasons,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_can_only_make_a_command_ask_never_run() {
        use PolicyRisk::*;
        // `cat` is read_only; the plugin says network: cautious now asks.
        let (v, why) = apply_plugin_floor(Verdict::Allow, ReadOnly, Network, Profile::Cautious);
        assert_eq!(v, Verdict::Ask);
        assert_eq!(
            why.as_deref(),
            Some("the plugin asked to treat this as `network`")
        );
        // Within what the profile auto-runs: nothing changes.
        let (v, why) = apply_plugin_floor(Verdict::Allow, ReadOnly, Write, Profile::Trusted);
        assert_eq!((v, why), (Verdict::Allow, None));
        // A deny stays a deny; an ask stays an ask.
        let deny = Verdict::Deny { reason: "r".into() };
        assert_eq!(
            apply_plugin_floor(deny.clone(), ReadOnly, Unknown, Profile::Cautious).0,
            deny
        );
        assert_eq!(
            apply_plugin_floor(Verdict::Ask, Delete, Unknown, Profile::Trusted).0,
            Verdict::Ask
        );
    }

    #[test]
    fn allowed_variables_cannot_undo_the_git_settings() {
        assert!(allowed_git_var("GIT_AUTHOR_NAME"));
        assert!(allowed_git_var("RUST_LOG"));
        for name in [
            "GIT_CONFIG_PARAMETERS",
            "GIT_EXTERNAL_DIFF",
            "GIT_CONFIG_COUNT",
            "GIT_DIR",
        ] {
            assert!(!allowed_git_var(name), "{name}");
        }
        let env = git_safety_env(Path::new("/w/ws"));
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("GIT_CEILING_DIRECTORIES"), Some("/w"));
        assert_eq!(get("GIT_CONFIG_KEY_0"), Some("core.fsmonitor"));
        assert_eq!(
            get("GIT_CONFIG_COUNT"),
            Some(GIT_CONFIG_OVERRIDES.len().to_string().as_str())
        );
    }
}
