//! The egress proxy's state for `capstan sandbox check`: whether a
//! `[network]` policy is loaded, its presets, the credential hosts (by name
//! and variable or file, never a value), and whether this machine can
//! enforce it. A policy that cannot be enforced is an error: commands in a
//! workspace it applies to do not run (the sandbox refuses to start them
//! without their own network namespace), and the check says so.

use serde::Serialize;

use super::network::NetworkSection;

/// What `capstan sandbox check` says about `[network]`.
#[derive(Debug, Clone, Serialize)]
pub struct NetworkReport {
    /// Some `[network]` policy (global or per workspace) is configured.
    pub policy_loaded: bool,
    pub allow_rules: usize,
    pub deny_rules: usize,
    pub presets: Vec<String>,
    pub ask: bool,
    /// Workspaces with their own `[network.workspace."<root>"]` entry.
    pub workspaces: Vec<String>,
    /// `host:port (header, from $VAR | file PATH): set | not set`.
    pub credentials: Vec<String>,
    /// Every credential's value can be read now.
    pub credentials_ready: bool,
    /// The sandbox can give a command its own network namespace, seccomp and
    /// the filesystem view the proxy bridge needs.
    pub enforceable: bool,
    /// Why not, when not.
    pub problem: Option<String>,
}

impl NetworkReport {
    pub fn new(
        section: &NetworkSection,
        support: &capstan_sandbox::SupportReport,
        home: Option<&std::path::Path>,
    ) -> Self {
        let policy_loaded = !section.allow.is_empty()
            || !section.deny.is_empty()
            || !section.presets.is_empty()
            || section.ask
            || !section.workspace.is_empty();
        let mut credentials = Vec::new();
        let mut credentials_ready = true;
        for c in section
            .credential
            .iter()
            .chain(section.workspace.values().flat_map(|w| w.credential.iter()))
        {
            let source = match (&c.value_env, &c.value_file) {
                (Some(v), _) => format!("${v}"),
                (None, Some(f)) => format!("file {}", f.display()),
                (None, None) => "no value".into(),
            };
            let ready = c.resolve(home).is_ok();
            credentials_ready &= ready;
            credentials.push(format!(
                "{}:{} ({}, from {source}): {}",
                c.host,
                c.port.unwrap_or(443),
                c.header,
                if ready { "set" } else { "NOT READABLE" }
            ));
        }
        let enforceable = support.sandbox_available() && support.net_namespaces && support.seccomp;
        let problem = (!enforceable).then(|| {
            if !support.sandbox_available() {
                "the OS sandbox is not available here (see the rows above); a [network] policy \
                 needs it, so commands it applies to are refused rather than run with the host's \
                 network"
                    .to_string()
            } else {
                "no network namespace can be made here; a [network] policy needs one, so \
                 commands it applies to are refused rather than run with the host's network"
                    .to_string()
            }
        });
        NetworkReport {
            policy_loaded,
            allow_rules: section.allow.len(),
            deny_rules: section.deny.len(),
            presets: section.presets.clone(),
            ask: section.ask,
            workspaces: section
                .workspace
                .keys()
                .map(|p| p.display().to_string())
                .collect(),
            credentials,
            credentials_ready,
            enforceable,
            problem,
        }
    }

    /// A configured policy this machine cannot enforce, or a credential
    /// whose value cannot be read.
    pub fn failed(&self) -> bool {
        (self.policy_loaded && !self.enforceable) || !self.credentials_ready
    }
}

impl std::fmt::Display for NetworkReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "egress proxy ([network] in your capstan.toml)")?;
        if !self.policy_loaded {
            writeln!(
                f,
                "  policy:       none (commands get [policy] network: off, or the host's whole network)"
            )?;
        } else {
            writeln!(
                f,
                "  policy:       loaded: {} allow, {} deny rules; presets: {}; unlisted hosts: {}",
                self.allow_rules,
                self.deny_rules,
                if self.presets.is_empty() {
                    "-".into()
                } else {
                    self.presets.join(", ")
                },
                if self.ask { "ask" } else { "denied" }
            )?;
        }
        if !self.workspaces.is_empty() {
            writeln!(f, "  workspaces:   {}", self.workspaces.join(", "))?;
        }
        if self.credentials.is_empty() {
            writeln!(f, "  credentials:  none")?;
        }
        for c in &self.credentials {
            writeln!(f, "  credential:   {c}")?;
        }
        match &self.problem {
            None => write!(
                f,
                "  enforcement:  possible (own network namespace, seccomp, proxy bridge)"
            ),
            Some(p) if self.policy_loaded => write!(f, "  enforcement:  NOT POSSIBLE: {p}"),
            Some(p) => write!(f, "  enforcement:  not possible ({p})"),
        }
    }
}
