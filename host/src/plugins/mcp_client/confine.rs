//! `[[mcp_server]]` command servers in the OS sandbox (crates/sandbox, the
//! launcher terminal_exec commands use): a fresh filesystem view (system
//! directories read-only, the entry's `read` paths, the workspace only as
//! its `workspace` says, a private `/tmp` holding `HOME`), an unprivileged
//! identity, Landlock, seccomp, limits, and a network that is off unless
//! the entry lists hosts, which it then reaches only through an egress
//! proxy of its own (crates/egress) with exactly that allowlist. The proxy
//! lives as long as the server (servers are pooled per process, not per
//! task). Each connection is a `network.connect` event of the call running
//! on the server when there is one (all of one run), and always a line in
//! Capstan's log (target `capstan::egress`). A sandbox that cannot be set up
//! fails the server's start, naming it: never a silent fallback.

use std::path::{Path, PathBuf};
use std::time::Duration;

use capstan_egress::{ConnectionRecord, Policy, Proxy};
use capstan_sandbox::{Command, ExecSpec, Limits, Network, SandboxError, StdioTask};

use super::ClientSide;
use crate::config::{McpServerEntry, WorkspaceAccess};
use crate::plugins::services::egress::{RunningProxy, connect_event};

/// Whether the entry's server runs in the sandbox: every `command` server
/// unless `sandbox = false` is written.
pub fn sandboxed(entry: &McpServerEntry) -> bool {
    entry.command.is_some() && entry.sandbox != Some(false)
}

/// The entry's network rules as a policy (presets first); `None`: no
/// network at all.
pub fn policy(entry: &McpServerEntry) -> Result<Option<Policy>, String> {
    if entry.network.is_empty() && entry.network_presets.is_empty() {
        return Ok(None);
    }
    Policy::new(
        &entry.network,
        &Vec::<String>::new(),
        &entry.network_presets,
        false,
    )
    .map(Some)
    .map_err(|e| {
        format!("`network`: {e}; write hosts as in [network] allow (\"api.example.com\", \"*.example.com\", \"127.0.0.1:8080\")")
    })
}

/// The checks of the sandbox keys, with what to write instead.
pub fn validate(entry: &McpServerEntry) -> Result<(), String> {
    let sandbox_keys = entry.workspace != WorkspaceAccess::None
        || !entry.network.is_empty()
        || !entry.network_presets.is_empty()
        || !entry.read.is_empty();
    if entry.url.is_some() && (sandbox_keys || entry.sandbox.is_some()) {
        return Err(
            "`sandbox`, `workspace`, `network`, `network_presets` and `read` confine a spawned \
             `command`; a `url` server is not a process of Capstan's: remove them"
                .into(),
        );
    }
    if entry.sandbox == Some(false) && sandbox_keys {
        return Err(
            "`sandbox = false` runs the server unconfined, with all your files and network, so \
             `workspace`, `network`, `network_presets` and `read` would mean nothing: remove \
             them, or remove `sandbox = false` to confine the server to them"
                .into(),
        );
    }
    for p in &entry.read {
        if !p.is_absolute() || p == Path::new("/") {
            return Err(format!(
                "`read`: {} must be an absolute path other than `/`",
                p.display()
            ));
        }
    }
    policy(entry).map(|_| ())
}

/// How the server runs, for `capstan plugins list`.
pub fn describe(entry: &McpServerEntry) -> String {
    if entry.command.is_none() {
        return "remote (a url, no process of Capstan's)".into();
    }
    if !sandboxed(entry) {
        return "NOT sandboxed (sandbox = false): your files and network; scrubbed environment only"
            .into();
    }
    let mut network: Vec<String> = entry
        .network_presets
        .iter()
        .map(|p| format!("preset {p}"))
        .collect();
    network.extend(entry.network.iter().cloned());
    let network = if network.is_empty() {
        "none".to_string()
    } else {
        format!("{} (through the egress proxy)", network.join(", "))
    };
    let mut text = format!(
        "sandboxed; workspace: {}; network: {network}",
        entry.workspace.as_str()
    );
    if !entry.read.is_empty() {
        let read: Vec<String> = entry.read.iter().map(|p| p.display().to_string()).collect();
        text.push_str(&format!("; read: {}", read.join(", ")));
    }
    text
}

/// What keeps a sandboxed server's confinement alive: dropping it ends the
/// task (every process of it) and stops its proxy.
pub struct Confined {
    pub task: StdioTask,
    proxy: Option<RunningProxy>,
    _cwd: Option<tempfile::TempDir>,
}

/// Starts the entry's program in the sandbox for the workspace `workspace`
/// (`None`: none). `env` is the entry's resolved `env`; `limits` come from
/// `[sandbox]` (`SandboxSection::mcp_server_limits`).
pub async fn spawn(
    entry: &McpServerEntry,
    program: &str,
    workspace: Option<&Path>,
    env: Vec<(String, String)>,
    limits: &Limits,
    side: &ClientSide,
) -> Result<Confined, String> {
    // The server's root: the workspace when the entry grants it, otherwise
    // an empty private directory (also when the run has no workspace).
    let (access, shared) = match workspace {
        Some(ws) if entry.workspace != WorkspaceAccess::None => (entry.workspace, Some(ws)),
        _ => (WorkspaceAccess::None, None),
    };
    let mut private_cwd = None;
    let root: PathBuf = match shared {
        Some(ws) => ws.to_path_buf(),
        None => {
            let dir = tempfile::Builder::new()
                .prefix("capstan-mcp-cwd-")
                .tempdir()
                .map_err(|e| format!("cannot make a private directory for it: {e}"))?;
            let path = dir.path().to_path_buf();
            private_cwd = Some(dir);
            path
        }
    };
    // An absolute program path is resolved on the host: inside the view only
    // its real location may exist (`a/b/../c` needs `a/b`, which may not).
    let program = match Path::new(program) {
        p if p.is_absolute() => std::fs::canonicalize(p)
            .map(|real| real.to_string_lossy().into_owned())
            .unwrap_or_else(|_| program.to_string()),
        _ => program.to_string(),
    };
    let mut argv = vec![program];
    argv.extend(entry.args.iter().cloned());
    let mut spec = ExecSpec::new(Command::Argv(argv), &root);
    spec.env = env;
    spec.read = entry.read.clone();
    spec.workspace_read_only = access == WorkspaceAccess::Read;
    spec.limits = limits.clone();
    for p in &spec.read {
        if !p.exists() {
            return Err(format!(
                "its `read` path {} does not exist; correct `read` in its [[mcp_server]] entry",
                p.display()
            ));
        }
    }
    let proxy = match policy(entry)? {
        Some(policy) => Some(start_proxy(entry, policy, side)?),
        None => None,
    };
    spec.set_network(match &proxy {
        Some(p) => Network::Proxy {
            socket: p.socket.clone(),
        },
        None => Network::Off,
    });
    let task = capstan_sandbox::spawn_stdio(spec)
        .await
        .map_err(|e| sandbox_error(entry, e))?;
    Ok(Confined {
        task,
        proxy,
        _cwd: private_cwd,
    })
}

impl Confined {
    /// Waits (briefly) until the connections the server opened during a
    /// call are closed and recorded, so their events belong to that call.
    pub async fn settle(&self) {
        if let Some(p) = &self.proxy {
            p.proxy.idle(Duration::from_secs(2)).await;
        }
    }
}

/// Why a sandboxed server did not complete its handshake, when the sandbox
/// is the reason (it could not be set up); `None` when the program itself
/// ran and failed.
pub async fn why_not_started(confined: &mut Confined, entry: &McpServerEntry) -> Option<String> {
    confined
        .task
        .failure(Duration::from_secs(3))
        .await
        .map(|e| sandbox_error(entry, e))
}

/// A sandbox error, naming the server and the two ways on.
fn sandbox_error(entry: &McpServerEntry, e: SandboxError) -> String {
    let what = match e {
        SandboxError::Unsupported { what, .. } => what,
        other => other.to_string(),
    };
    format!(
        "the OS sandbox for MCP server `{}` cannot be set up on this machine ({what}); it was not \
         started. Fix the sandbox (`capstan sandbox check` says what is missing), or, knowing \
         that the server then runs with your user's files and network, write `sandbox = false` \
         in its [[mcp_server]] entry",
        entry.name
    )
}

/// The server's own proxy: its allowlist, no asking (an unlisted host is
/// denied, naming the rule to add to the entry's `network`).
fn start_proxy(
    entry: &McpServerEntry,
    policy: Policy,
    side: &ClientSide,
) -> Result<RunningProxy, String> {
    let (server, side) = (entry.name.clone(), side.clone());
    let audit = move |r: ConnectionRecord| {
        tracing::info!(
            target: "capstan::egress",
            mcp_server = %server,
            host = %r.host,
            port = r.port,
            verdict = ?r.verdict,
            rule = r.rule.as_deref().unwrap_or(""),
            reason = r.reason.as_deref().unwrap_or(""),
            bytes_up = r.bytes_up,
            bytes_down = r.bytes_down,
            "network.connect"
        );
        if let Ok((task_id, run)) = side.asker() {
            let reason = match (&r.reason, r.verdict) {
                (Some(why), capstan_egress::Verdict::Denied) => Some(format!(
                    "{why} (MCP server `{server}`: to allow it, add the host to `network` \
                     in its [[mcp_server]] entry)"
                )),
                (why, _) => why.clone(),
            };
            run.events.emit(connect_event(task_id, &r, reason));
        }
    };
    RunningProxy::serve(
        "capstan-mcp-egress-",
        Proxy::builder(policy).audit(audit).build(),
    )
    .map_err(|e| format!("cannot start its egress proxy: {e}"))
}
