//! The egress proxy of one command (`[network]`, crates/egress): started on a
//! Unix socket in a private directory before the command, bridged into its
//! network namespace by the sandbox, stopped after it. Each connection
//! becomes a `network.connect` event of the task; an unlisted host asks the
//! approval broker (`ask = true`), so a person, `--approve` or an earlier
//! "for this session" answers it, and the audit keeps the decision.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_egress::{Ask, Ca, ConnectionRecord, Credential, Decision as EgressDecision, Proxy};
use capstan_store::Decision;
use tokio_util::sync::CancellationToken;

use super::approval::{ApprovalAsk, ApprovalBroker};
use crate::config::network::CommandNetwork;
use crate::plugins::context::TaskScope;
use capstan_protocol::Event;

/// A proxy serving on a Unix socket in a private directory: tempfile makes
/// it 0700, so only Capstan reaches the socket by path (the sandbox opens it
/// before the command's view exists). Dropping it stops accepting and
/// removes the directory. Commands and `[[mcp_server]]` servers both run
/// their proxies this way.
pub struct RunningProxy {
    _dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub proxy: Proxy,
    cancel: CancellationToken,
}

impl RunningProxy {
    /// Binds `<tmp>/<prefix>XXXX/proxy.sock` and serves `proxy` on it.
    pub fn serve(prefix: &str, proxy: Proxy) -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
        let socket = dir.path().join("proxy.sock");
        let listener = capstan_egress::bind_unix(&socket)?;
        let cancel = CancellationToken::new();
        let (p, c) = (proxy.clone(), cancel.clone());
        tokio::spawn(async move { p.serve_unix(listener, c).await });
        Ok(Self {
            _dir: dir,
            socket,
            proxy,
            cancel,
        })
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The `network.connect` event of a connection made during task `task_id`,
/// with `reason` in place of the record's own.
pub fn connect_event(task_id: String, r: &ConnectionRecord, reason: Option<String>) -> Event {
    Event::NetworkConnect {
        task_id,
        host: r.host.clone(),
        port: r.port,
        protocol: r.protocol,
        verdict: r.verdict,
        decided_by: r.decided_by,
        rule: r.rule.clone(),
        reason,
        address: r.address.map(|a| a.to_string()),
        credential: r.credential.clone(),
        bytes_up: r.bytes_up,
        bytes_down: r.bytes_down,
        duration_ms: r.duration.as_millis() as u64,
    }
}

/// The proxy of one command; dropping it stops accepting.
pub struct CommandProxy {
    running: RunningProxy,
    /// Files the command must be able to read (the workspace CA and the
    /// trust bundle, never the CA's key): extra read paths of the sandbox.
    pub read: Vec<PathBuf>,
    /// Variables that make the usual tools trust the workspace CA.
    pub env: Vec<(String, String)>,
    /// Why connections were refused, one line each (deduplicated).
    refused: Arc<Mutex<Vec<String>>>,
}

/// Refusals named on the command's stderr at most (the events keep them all).
const REFUSALS_SHOWN: usize = 5;

impl CommandProxy {
    /// The socket the sandbox bridges into the command's network namespace.
    pub fn socket(&self) -> &std::path::Path {
        &self.running.socket
    }

    /// Waits briefly until the command's last connections are recorded, then
    /// returns a note for the command's stderr naming each refused
    /// connection and the rule to add (empty when none was refused). Tools
    /// such as pip and npm print only "403"; the note is what tells the
    /// agent and the person which `[network]` rule would let them through.
    pub async fn finish(self) -> String {
        self.running.proxy.idle(Duration::from_secs(2)).await;
        let refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let mut note = String::new();
        for r in refused.iter().take(REFUSALS_SHOWN) {
            note.push_str(&format!(
                "\ncapstan: the egress proxy refused a connection: {r}\n"
            ));
        }
        if refused.len() > REFUSALS_SHOWN {
            note.push_str(&format!(
                "capstan: and {} more refused connections (see the network.connect events)\n",
                refused.len() - REFUSALS_SHOWN
            ));
        }
        note
    }
}

/// Starts the proxy for one command of `scope`'s task. Errors are sentences
/// naming what is wrong (a credential's variable not set, ...), never a
/// secret.
pub fn start(
    network: CommandNetwork,
    scope: &TaskScope,
    broker: Arc<ApprovalBroker>,
    cwd: String,
) -> anyhow::Result<CommandProxy> {
    let brokered = Brokered::open(&network)?;
    let events = scope.run.events.clone();
    let task_id = scope.task_id.clone();
    let refused = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = refused.clone();
    let audit = move |r: ConnectionRecord| {
        if r.verdict != capstan_egress::Verdict::Allowed {
            let line = match &r.reason {
                Some(why) => why.clone(),
                None => format!("{}:{}", r.host, r.port),
            };
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            if !seen.contains(&line) {
                seen.push(line);
            }
        }
        events.emit(connect_event(task_id.clone(), &r, r.reason.clone()))
    };
    let scope = scope.clone();
    let always = network.always.clone();
    let home = network.home.clone();
    let hook = move |ask: Ask| {
        let (broker, scope, cwd) = (broker.clone(), scope.clone(), cwd.clone());
        let (always, home) = (always.clone(), home.clone());
        async move {
            let mut reasons = vec![format!(
                "a command wants to reach {}:{}, which no [network] rule names; \
                 to allow it always, add \"{}\" to [network] allow in capstan.toml",
                ask.host, ask.port, ask.rule
            )];
            if let Some((file, root)) = &always {
                reasons.push(format!(
                    "\"always for this workspace\" writes \"{}\" under \
                     [network.workspace.\"{}\"] allow in {}",
                    ask.rule,
                    root.display(),
                    file.display()
                ));
            }
            let decision = broker
                .ask(
                    &scope,
                    ApprovalAsk {
                        action: "network.connect".into(),
                        command: format!("connect {}:{}", ask.host, ask.port),
                        cwd,
                        risk: capstan_policy::Risk::Network,
                        reasons,
                        always: always.as_ref().map(|_| ask.rule.clone()),
                    },
                )
                .await;
            match (decision, always) {
                (Decision::Approved, _) => EgressDecision::Once,
                (Decision::ApprovedForSession, _) => EgressDecision::Session,
                (Decision::ApprovedAlways, Some((file, root))) => {
                    super::egress_always::write(&scope, file, root, ask.rule, home).await
                }
                // Not offered, so not accepted by the broker.
                (Decision::ApprovedAlways, None) => EgressDecision::Session,
                _ => EgressDecision::Deny,
            }
        }
    };
    let mut builder = Proxy::builder(network.policy).audit(audit).hook(hook);
    let (mut read, mut env) = (Vec::new(), Vec::new());
    if let Some(b) = brokered {
        read = b.read;
        env = b.env;
        builder = builder.credentials(b.ca, b.credentials);
        if !b.upstream_ca.is_empty() {
            builder = builder.upstream_ca(b.upstream_ca);
        }
    }
    Ok(CommandProxy {
        running: RunningProxy::serve("capstan-egress-", builder.build())?,
        read,
        env,
        refused,
    })
}

/// What brokering the workspace's credentials takes: the credentials with
/// their values read, the workspace CA, and what the command needs to trust
/// it.
struct Brokered {
    credentials: Vec<Credential>,
    ca: Arc<Ca>,
    upstream_ca: Vec<capstan_egress::CertificateDer<'static>>,
    read: Vec<PathBuf>,
    env: Vec<(String, String)>,
}

impl Brokered {
    /// `None` when no credential applies to the workspace.
    fn open(network: &CommandNetwork) -> anyhow::Result<Option<Brokered>> {
        if network.credentials.is_empty() {
            return Ok(None);
        }
        let credentials = network
            .credentials
            .iter()
            .map(|c| c.resolve(network.home.as_deref()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if let Some(parent) = network.ca_dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
        }
        let ca = Ca::open_or_create(&network.ca_dir).map_err(|e| {
            anyhow::anyhow!(
                "the workspace CA for [[network.credential]] ({}): {e}",
                network.ca_dir.display()
            )
        })?;
        let bundle = ca
            .write_bundle(None)
            .map_err(|e| anyhow::anyhow!("the workspace CA bundle: {e}"))?;
        let mut upstream_ca = Vec::new();
        for f in &network.upstream_ca {
            let pem = crate::config::network::read_upstream_ca(f)?;
            upstream_ca.extend(
                capstan_egress::certs_from_pem(&pem)
                    .map_err(|e| anyhow::anyhow!("[network] upstream_ca {}: {e}", f.display()))?,
            );
        }
        let env = ca
            .sandbox_env(&bundle)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_string_lossy().into_owned()))
            .collect();
        Ok(Some(Brokered {
            credentials,
            read: vec![ca.cert_path(), bundle],
            ca: Arc::new(ca),
            upstream_ca,
            env,
        }))
    }
}
