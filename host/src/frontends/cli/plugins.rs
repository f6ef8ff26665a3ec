//! `capstan plugins list|check|new|add|remove|publish|keygen|trust` (new, add and
//! remove in plugins_manage.rs; publish, keygen, trust and the oci:// part of add
//! in plugins_oci/). The list also shows the external MCP servers your
//! capstan.toml configures, with their tools (each a capability `mcp:<server>/<tool>`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::{GlobalArgs, load, workspace_root};
use crate::plugins::registry::ExternalTool;
use crate::{errln, outln};

#[derive(Subcommand, Debug)]
pub enum PluginsCommand {
    /// Show every plugin: kinds, permissions, limits, status and load time.
    List {
        /// Also read this workspace's capstan.toml.
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Load and validate every manifest entry; exit 1 if anything is wrong.
    Check {
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Create a plugin project that builds against the capstan-plugin SDK.
    New {
        /// Plugin name (a-z, 0-9, '-', '_'); its kind is the name with '_' for '-'.
        name: String,
        /// Directory to create (default: ./NAME).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Use this copy of the SDK crate instead of the one built into capstan.
        #[arg(long, env = "CAPSTAN_PLUGIN_SDK", value_name = "DIR")]
        sdk: Option<PathBuf>,
    },
    /// Validate a component, show what it asks for, and add it to your capstan.toml
    /// pinned by sha256. SOURCE is a .wasm file, builtin:NAME (e.g. builtin:xlsx) or
    /// oci://HOST[:PORT]/NAME:TAG (its signature checked against your trusted keys).
    Add {
        source: String,
        /// Add an oci:// component even if it is unsigned, signed by a key you do
        /// not trust, or its signature does not match its bytes.
        #[arg(long)]
        allow_unverified: bool,
        /// Speak plain HTTP (no TLS) to an oci:// registry that is not on this
        /// machine. Registries on 127.0.0.1/localhost always get plain HTTP.
        #[arg(long)]
        plain_http: bool,
        /// Name of the manifest entry (default: the file name).
        #[arg(long)]
        name: Option<String>,
        /// Route only these kinds to it (default: every kind it serves).
        #[arg(long = "kind", value_name = "KIND")]
        kinds: Vec<String>,
        /// Workspace access to grant: none, read or read-write (default: none;
        /// builtins get what they need).
        #[arg(long, value_name = "ACCESS", value_parser = parse_access)]
        workspace: Option<crate::plugins::manifest::WorkspaceAccess>,
        /// Add without asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Remove a plugin's entry from your capstan.toml.
    Remove { name: String },
    /// Push a component to an OCI registry as a wasm artifact, signed with --key
    /// (or --signature) so that `plugins add` accepts it.
    Publish {
        /// The component (.wasm).
        path: PathBuf,
        /// Where: oci://HOST[:PORT]/NAME:TAG.
        target: String,
        /// Sign with this secret key: minisign's (from `capstan plugins keygen` or
        /// `minisign -G`) or cosign's (from `cosign generate-key-pair` or `keygen
        /// --format cosign`, password in COSIGN_PASSWORD), told apart by content.
        #[arg(long, value_name = "FILE", conflicts_with = "signature")]
        key: Option<PathBuf>,
        /// Attach this minisign signature of the component, made elsewhere
        /// (`minisign -S -m COMPONENT.wasm`).
        #[arg(long, value_name = "FILE.minisig")]
        signature: Option<PathBuf>,
        /// Speak plain HTTP (no TLS) to a registry that is not on this machine.
        #[arg(long)]
        plain_http: bool,
    },
    /// Make a key pair for signing plugins: OUT.key (secret) and OUT.pub, in
    /// minisign's format, or cosign's with --format cosign.
    Keygen {
        out: PathBuf,
        /// minisign (default: no password, the signature rides in the manifest)
        /// or cosign (encrypted with COSIGN_PASSWORD; `cosign` signs and verifies
        /// with the same files).
        #[arg(long, value_enum, default_value = "minisign")]
        format: super::plugins_oci::KeyFormat,
        /// Also add the public key to your trusted keys.
        #[arg(long)]
        trust: bool,
    },
    /// Trust plugins signed by this key: a minisign .pub file or the key itself
    /// (the base64 line starting with RW), or a cosign.pub. Kept in
    /// `trusted-keys` in your config dir.
    Trust { key: String },
}

fn parse_access(s: &str) -> Result<crate::plugins::manifest::WorkspaceAccess, String> {
    use crate::plugins::manifest::WorkspaceAccess as W;
    match s {
        "none" => Ok(W::None),
        "read" => Ok(W::Read),
        "read-write" => Ok(W::ReadWrite),
        _ => Err(format!("`{s}`: use none, read or read-write")),
    }
}

pub async fn run(global: &GlobalArgs, cmd: PluginsCommand) -> Result<ExitCode> {
    let (workspace, json_out, check) = match cmd {
        PluginsCommand::List { workspace, json } => (workspace, json, false),
        PluginsCommand::Check { workspace } => (workspace, false, true),
        PluginsCommand::New { name, dir, sdk } => {
            return super::plugins_manage::new(global, &name, dir.as_deref(), sdk.as_deref());
        }
        PluginsCommand::Add {
            source,
            allow_unverified,
            plain_http,
            name,
            kinds,
            workspace,
            yes,
        } => {
            let args = super::plugins_manage::AddArgs {
                source,
                allow_unverified,
                plain_http,
                name,
                kinds,
                workspace,
                yes,
            };
            return super::plugins_manage::add(global, args).await;
        }
        PluginsCommand::Remove { name } => return super::plugins_manage::remove(global, &name),
        PluginsCommand::Publish {
            path,
            target,
            key,
            signature,
            plain_http,
        } => {
            use super::plugins_oci::Signing;
            let signing = match (&key, &signature) {
                (Some(k), _) => Signing::Key(k),
                (None, Some(s)) => Signing::Detached(s),
                (None, None) => Signing::None,
            };
            return super::plugins_oci::publish(global, &path, &target, signing, plain_http).await;
        }
        PluginsCommand::Keygen { out, trust, format } => {
            return super::plugins_oci::keygen(global, &out, trust, format);
        }
        PluginsCommand::Trust { key } => return super::plugins_oci::trust(global, &key),
    };
    let workspace = workspace
        .as_deref()
        .map(|d| workspace_root(global, d))
        .transpose()?;
    let (dirs, _, registry) = load(global, workspace.as_deref()).await?;
    // External MCP servers come from the user's file only (a workspace's are ignored).
    let (servers, tools, mcp_problems) = if check {
        (vec![], vec![], vec![])
    } else {
        let files = [dirs.user_config_file()];
        let (servers, _) = crate::plugins::mcp_client::entries(&files);
        let limits = mcp_server_limits(&files[0]);
        let (tools, problems) =
            crate::plugins::mcp_client::connect_all(&files, workspace.as_deref(), &limits).await;
        (servers, tools, problems)
    };
    let server_json = |name: &str| {
        let tagged = format!("mcp:{name}");
        let problem = mcp_problems
            .iter()
            .find(|p| p.plugin.as_deref() == Some(name) || p.plugin.as_deref() == Some(&tagged))
            .map(|p| p.message.clone());
        let tools: Vec<_> = tools
            .iter()
            .filter(|t| t.owner() == name)
            .map(|t| {
                json!({"kind": t.kind(), "tool": t.tool_name(), "description": t.description(),
                       "risk": t.risk()})
            })
            .collect();
        let sandbox = servers
            .iter()
            .find(|s| s.name == name)
            .map(crate::plugins::mcp_client::sandbox_word);
        json!({"name": name, "status": if problem.is_some() { "error" } else { "ok" },
               "problem": problem, "tools": tools, "sandbox": sandbox})
    };

    // Entries that could not be read or are invalid have no server to list
    // them under.
    let unlisted: Vec<_> = mcp_problems
        .iter()
        .filter(|p| {
            !servers.iter().any(|s| {
                p.plugin.as_deref() == Some(s.name.as_str())
                    || p.plugin.as_deref() == Some(format!("mcp:{}", s.name).as_str())
            })
        })
        .collect();
    if json_out {
        let plugins: Vec<_> = registry
            .plugins()
            .iter()
            .map(|p| {
                let e = &p.spec.entry;
                json!({
                    "name": e.name, "version": e.version, "component": p.spec.source.to_string(),
                    "origin": p.spec.origin, "sha256": p.sha256, "oci": e.oci, "kinds": e.kinds,
                    "wit": p.wit_version.to_string(),
                    "permissions": e.permissions, "limits": e.limits, "imports": p.imports,
                    "operations": p.operations, "status": "ok",
                    "load": {"cache_hit": p.load.cache_hit, "ms": p.load.duration.as_secs_f64() * 1e3},
                })
            })
            .collect();
        let mcp: Vec<_> = servers.iter().map(|s| server_json(&s.name)).collect();
        let mut problems = registry.problems();
        problems.extend(unlisted.iter().map(|p| (*p).clone()));
        let out = json!({"plugins": plugins, "mcp_servers": mcp, "problems": problems});
        outln!("{}", crate::term::json_pretty(&out));
    } else {
        for p in &registry.plugins() {
            let e = &p.spec.entry;
            let host: Vec<String> = e.permissions.host.iter().map(|s| s.to_string()).collect();
            let ops: Vec<String> = p
                .operations
                .iter()
                .map(|o| format!("{}({:?})", o.name, o.risk))
                .collect();
            outln!("{} {} [ok]", e.name, e.version);
            outln!("  kinds:      {}", e.kinds.join(", "));
            outln!("  operations: {}", ops.join(", "));
            outln!(
                "  workspace:  {}   host services: {}",
                e.permissions.workspace,
                if host.is_empty() {
                    "-".into()
                } else {
                    host.join(", ")
                }
            );
            let fuel = e
                .limits
                .fuel
                .map(|f| f.to_string())
                .unwrap_or_else(|| "unlimited".into());
            outln!(
                "  limits:     {} MiB, {} ms, fuel {fuel}",
                e.limits.memory_mb,
                e.limits.timeout_ms
            );
            outln!(
                "  component:  {} (from {}; {} in {:.1} ms)",
                p.spec.source,
                p.spec.origin,
                if p.load.cache_hit {
                    "cached"
                } else {
                    "compiled"
                },
                p.load.duration.as_secs_f64() * 1e3
            );
            if let Some(oci) = &e.oci {
                outln!("  from:       {oci}");
            }
        }
        for server in &servers {
            let info = server_json(&server.name);
            match info["problem"].as_str() {
                Some(problem) => errln!(
                    "mcp server {} [error]\n  sandbox:    {}\n  {problem}",
                    server.name,
                    crate::plugins::mcp_client::sandbox_word(server)
                ),
                None => {
                    outln!("mcp server {} [ok]", server.name);
                    outln!(
                        "  sandbox:    {}",
                        crate::plugins::mcp_client::sandbox_word(server)
                    );
                    for t in info["tools"].as_array().into_iter().flatten() {
                        outln!(
                            "  {}  ({}) {}",
                            t["kind"].as_str().unwrap_or_default(),
                            t["risk"].as_str().unwrap_or_default(),
                            t["description"].as_str().unwrap_or_default()
                        );
                    }
                }
            }
        }
        for problem in &unlisted {
            errln!("mcp server [error]\n  {}", problem.message);
        }
        for problem in registry.problems() {
            let who = problem.plugin.as_deref().unwrap_or("manifest");
            errln!("{who} [error]\n  {}", problem.message);
        }
    }
    if check {
        let n = registry.problems().len();
        if n > 0 {
            errln!("{n} problem(s) found; fix the manifest entries named above");
            return Ok(ExitCode::from(1));
        }
        outln!("all {} plugins loaded and valid", registry.plugins().len());
    }
    Ok(ExitCode::SUCCESS)
}

/// `[sandbox]`'s limits for MCP servers from the user's file (the defaults
/// when it cannot be read; `config check` names what is wrong with it).
pub fn mcp_server_limits(user_file: &Path) -> capstan_sandbox::Limits {
    crate::config::Config::load(user_file)
        .unwrap_or_default()
        .sandbox
        .mcp_server_limits()
}
