//! `[network]` in the user's capstan.toml: the egress policy of sandboxed
//! commands. When a workspace has one (any allow, deny or preset, or
//! `ask = true`), its commands get no network but the egress proxy
//! (crates/egress), which decides each connection; without one the old
//! `[policy] network` switch holds (off, or the host's whole network).
//!
//! Only the user's own file is read for it: a workspace's capstan.toml can be
//! written by a command and must not widen its own network.
//!
//! ```toml
//! [network]
//! allow = ["api.github.com:443"]
//! presets = ["cargo", "npm"]
//! deny = ["*.evil.example"]
//! ask = true                      # unlisted hosts ask (else: denied, naming the rule to add)
//!
//! [network.workspace."/home/me/project"]
//! allow = ["pypi.internal.example"]
//!
//! [[network.credential]]           # brokered: the sandbox never sees the value
//! host = "api.github.com"
//! header = "Authorization"
//! value_env = "GITHUB_TOKEN"       # or value_file = "~/.config/tokens/github"
//! ```
//!
//! A credential is injected by the proxy on HTTPS requests to its host (it
//! terminates TLS for that host only, with a per-workspace CA under Capstan's
//! data dir that the command is told to trust). The value is read when a
//! command starts, from Capstan's own environment or a file of the user's; a
//! workspace's capstan.toml can neither supply nor name one (config::check).
//! A credential does not allow its host: an allow rule must.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// `[network]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSection {
    /// Hosts commands may reach (`crates.io`, `*.npmjs.org`,
    /// `api.github.com:443`, `10.0.0.0/8`); ports 80 and 443 unless written.
    pub allow: Vec<String>,
    /// Hosts refused even when an allow rule or a person says yes.
    pub deny: Vec<String>,
    /// Named lists of package-registry hosts: `cargo`, `npm`, `pypi`, `debian`.
    pub presets: Vec<String>,
    /// Ask a person about hosts no rule names (else they are denied).
    pub ask: bool,
    /// Per-workspace additions: `[network.workspace."/path"] allow = [...]`.
    pub workspace: BTreeMap<PathBuf, WorkspaceNetwork>,
    /// `[[network.credential]]`: headers the proxy sets for every workspace.
    pub credential: Vec<CredentialEntry>,
    /// PEM files of extra CAs the proxy trusts (besides the system's) when it
    /// opens TLS to a credential's host itself (a company CA, a test server).
    pub upstream_ca: Vec<PathBuf>,
}

/// `[[network.credential]]`: `header: <secret>` on HTTPS requests to `host`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CredentialEntry {
    /// A host name (never an IP address).
    pub host: String,
    /// 443 unless set.
    pub port: Option<u16>,
    /// The header the service reads, usually `Authorization`.
    pub header: String,
    /// The environment variable of Capstan's own environment holding the value.
    pub value_env: Option<String>,
    /// A file holding the value (`~/` is the home directory).
    pub value_file: Option<PathBuf>,
}

impl CredentialEntry {
    /// How the entry is named in errors and reports (never its value).
    pub fn label(&self) -> String {
        format!(
            "[[network.credential]] host = \"{}\" header = \"{}\"",
            self.host, self.header
        )
    }

    /// The shape, without reading the value: host, header, exactly one source.
    pub fn check(&self) -> Result<()> {
        match (&self.value_env, &self.value_file) {
            (Some(_), Some(_)) => anyhow::bail!(
                "{}: both value_env and value_file are set; keep one",
                self.label()
            ),
            (None, None) => anyhow::bail!(
                "{}: no value: set value_env = \"NAME\" (a variable of the environment Capstan \
                 starts in) or value_file = \"/path/to/secret\"",
                self.label()
            ),
            (Some(name), None) if name.is_empty() || name.contains('=') => anyhow::bail!(
                "{}: value_env {name:?} is not an environment variable name",
                self.label()
            ),
            _ => {}
        }
        let placeholder = capstan_egress::Secret::new("x").map_err(|e| anyhow::anyhow!("{e}"))?;
        capstan_egress::Credential::new(&self.host, &self.header, placeholder)
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.label()))?;
        Ok(())
    }

    /// The credential with its value read now. The error names the entry and
    /// what to do, never the value.
    pub fn resolve(&self, home: Option<&Path>) -> Result<capstan_egress::Credential> {
        self.check()?;
        let secret = match (&self.value_env, &self.value_file) {
            (Some(name), _) => capstan_egress::Secret::from_env(name),
            (None, Some(file)) => {
                capstan_egress::Secret::from_file(&super::expand_home(file, home)).map_err(|e| {
                    capstan_egress::CredentialError(format!(
                        "{e} (make the file readable by the user Capstan runs as, or use value_env)"
                    ))
                })
            }
            (None, None) => anyhow::bail!("{}: no value", self.label()),
        }
        .map_err(|e| anyhow::anyhow!("{}: {e}", self.label()))?;
        let c = capstan_egress::Credential::new(&self.host, &self.header, secret)
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.label()))?;
        Ok(match self.port {
            Some(p) => c.on_port(p),
            None => c,
        })
    }
}

/// `[network.workspace."<root>"]`: rules added for that workspace.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceNetwork {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub presets: Vec<String>,
    /// `Some` overrides `[network] ask` for this workspace.
    pub ask: Option<bool>,
    /// Credentials for this workspace only.
    pub credential: Vec<CredentialEntry>,
}

/// The network of commands in one workspace: the policy, the credentials
/// the proxy injects (values not yet read) and where the workspace's CA
/// lives. Built by the app (`App::sandbox_for`), used by the per-command
/// proxy (plugins::services::egress).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandNetwork {
    pub policy: capstan_egress::Policy,
    pub credentials: Vec<CredentialEntry>,
    /// Extra upstream CAs (PEM files) for the credential hosts.
    pub upstream_ca: Vec<PathBuf>,
    /// `<data dir>/egress-ca/<workspace id>`: the CA that signs the hosts
    /// whose TLS the proxy terminates (only made when a credential applies).
    pub ca_dir: PathBuf,
    /// The home directory, for `~/` in `value_file`.
    pub home: Option<PathBuf>,
    /// "Always for this workspace": the user's capstan.toml and the
    /// workspace root the rule is written under (`None`: no workspace).
    pub always: Option<(PathBuf, PathBuf)>,
}

impl NetworkSection {
    /// Every rule and preset read, so a typo stops Capstan at start-up with
    /// the rule and what a rule looks like (never a policy silently off).
    pub fn check(&self) -> Result<()> {
        let all = std::iter::once((None, &self.allow, &self.deny, &self.presets)).chain(
            self.workspace
                .iter()
                .map(|(root, w)| (Some(root), &w.allow, &w.deny, &w.presets)),
        );
        for (root, allow, deny, presets) in all {
            capstan_egress::Policy::new(allow, deny, presets, false).map_err(|e| {
                let place = match root {
                    Some(r) => format!("[network.workspace.\"{}\"]", r.display()),
                    None => "[network]".into(),
                };
                anyhow::anyhow!("{place} in capstan.toml: {e}")
            })?;
        }
        for c in self
            .credential
            .iter()
            .chain(self.workspace.values().flat_map(|w| w.credential.iter()))
        {
            c.check()
                .map_err(|e| anyhow::anyhow!("capstan.toml: {e:#}"))?;
        }
        for f in &self.upstream_ca {
            read_upstream_ca(f)?;
        }
        Ok(())
    }

    /// The network of commands in `workspace` (see [`CommandNetwork`]), or
    /// `None` when no `[network]` policy applies there.
    pub fn command_network(
        &self,
        workspace: Option<&Path>,
        home: Option<&Path>,
        data_dir: &Path,
        user_file: &Path,
    ) -> Option<CommandNetwork> {
        let policy = self.policy_for(workspace, home)?;
        let mut credentials = self.credential.clone();
        if let Some(ws) = workspace {
            for (root, w) in &self.workspace {
                if same_root(root, ws, home) {
                    credentials.extend(w.credential.iter().cloned());
                }
            }
        }
        let id = match workspace {
            Some(ws) => hex::encode(&sha2::Sha256::digest(ws.as_os_str().as_encoded_bytes())[..8]),
            None => "no-workspace".into(),
        };
        Some(CommandNetwork {
            policy,
            credentials,
            upstream_ca: self
                .upstream_ca
                .iter()
                .map(|p| super::expand_home(p, home))
                .collect(),
            ca_dir: data_dir.join("egress-ca").join(id),
            home: home.map(Path::to_path_buf),
            always: workspace.map(|ws| (user_file.to_path_buf(), ws.to_path_buf())),
        })
    }

    /// The egress policy of commands in `workspace`, or `None` when neither
    /// `[network]` nor the workspace's entry sets one.
    pub fn policy_for(
        &self,
        workspace: Option<&Path>,
        home: Option<&Path>,
    ) -> Option<capstan_egress::Policy> {
        let mut allow = self.allow.clone();
        let mut deny = self.deny.clone();
        let mut presets = self.presets.clone();
        let mut ask = self.ask;
        if let Some(ws) = workspace {
            for (root, w) in &self.workspace {
                if same_root(root, ws, home) {
                    allow.extend(w.allow.iter().cloned());
                    deny.extend(w.deny.iter().cloned());
                    presets.extend(w.presets.iter().cloned());
                    ask = w.ask.unwrap_or(ask);
                }
            }
            // Written by "always for this workspace" since start-up.
            allow.extend(super::network_always::written_for(ws));
        }
        if allow.is_empty() && deny.is_empty() && presets.is_empty() && !ask {
            return None;
        }
        // Checked at start-up (`check`); a rule that fails here anyway
        // denies everything rather than opening anything.
        Some(
            capstan_egress::Policy::new(&allow, &deny, &presets, ask).unwrap_or_else(|e| {
                tracing::error!("[network] policy unreadable, denying all: {e}");
                capstan_egress::Policy::default()
            }),
        )
    }
}

/// Whether `[…workspace."<root>"]` names the workspace `ws` (canonical).
pub(super) fn same_root(root: &Path, ws: &Path, home: Option<&Path>) -> bool {
    let root = super::expand_home(root, home);
    root == ws || std::fs::canonicalize(&root).is_ok_and(|r| r == ws)
}

/// The text of an `upstream_ca` file, checked to hold certificates, or an
/// error naming it.
pub fn read_upstream_ca(file: &Path) -> Result<String> {
    let pem = std::fs::read_to_string(file).map_err(|e| {
        anyhow::anyhow!(
            "[network] upstream_ca {}: {e}; give the path of a PEM file of CA certificates",
            file.display()
        )
    })?;
    capstan_egress::certs_from_pem(&pem)
        .map_err(|e| anyhow::anyhow!("[network] upstream_ca {}: {e}", file.display()))?;
    Ok(pem)
}
