//! The egress proxy of one command (`[network]`, crates/egress): started on a
//! Unix socket in a private directory before the command, bridged into its
//! network namespace by the sandbox, stopped after it. Each connection
//! becomes a `network.connect` event of the task; an unlisted host asks the
//! approval broker (`ask = true`), so a person, `--approve` or an earlier
//! "for this session" answers it, and the audit keeps the decision.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capstan_egress::{Ask, ConnectionRecord, Decision as EgressDecision, Policy, Proxy};
use capstan_store::Decision;
use tokio_util::sync::CancellationToken;

use super::approval::{ApprovalAsk, ApprovalBroker};
use crate::plugins::context::TaskScope;
use capstan_protocol::Event;

/// A running proxy; dropping it stops accepting.
pub struct CommandProxy {
    _dir: tempfile::TempDir,
    pub socket: PathBuf,
    proxy: Proxy,
    cancel: CancellationToken,
}

impl CommandProxy {
    /// Waits briefly until the command's last connections are recorded.
    pub async fn finish(self) {
        self.proxy.idle(Duration::from_secs(2)).await;
    }
}

impl Drop for CommandProxy {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Starts the proxy for one command of `scope`'s task.
pub fn start(
    policy: Policy,
    scope: &TaskScope,
    broker: Arc<ApprovalBroker>,
    cwd: String,
) -> std::io::Result<CommandProxy> {
    // tempfile makes the directory 0700: only Capstan can reach the socket
    // by path (the sandbox opens it before the command's view exists).
    let dir = tempfile::Builder::new()
        .prefix("capstan-egress-")
        .tempdir()?;
    let socket = dir.path().join("proxy.sock");
    let listener = capstan_egress::bind_unix(&socket)?;

    let events = scope.run.events.clone();
    let task_id = scope.task_id.clone();
    let audit = move |r: ConnectionRecord| {
        events.emit(Event::NetworkConnect {
            task_id: task_id.clone(),
            host: r.host.clone(),
            port: r.port,
            protocol: r.protocol,
            verdict: r.verdict,
            decided_by: r.decided_by,
            rule: r.rule.clone(),
            reason: r.reason.clone(),
            address: r.address.map(|a| a.to_string()),
            credential: r.credential.clone(),
            bytes_up: r.bytes_up,
            bytes_down: r.bytes_down,
            duration_ms: r.duration.as_millis() as u64,
        })
    };
    let scope = scope.clone();
    let hook = move |ask: Ask| {
        let (broker, scope, cwd) = (broker.clone(), scope.clone(), cwd.clone());
        async move {
            let decision = broker
                .ask(
                    &scope,
                    ApprovalAsk {
                        action: "network.connect".into(),
                        command: format!("connect {}:{}", ask.host, ask.port),
                        cwd,
                        risk: capstan_policy::Risk::Network,
                        reasons: vec![format!(
                            "a command wants to reach {}:{}, which no [network] rule names; \
                             to allow it always, add \"{}\" to [network] allow in capstan.toml",
                            ask.host, ask.port, ask.rule
                        )],
                    },
                )
                .await;
            match decision {
                Decision::Approved => EgressDecision::Once,
                Decision::ApprovedForSession => EgressDecision::Session,
                _ => EgressDecision::Deny,
            }
        }
    };
    let proxy = Proxy::builder(policy).audit(audit).hook(hook).build();
    let cancel = CancellationToken::new();
    let (p, c) = (proxy.clone(), cancel.clone());
    tokio::spawn(async move { p.serve_unix(listener, c).await });
    Ok(CommandProxy {
        _dir: dir,
        socket,
        proxy,
        cancel,
    })
}
