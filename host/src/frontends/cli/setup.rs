//! Finding and checking Capstan's set-up: `capstan config path|show|check`,
//! `capstan init`, `capstan doctor` and `capstan completions`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{CommandFactory, Subcommand};
use serde_json::json;

use super::{Cli, GlobalArgs, workspace_root};
use crate::config::Config;
use crate::config::check::{self as config_check, ConfigError, Scope};
use crate::dirs::Dirs;
use crate::plugins::registry::{ExternalTool, ManifestSources, Registry};
use crate::plugins::runtime::Runtime;
use crate::{errln, out, outln};

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Where the config file, data and cache live (and a workspace's capstan.toml).
    Path {
        /// Also name this workspace's capstan.toml.
        #[arg(long, short, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The settings in force: your capstan.toml over the defaults.
    Show {
        /// Print JSON instead of TOML.
        #[arg(long)]
        json: bool,
    },
    /// Check your capstan.toml (and a workspace's): syntax, unknown keys, values.
    /// Exit 1 with the file, line and fix of each problem.
    Check {
        #[arg(long, short, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args, Debug)]
pub struct InitArgs {}

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Also check this workspace's capstan.toml and plugins.
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, powershell or elvish.
    pub shell: clap_complete::Shell,
}

/// Where everything lives, for `--help` and `config path`.
pub fn locations(dirs: &Dirs) -> String {
    let file = dirs.user_config_file();
    format!(
        "Config file: {}{}\nData: {}   Cache: {}",
        file.display(),
        if file.exists() {
            ""
        } else {
            " (none yet: `capstan init` writes a commented one)"
        },
        dirs.data.display(),
        dirs.cache.display()
    )
}

pub async fn config(global: &GlobalArgs, cmd: ConfigCommand) -> Result<ExitCode> {
    let dirs = global.dirs()?;
    let user_file = dirs.user_config_file();
    match cmd {
        ConfigCommand::Path { workspace, json } => {
            let ws_file = workspace
                .as_deref()
                .map(|d| workspace_root(global, d))
                .transpose()?
                .map(|w| w.join("capstan.toml"));
            if json {
                let out = json!({
                    "config_dir": dirs.config, "config_file": user_file,
                    "config_file_exists": user_file.exists(),
                    "data_dir": dirs.data, "cache_dir": dirs.cache,
                    "workspace_file": ws_file,
                    "workspace_file_exists": ws_file.as_ref().map(|f| f.exists()),
                });
                outln!("{}", crate::term::json_pretty(&out));
            } else {
                outln!("{}", locations(&dirs));
                if let Some(f) = ws_file {
                    outln!(
                        "Workspace file: {}{}",
                        f.display(),
                        if f.exists() { "" } else { " (none)" }
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Show { json } => {
            let config = Config::load(&user_file)?;
            if json {
                outln!("{}", crate::term::json_pretty(&config));
            } else {
                outln!(
                    "# The settings in force: {} over the defaults.",
                    user_file.display()
                );
                out!(
                    "{}",
                    toml::to_string_pretty(&config).context("cannot print the config")?
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Check { workspace, json } => {
            let mut checked = vec![user_file.clone()];
            let mut errors = config_check::check_file(&user_file, Scope::User);
            if let Some(ws) = workspace
                .as_deref()
                .map(|d| workspace_root(global, d))
                .transpose()?
            {
                let file = ws.join("capstan.toml");
                errors.extend(config_check::check_file(
                    &file,
                    Scope::Workspace {
                        user_file: &user_file,
                    },
                ));
                checked.push(file);
            }
            if json {
                let out = json!({"checked": checked, "problems": errors});
                outln!("{}", crate::term::json_pretty(&out));
            } else {
                for e in &errors {
                    errln!("{e}");
                }
                for f in &checked {
                    if !errors.iter().any(|e| &e.file == f) {
                        outln!(
                            "{}: {}",
                            f.display(),
                            if f.exists() {
                                "ok"
                            } else {
                                "absent (defaults apply)"
                            }
                        );
                    }
                }
            }
            Ok(if errors.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// A commented capstan.toml for the user: every section, all commented out, so the
/// file changes nothing until a line is uncommented.
const USER_TEMPLATE: &str = r#"# Capstan's settings. Every line is commented out: the defaults apply (the offline
# model, the `cautious` profile, no budget). Uncomment what you want to change, then
# run `capstan config check`. `capstan config show` prints what is in force.

# The model that plans and answers. Absent: the embedded offline model.
# [model]
# kind = "anthropic"              # "anthropic", "openai" (also Ollama, vLLM, llama.cpp) or "offline"
# model = "claude-sonnet-4-5"
# api_key_env = "ANTHROPIC_API_KEY"  # the variable holding the key (never the key itself)
# base_url = "http://127.0.0.1:11434/v1"  # for a local or self-hosted server

# Limits of one run.
# [run]
# budget_usd = 0.50               # stop a run that would cost more
# session_budget_usd = 5.00
# max_retrievals = 3
# max_parallel = 4

# How long an approval waits for your answer before it counts as denied.
# [approval]
# timeout_secs = 600

# Commands: what runs without asking, in every workspace (a workspace's own profile,
# set with `capstan workspace add --profile`, wins over `profile` here).
# [policy]
# profile = "cautious"            # "cautious", "trusted" or "locked"
# allow = ["cargo test"]          # command prefixes that run without asking
# deny = ["git push"]             # command prefixes refused wherever they appear
# network = false

# What every sandboxed command gets (defaults shown).
# [sandbox]
# memory_mb = 2048
# tmp_mb = 512
# write_quota_mb = 1024
# read = ["~/.cargo"]             # extra read-only paths

# Where sessions, runs and events are kept. Absent: capstan.db in the data dir.
# A PostgreSQL URL lets several `capstan serve` replicas share one database
# (docs/DEPLOY.md); `capstan serve --store URL` overrides it.
# [store]
# url = "postgres://capstan:secret@db.internal:5432/capstan"
# lease_secs = 30                 # a dead replica's runs are taken over after this
# resume = "safe"                 # continue them from their last completed task ("off": interrupt)

# The search index: "english" (stemmed prose) or "simple" (exact words, code).
# [index]
# analyzer = "english"

# A plugin of your own (docs/PLUGINS.md):
# [[plugin]]
# name = "my-plugin"
# component = "plugins/my_plugin.wasm"   # relative to this file
# sha256 = "..."
# kinds = ["my_kind"]

# An external MCP server whose tools become capabilities (docs/MCP.md):
# [[mcp_server]]
# name = "files"
# command = "npx"
# args = ["-y", "@modelcontextprotocol/server-filesystem"]
# risk = "read_only"
# # It runs in the OS sandbox: what it may see and reach (sandbox = false: unconfined).
# workspace = "read"            # none (default) | read | write
# network_presets = ["npm"]     # npx fetches the package; or network = ["host", ...]
"#;

pub async fn init(global: &GlobalArgs, _args: InitArgs) -> Result<ExitCode> {
    let dirs = global.dirs()?;
    let (path, template) = (dirs.user_config_file(), USER_TEMPLATE);
    if let Some(parent) = path.parent() {
        Dirs::ensure(parent)?;
    }
    // create_new: never replace a file, even one that appears between a check and
    // the write.
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} already exists; Capstan does not overwrite it. Edit it, check it with \
             `capstan config check`, or move it away and run `capstan init` again",
            path.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
    };
    file.write_all(template.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    outln!("wrote {}", path.display());
    Ok(ExitCode::SUCCESS)
}

pub fn completions(args: CompletionsArgs) -> Result<ExitCode> {
    let mut cmd = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut cmd, "capstan", &mut out);
    Ok(ExitCode::SUCCESS)
}

/// How one doctor check came out. Ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, serde::Serialize)]
struct Finding {
    area: &'static str,
    status: Status,
    message: String,
    /// What to do about it (empty when all is well).
    #[serde(skip_serializing_if = "String::is_empty")]
    fix: String,
}

impl Finding {
    fn new(area: &'static str, status: Status, message: String, fix: impl Into<String>) -> Self {
        Self {
            area,
            status,
            message,
            fix: fix.into(),
        }
    }
}

pub async fn doctor(global: &GlobalArgs, args: DoctorArgs) -> Result<ExitCode> {
    let dirs = global.dirs()?;
    let workspace = args
        .workspace
        .as_deref()
        .map(|d| workspace_root(global, d))
        .transpose()?;
    let mut findings = vec![toolchain(), sandbox(), command_lines()];
    let config_ok = config_findings(&dirs, workspace.as_deref(), &mut findings);
    if config_ok {
        findings.push(model(&dirs).await);
        findings.extend(delegated_agents(&dirs));
    }
    plugin_findings(&dirs, workspace.as_deref(), &mut findings).await;
    mcp_findings(&dirs, workspace.as_deref(), &mut findings).await;

    let worst = findings
        .iter()
        .map(|f| f.status)
        .max()
        .unwrap_or(Status::Ok);
    if args.json {
        let out = json!({"ok": worst != Status::Fail, "checks": findings});
        outln!("{}", crate::term::json_pretty(&out));
    } else {
        for f in &findings {
            let mark = match f.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            outln!("{mark} {:<9} {}", f.area, f.message);
            if !f.fix.is_empty() {
                outln!("     {:<9} fix: {}", "", f.fix);
            }
        }
    }
    Ok(if worst == Status::Fail {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The Rust toolchain matters only for building Capstan and plugins from source.
fn toolchain() -> Finding {
    let area = "toolchain";
    let run = |args: &[&str]| {
        std::process::Command::new("rustc")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(version) = run(&["--version"]) else {
        return Finding::new(
            area,
            Status::Warn,
            "no rustc on PATH (needed only to build Capstan or plugins from source)".into(),
            "install Rust with rustup (https://rustup.rs)",
        );
    };
    let target = run(&["--print", "sysroot"])
        .map(|s| Path::new(&s).join("lib/rustlib/wasm32-wasip2/lib").is_dir())
        .unwrap_or(false);
    if target {
        Finding::new(
            area,
            Status::Ok,
            format!("{version}, wasm32-wasip2 target installed"),
            "",
        )
    } else {
        Finding::new(
            area,
            Status::Warn,
            format!("{version}, without the wasm32-wasip2 target (plugins are built for it)"),
            "rustup target add wasm32-wasip2",
        )
    }
}

/// Running Capstan processes whose command line shows a secret (a token, a
/// store password): every process of the machine can read it, and so could a
/// command if a sandbox ever showed it one.
fn command_lines() -> Finding {
    let area = "secrets";
    let me = std::process::id().to_string();
    let mut shown = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != "capstan" {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if let Some(what) = super::secrets::shows_secret(&cmdline) {
            shown.push(format!("pid {pid} shows {what}"));
        }
    }
    if shown.is_empty() {
        return Finding::new(
            area,
            Status::Ok,
            "no running capstan shows a token or password on its command line".into(),
            "",
        );
    }
    Finding::new(
        area,
        Status::Warn,
        format!(
            "{} on its command line, where every process of this machine can read it",
            shown.join("; ")
        ),
        "restart it with the secret in the environment (CAPSTAN_TOKEN, CAPSTAN_STORE_URL) \
         or a file (--token-file)",
    )
}

fn sandbox() -> Finding {
    let report = capstan_sandbox::check();
    let landlock = report
        .landlock_abi
        .map(|v| format!("Landlock ABI {v}"))
        .unwrap_or_else(|| "no Landlock".into());
    let message = format!(
        "{landlock}, seccomp {}, user namespaces {}; {}",
        if report.seccomp { "yes" } else { "no" },
        if report.user_namespaces { "yes" } else { "no" },
        report.lifecycle()
    );
    if report.sandbox_available() {
        Finding::new("sandbox", Status::Ok, message, "")
    } else {
        Finding::new(
            "sandbox",
            Status::Fail,
            format!("{message}: commands cannot be sandboxed, so they are refused"),
            "run on Linux 5.13+ with Landlock and seccomp enabled (`capstan sandbox check` \
             shows each mechanism)",
        )
    }
}

/// Adds the config findings; false when the user's file is broken (the model check
/// then has nothing trustworthy to read).
fn config_findings(dirs: &Dirs, workspace: Option<&Path>, out: &mut Vec<Finding>) -> bool {
    let user_file = dirs.user_config_file();
    let mut files: Vec<(PathBuf, Vec<ConfigError>)> = vec![(
        user_file.clone(),
        config_check::check_file(&user_file, Scope::User),
    )];
    if let Some(ws) = workspace {
        let file = ws.join("capstan.toml");
        let errors = config_check::check_file(
            &file,
            Scope::Workspace {
                user_file: &user_file,
            },
        );
        files.push((file, errors));
    }
    let user_ok = files[0].1.is_empty();
    for (file, errors) in files {
        if errors.is_empty() {
            let state = if file.exists() {
                "ok"
            } else {
                "absent (defaults apply; `capstan init` writes one)"
            };
            out.push(Finding::new(
                "config",
                Status::Ok,
                format!("{}: {state}", file.display()),
                "",
            ));
        }
        for e in errors {
            let place = match e.line {
                Some(l) => format!("{}:{l}", e.file.display()),
                None => e.file.display().to_string(),
            };
            out.push(Finding::new(
                "config",
                Status::Fail,
                format!("{place}: {}", e.message),
                e.fix,
            ));
        }
    }
    user_ok
}

/// Claude Code as a delegated agent (`runtime: claude`): confined to Capstan's MCP tools,
/// refused by its configuration or version, or unconfined by choice (a warning). Nothing
/// when Claude Code is not installed and not configured.
fn delegated_agents(dirs: &Dirs) -> Option<Finding> {
    let area = "agents";
    let config = Config::load(&dirs.user_config_file()).ok()?;
    let configured = config.agents.is_some();
    let claude = config.agents.unwrap_or_default().claude;
    if let Some(warning) = capstan_agents::runner::unconfined_warning(&claude) {
        return Some(Finding::new(
            area,
            Status::Warn,
            warning,
            "remove unconfined_builtin_tools from [agents.claude]: Claude Code then acts only through Capstan's tools",
        ));
    }
    let command = claude.command.clone();
    match capstan_agents::runner::ClaudeRunner::new(claude, None) {
        Ok(_) => Some(Finding::new(
            area,
            Status::Ok,
            format!(
                "Claude Code (`{command}`) runs confined: its built-in tools off, only Capstan's MCP tools"
            ),
            "",
        )),
        Err(_) if !configured && !capstan_agents::runner::ClaudeRunner::installed(&command) => None,
        Err(e) => Some(Finding::new(area, Status::Fail, e.to_string(), "")),
    }
}

/// The configured model: the offline one needs nothing; a remote one needs its key
/// variable set and its server reachable.
async fn model(dirs: &Dirs) -> Finding {
    let area = "model";
    let config = match Config::load(&dirs.user_config_file()) {
        Ok(c) => c,
        Err(e) => return Finding::new(area, Status::Fail, format!("{e:#}"), ""),
    };
    let Some(m) = config
        .model
        .filter(|m| m.kind != capstan_models::ProviderKind::Offline)
    else {
        return Finding::new(
            area,
            Status::Ok,
            "the embedded offline model (no network, no key)".into(),
            "",
        );
    };
    let what = format!("{} `{}`", m.kind.as_str(), m.model);
    if let Some(var) = m.key_env()
        && std::env::var_os(&var).is_none_or(|v| v.is_empty())
    {
        return Finding::new(
            area,
            Status::Fail,
            format!("{what}: the key variable {var} is not set"),
            format!("export {var}=... (or set `api_key_env` in [model] to the variable you use)"),
        );
    }
    let base = m.base_url.clone().unwrap_or_else(|| {
        match m.kind {
            capstan_models::ProviderKind::Anthropic => "https://api.anthropic.com",
            _ => "https://api.openai.com/v1",
        }
        .to_string()
    });
    let Some((host, port)) = host_port(&base) else {
        return Finding::new(
            area,
            Status::Fail,
            format!("{what}: base_url `{base}` is not an http(s) URL"),
            "set `base_url` in [model] to e.g. http://127.0.0.1:11434/v1",
        );
    };
    let connect = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await;
    match connect {
        Ok(Ok(_)) => Finding::new(area, Status::Ok, format!("{what} at {base}: reachable"), ""),
        Ok(Err(e)) => Finding::new(
            area,
            Status::Fail,
            format!("{what} at {base}: cannot connect ({e})"),
            "start the server, or correct `base_url` in [model]; without a network, remove \
             [model] to use the offline model",
        ),
        Err(_) => Finding::new(
            area,
            Status::Fail,
            format!("{what} at {base}: no answer within 5 s"),
            "check the network or `base_url` in [model]",
        ),
    }
}

/// `http(s)://host[:port]/...` to (host, port).
fn host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = after
            .strip_prefix(':')
            .map_or(Some(default), |p| p.parse().ok())?;
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_string(), port.parse().ok()?)),
        None if !authority.is_empty() => Some((authority.to_string(), default)),
        None => None,
    }
}

async fn plugin_findings(dirs: &Dirs, workspace: Option<&Path>, out: &mut Vec<Finding>) {
    let runtime = match Runtime::new(
        dirs.component_cache(),
        vec![dirs.config.clone(), dirs.data.clone()],
        crate::plugins::runtime::Capacity::OneRun,
    ) {
        Ok(r) => r,
        Err(e) => {
            out.push(Finding::new(
                "plugins",
                Status::Fail,
                format!("the plugin runtime cannot start: {e:#}"),
                "",
            ));
            return;
        }
    };
    let registry = Registry::load(
        &runtime,
        &ManifestSources::new(dirs.user_config_file(), workspace),
    )
    .await;
    let names: Vec<String> = registry
        .plugins()
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    out.push(Finding::new(
        "plugins",
        Status::Ok,
        format!("{} loaded: {}", names.len(), names.join(", ")),
        "",
    ));
    for p in registry.problems() {
        out.push(Finding::new(
            "plugins",
            Status::Fail,
            p.message,
            "correct the [[plugin]] entry named above (`capstan plugins check` re-checks)",
        ));
    }
}

async fn mcp_findings(dirs: &Dirs, workspace: Option<&Path>, out: &mut Vec<Finding>) {
    let files = [dirs.user_config_file()];
    let (entries, _) = crate::plugins::mcp_client::entries(&files);
    if entries.is_empty() {
        out.push(Finding::new(
            "mcp",
            Status::Ok,
            "no [[mcp_server]] configured".into(),
            "",
        ));
        return;
    }
    let limits = super::plugins::mcp_server_limits(&files[0]);
    let (tools, problems) =
        crate::plugins::mcp_client::connect_all(&files, workspace, &limits).await;
    for entry in &entries {
        let n = tools.iter().filter(|t| t.owner() == entry.name).count();
        if problems
            .iter()
            .all(|p| p.plugin.as_deref() != Some(&entry.name))
        {
            out.push(Finding::new(
                "mcp",
                Status::Ok,
                format!("server `{}`: {n} tools", entry.name),
                "",
            ));
        }
    }
    for p in problems {
        out.push(Finding::new(
            "mcp",
            Status::Fail,
            p.message,
            "correct the [[mcp_server]] entry (command, args, url) or start the server",
        ));
    }
}
