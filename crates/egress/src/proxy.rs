//! The proxy: decides each connection, connects to the checked address, relays
//! and audits.
//!
//! One listener (a Unix socket for the sandbox bridge, or TCP) serves three
//! protocols, told apart by the first byte: SOCKS5 (`0x05`), else HTTP/1.x
//! (`CONNECT host:port` tunnels and absolute-form plain-HTTP requests).
//!
//! Invariants:
//! * Every connection is decided by [`Proxy::authorize`] before a byte reaches
//!   the host: deny rules, allow rules, grants of this session, then (for an
//!   unlisted host with `ask = true`) the [`DecisionHook`]; then the name is
//!   resolved once, every address is checked (see [`crate::address`]), and
//!   the proxy connects only to a checked address.
//! * On a keep-alive plain-HTTP connection every request is decided on its own
//!   host; a different host is a new upstream connection.
//! * A `CONNECT` tunnel carries bytes to the one address it was granted: what
//!   the command writes inside it goes to that host, never back to the proxy.
//! * Every decided connection produces exactly one [`ConnectionRecord`].
//! * A `CONNECT` or SOCKS5 connection to a host and port with a brokered
//!   [`Credential`] is the one exception to blind tunnels: the proxy
//!   terminates it (see [`crate::credential`]); nothing else is ever
//!   decrypted.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio_util::sync::CancellationToken;

use crate::address::{Resolver, SystemResolver, canonical, special};
use crate::audit::{Audit, ConnectionRecord, DecidedBy, LogOnly, Protocol, Verdict};
use crate::credential::{Ca, Credential};
use crate::decide::{Ask, Decision, DecisionHook};
use crate::rules::{NameVerdict, Policy, Rule, Target};
use crate::splice::Mode;
use crate::stream::{Buffered, Counted, Counters};

/// How long one connection attempt to a host may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection the checks allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The checked addresses, in the resolver's order.
    pub addrs: Vec<SocketAddr>,
    /// What allowed it.
    pub decided_by: DecidedBy,
    /// The rule that allowed it (policy, session grant or a person's "session"/"always"); absent for "once".
    pub rule: Option<String>,
}

/// A connection the checks refused, or that could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `Denied` by the checks, or `Allowed` but failed (the name does not
    /// resolve, the host does not answer).
    pub verdict: Verdict,
    /// What settled the verdict.
    pub decided_by: DecidedBy,
    /// The rule that matched, when one did.
    pub rule: Option<String>,
    /// A sentence for the command's user: what happened and, for a denial,
    /// the rule that would allow it.
    pub reason: String,
}

struct Inner {
    policy: RwLock<Policy>,
    /// Grants of this session ("for this session", "always").
    session: Mutex<Vec<Rule>>,
    broker: Broker,
    resolver: Arc<dyn Resolver>,
    hook: Option<Arc<dyn DecisionHook>>,
    audit: Arc<dyn Audit>,
    /// Client connections being served.
    active: std::sync::atomic::AtomicUsize,
    /// How bytes go between two raw sockets.
    relay: Mode,
}

/// What credential brokering needs (see [`crate::credential`]).
#[derive(Default)]
pub(crate) struct Broker {
    pub credentials: Vec<Arc<Credential>>,
    pub ca: Option<Arc<Ca>>,
    pub upstream_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Built on the first terminated connection.
    pub client_config: OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
}

/// The egress proxy. Cheap to clone (one shared state).
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

/// Builds a [`Proxy`].
pub struct ProxyBuilder {
    policy: Policy,
    resolver: Arc<dyn Resolver>,
    hook: Option<Arc<dyn DecisionHook>>,
    audit: Arc<dyn Audit>,
    broker: Broker,
    relay: Mode,
}

impl ProxyBuilder {
    /// Relays every byte through user space, as for TLS, even between two
    /// raw sockets where `splice(2)` would do (benches compare the two; only
    /// with the `bench-copy` feature, never enabled by Capstan).
    #[cfg(feature = "bench-copy")]
    pub fn copy_relay(mut self) -> Self {
        self.relay = Mode::Copy;
        self
    }

    #[cfg(test)]
    pub(crate) fn relay_mode(mut self, mode: Mode) -> Self {
        self.relay = mode;
        self
    }

    /// Brokers `credentials`: a `CONNECT` (or SOCKS5) to a credential's host
    /// and port is terminated with a certificate `ca` issues, and the header
    /// is set on every request (see [`crate::credential`] for the
    /// invariants). Other hosts stay blind tunnels.
    pub fn credentials(mut self, ca: Arc<Ca>, credentials: Vec<Credential>) -> Self {
        self.broker.ca = Some(ca);
        self.broker.credentials = credentials.into_iter().map(Arc::new).collect();
        self
    }

    /// Trusts `certs` (besides the system's roots) when verifying a
    /// credential host's certificate: a host with a private CA, or a test.
    pub fn upstream_ca(mut self, certs: Vec<rustls::pki_types::CertificateDer<'static>>) -> Self {
        self.broker.upstream_roots.extend(certs);
        self
    }

    /// Resolves names with `resolver` (default: the system's).
    pub fn resolver(mut self, resolver: impl Resolver) -> Self {
        self.resolver = Arc::new(resolver);
        self
    }

    /// Asks `hook` about unlisted hosts when the policy says `ask = true`.
    pub fn hook(mut self, hook: impl DecisionHook) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Sends a record of every connection to `audit`.
    pub fn audit(mut self, audit: impl Audit) -> Self {
        self.audit = Arc::new(audit);
        self
    }

    /// The proxy, ready to serve connections.
    pub fn build(self) -> Proxy {
        Proxy {
            inner: Arc::new(Inner {
                policy: RwLock::new(self.policy),
                session: Mutex::new(Vec::new()),
                broker: self.broker,
                resolver: self.resolver,
                hook: self.hook,
                audit: self.audit,
                active: std::sync::atomic::AtomicUsize::new(0),
                relay: self.relay,
            }),
        }
    }
}

impl Proxy {
    /// A proxy enforcing `policy`, with no credential broker, no decision hook
    /// (unlisted hosts are denied), the system resolver and a log-only audit.
    pub fn builder(policy: Policy) -> ProxyBuilder {
        ProxyBuilder {
            policy,
            resolver: Arc::new(SystemResolver),
            hook: None,
            audit: Arc::new(LogOnly),
            broker: Broker::default(),
            relay: Mode::Splice,
        }
    }

    pub(crate) fn relay_mode(&self) -> Mode {
        self.inner.relay
    }

    /// The credential for `host:port`, when one is brokered (and a CA can
    /// terminate it).
    pub(crate) fn credential_for(&self, host: &str, port: u16) -> Option<Arc<Credential>> {
        let b = &self.inner.broker;
        b.ca.as_ref()?;
        b.credentials
            .iter()
            .find(|c| c.matches(host, port))
            .cloned()
    }

    pub(crate) fn broker(&self) -> &Broker {
        &self.inner.broker
    }

    /// The policy in force (without this session's grants).
    pub fn policy(&self) -> Policy {
        self.inner
            .policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the policy (the configuration changed); grants of this
    /// session stay.
    pub fn set_policy(&self, policy: Policy) {
        *self.inner.policy.write().unwrap_or_else(|e| e.into_inner()) = policy;
    }

    fn session_grant(&self, target: &Target, port: u16) -> Option<String> {
        let session = self.inner.session.lock().unwrap_or_else(|e| e.into_inner());
        session
            .iter()
            .find(|r| match target {
                Target::Name(n) => r.matches_name(n, port),
                Target::Ip(ip) => r.matches_addr(*ip, port),
            })
            .map(|r| r.as_str().to_owned())
    }

    /// Allows `rule` until this proxy stops.
    pub fn grant(&self, rule: Rule) {
        let mut session = self.inner.session.lock().unwrap_or_else(|e| e.into_inner());
        if !session.contains(&rule) {
            session.push(rule);
        }
    }

    /// Decides a connection to `host:port` and resolves it to checked
    /// addresses. See the module docs for the order of the checks.
    pub async fn authorize(&self, host: &str, port: u16) -> Result<Grant, Refusal> {
        let deny = |decided_by, rule, reason: String| Refusal {
            verdict: Verdict::Denied,
            decided_by,
            rule,
            reason,
        };
        let Some(target) = Target::parse(host) else {
            return Err(deny(
                DecidedBy::Policy,
                None,
                format!("{host:?} is not a host name or an IP address"),
            ));
        };
        if port == 0 {
            return Err(deny(DecidedBy::Policy, None, "port 0 is not a port".into()));
        }
        let suggested = target.rule_for(port);
        let (ask, verdict) = {
            let policy = self.inner.policy.read().unwrap_or_else(|e| e.into_inner());
            (policy.ask, policy.check(&target, port))
        };
        let (decided_by, rule) = match verdict {
            NameVerdict::Denied { rule } => {
                return Err(deny(
                    DecidedBy::Policy,
                    Some(rule.clone()),
                    format!("{target}:{port} is refused by the rule \"{rule}\" in [network] deny"),
                ));
            }
            NameVerdict::Allowed { rule } => (DecidedBy::Policy, Some(rule)),
            NameVerdict::Unlisted => match self.session_grant(&target, port) {
                Some(rule) => (DecidedBy::Session, Some(rule)),
                None => match (&self.inner.hook, ask) {
                    (Some(hook), true) => {
                        let decision = hook
                            .decide(Ask {
                                host: target.to_string(),
                                port,
                                rule: suggested.clone(),
                            })
                            .await;
                        match decision {
                            Decision::Deny => {
                                return Err(deny(
                                    DecidedBy::Person,
                                    None,
                                    format!(
                                        "{target}:{port} was denied when asked; to allow it, add \
                                         \"{suggested}\" to [network] allow in capstan.toml"
                                    ),
                                ));
                            }
                            Decision::Once => (DecidedBy::Person, None),
                            Decision::Session | Decision::Always => {
                                if let Ok(rule) = Rule::parse(&suggested) {
                                    self.grant(rule);
                                }
                                (DecidedBy::Person, Some(suggested.clone()))
                            }
                        }
                    }
                    _ => {
                        return Err(deny(
                            DecidedBy::Default,
                            None,
                            format!(
                                "{target}:{port} is not in the workspace's network allowlist; \
                                 add \"{suggested}\" to [network] allow in capstan.toml{}",
                                if ask {
                                    ""
                                } else {
                                    " (or set ask = true to be asked)"
                                }
                            ),
                        ));
                    }
                },
            },
        };

        let ips = match &target {
            Target::Ip(ip) => vec![*ip],
            Target::Name(name) => {
                let resolver = self.inner.resolver.clone();
                let name2 = name.clone();
                let answer = tokio::task::spawn_blocking(move || resolver.resolve(&name2))
                    .await
                    .map_err(std::io::Error::other)
                    .and_then(|r| r);
                match answer {
                    Ok(ips) if !ips.is_empty() => ips,
                    Ok(_) | Err(_) => {
                        return Err(Refusal {
                            verdict: Verdict::Allowed,
                            decided_by,
                            rule,
                            reason: format!("{name} does not resolve"),
                        });
                    }
                }
            }
        };
        // A person who allowed an IP literal named that very address.
        let literal_by_person = matches!(target, Target::Ip(_)) && decided_by == DecidedBy::Person;
        let mut addrs = Vec::new();
        let mut refused = Vec::new();
        {
            let policy = self.inner.policy.read().unwrap_or_else(|e| e.into_inner());
            for ip in ips {
                let ip = canonical(ip);
                if let Some(r) = policy.address_denied(ip, port) {
                    refused.push(format!("{ip} is refused by the rule \"{r}\""));
                    continue;
                }
                if let Some(class) = special(ip) {
                    let named = policy.address_allowed(ip, port).is_some()
                        || self.session_grant(&Target::Ip(ip), port).is_some()
                        || literal_by_person;
                    if !named {
                        let rule = Target::Ip(ip).rule_for(port);
                        refused.push(format!(
                            "{ip} is {class}, refused unless a rule names it (add \"{rule}\" to \
                             [network] allow to reach it)"
                        ));
                        continue;
                    }
                }
                addrs.push(SocketAddr::new(ip, port));
            }
        }
        if addrs.is_empty() {
            let what = match &target {
                Target::Name(n) => format!("{n} resolves only to refused addresses: "),
                Target::Ip(_) => String::new(),
            };
            return Err(deny(
                DecidedBy::Policy,
                None,
                format!("{what}{}", refused.join("; ")),
            ));
        }
        Ok(Grant {
            addrs,
            decided_by,
            rule,
        })
    }

    /// Connects to the first checked address that answers. Never resolves.
    pub(crate) async fn connect(grant: &Grant) -> Result<(TcpStream, SocketAddr), String> {
        let mut errors = Vec::new();
        for addr in &grant.addrs {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(*addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok((s, *addr));
                }
                Ok(Err(e)) => errors.push(format!("{addr}: {e}")),
                Err(_) => errors.push(format!("{addr}: no answer in {CONNECT_TIMEOUT:?}")),
            }
        }
        Err(format!("cannot connect ({})", errors.join("; ")))
    }

    /// Decides, then connects: the one way every protocol opens an upstream
    /// connection. On failure the record is already sent.
    pub(crate) async fn open(
        &self,
        host: &str,
        port: u16,
        protocol: Protocol,
    ) -> Result<Upstream, Refusal> {
        let started = Instant::now();
        let grant = match self.authorize(host, port).await {
            Ok(g) => g,
            Err(r) => {
                self.record(Record {
                    host,
                    port,
                    protocol,
                    verdict: r.verdict,
                    decided_by: r.decided_by,
                    rule: r.rule.clone(),
                    reason: Some(r.reason.clone()),
                    credential: None,
                    address: None,
                    counters: None,
                    started,
                });
                return Err(r);
            }
        };
        match Self::connect(&grant).await {
            Ok((stream, address)) => Ok(Upstream {
                host: host.to_owned(),
                port,
                protocol,
                decided_by: grant.decided_by,
                rule: grant.rule,
                address,
                counters: Arc::new(Counters::default()),
                note: None,
                credential: None,
                started,
                stream: Some(stream),
            }),
            Err(reason) => {
                let r = Refusal {
                    verdict: Verdict::Allowed,
                    decided_by: grant.decided_by,
                    rule: grant.rule,
                    reason,
                };
                self.record(Record {
                    host,
                    port,
                    protocol,
                    verdict: r.verdict,
                    decided_by: r.decided_by,
                    rule: r.rule.clone(),
                    reason: Some(r.reason.clone()),
                    credential: None,
                    address: None,
                    counters: None,
                    started,
                });
                Err(r)
            }
        }
    }

    /// The record of a connection that ran (called when it ends).
    pub(crate) fn finish(&self, up: &Upstream, error: Option<String>) {
        self.record(Record {
            host: &up.host,
            port: up.port,
            protocol: up.protocol,
            verdict: Verdict::Allowed,
            decided_by: up.decided_by,
            rule: up.rule.clone(),
            reason: error.or_else(|| up.note.clone()),
            credential: up.credential.clone(),
            address: Some(up.address),
            counters: Some(&up.counters),
            started: up.started,
        });
    }

    fn record(&self, r: Record<'_>) {
        let (up, down) = r.counters.map_or((0, 0), |c| {
            (
                c.up.load(std::sync::atomic::Ordering::Relaxed),
                c.down.load(std::sync::atomic::Ordering::Relaxed),
            )
        });
        self.inner.audit.record(ConnectionRecord {
            host: r.host.to_owned(),
            port: r.port,
            protocol: r.protocol,
            verdict: r.verdict,
            decided_by: r.decided_by,
            rule: r.rule,
            reason: r.reason,
            credential: r.credential,
            address: r.address,
            bytes_up: up,
            bytes_down: down,
            duration: r.started.elapsed(),
        });
    }

    /// Serves one client connection (any stream) until it ends.
    /// A tokio `TcpStream` or `UnixStream` client has its tunnels (and the
    /// bodies framed by length) spliced rather than copied.
    pub async fn handle<S>(&self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        use std::sync::atomic::Ordering;
        self.inner.active.fetch_add(1, Ordering::SeqCst);
        let mut client = Buffered::new(stream).splicing(self.inner.relay);
        match client.peek_byte().await {
            Ok(Some(0x05)) => crate::socks::serve(self, client).await,
            Ok(Some(_)) => crate::http::serve(self, client).await,
            Ok(None) | Err(_) => {}
        }
        self.inner.active.fetch_sub(1, Ordering::SeqCst);
    }

    /// Waits (at most `bound`) until no client connection is being served,
    /// so that the records of a command's connections are all sent when it
    /// has ended.
    pub async fn idle(&self, bound: Duration) {
        let until = Instant::now() + bound;
        while self.inner.active.load(std::sync::atomic::Ordering::SeqCst) > 0
            && Instant::now() < until
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Accepts clients on a Unix socket until `cancel` fires.
    pub async fn serve_unix(&self, listener: UnixListener, cancel: CancellationToken) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok((s, _)) => {
                        crate::splice::widen_send_buffer(&s);
                        let me = self.clone();
                        tokio::spawn(async move { me.handle(s).await });
                    }
                    Err(e) => {
                        tracing::warn!(target: "capstan_egress", error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
    }

    /// Accepts clients on TCP until `cancel` fires (benches and tools; the
    /// sandbox bridge uses [`Proxy::serve_unix`]).
    pub async fn serve_tcp(&self, listener: TcpListener, cancel: CancellationToken) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok((s, _)) => {
                        let _ = s.set_nodelay(true);
                        let me = self.clone();
                        tokio::spawn(async move { me.handle(s).await });
                    }
                    Err(e) => {
                        tracing::warn!(target: "capstan_egress", error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
    }
}

/// Binds the proxy's Unix socket at `path` (which must not exist), readable
/// and writable by the sandbox's unprivileged identity: keep it in a
/// directory only Capstan can enter (the sandbox reaches it through a
/// descriptor opened before the command's view is built, never by path).
pub fn bind_unix(path: &std::path::Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(l)
}

struct Record<'a> {
    host: &'a str,
    port: u16,
    protocol: Protocol,
    verdict: Verdict,
    decided_by: DecidedBy,
    rule: Option<String>,
    reason: Option<String>,
    credential: Option<String>,
    address: Option<SocketAddr>,
    counters: Option<&'a Arc<Counters>>,
    started: Instant,
}

/// An open, granted upstream connection.
pub(crate) struct Upstream {
    pub host: String,
    pub port: u16,
    pub protocol: Protocol,
    pub decided_by: DecidedBy,
    pub rule: Option<String>,
    pub address: SocketAddr,
    pub counters: Arc<Counters>,
    pub started: Instant,
    /// Said in the record's reason when nothing failed.
    pub note: Option<String>,
    /// The header of the credential injected, for the record.
    pub credential: Option<String>,
    stream: Option<TcpStream>,
}

impl Upstream {
    /// The connection, counting bytes into this record.
    /// Taken once: a second call is an error.
    pub fn take_stream(&mut self) -> std::io::Result<Counted<TcpStream>> {
        let io = self.stream.take().ok_or_else(|| {
            std::io::Error::other("the upstream connection was already handed out")
        })?;
        Ok(Counted {
            io,
            counters: self.counters.clone(),
        })
    }
}
