//! The `capstan` command line.

mod agent;
mod ask;
mod chat;
mod feed;
mod invoke;
mod kb;
mod mcp;
mod plugins;
mod serve;
mod workspace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use crate::dirs::{DirOverrides, Dirs};
use crate::registry::{ManifestSources, Registry};
use crate::runtime::Runtime;
use crate::{errln, outln};

#[derive(Parser, Debug)]
#[command(
    name = "capstan",
    version,
    about = "A sandboxed capability host for AI agents",
    long_about = "Capstan answers questions about a workspace folder and runs tasks in it through \
                  capabilities: WebAssembly plugins confined to the workspace, with commands run in an \
                  OS sandbox behind an approval gate.",
    after_help = "Examples:\n  capstan plugins list\n  capstan invoke echo --input '{\"hi\":1}'\n  \
                  capstan invoke local_kb_retrieval --workspace ./docs --operation search --input '{\"query\":\"keys\"}'\n\n\
                  State lives in the platform's config, data and cache dirs; set CAPSTAN_HOME to keep it all \
                  under one directory (tests do)."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(clap::Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Keep config, data and cache under this one directory.
    #[arg(long, global = true, env = "CAPSTAN_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// Config dir (manifests, capstan.toml). Default: the platform's config dir.
    #[arg(long, global = true, env = "CAPSTAN_CONFIG_DIR", value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// Data dir (indexes, database).
    #[arg(long, global = true, env = "CAPSTAN_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Cache dir (compiled components).
    #[arg(long, global = true, env = "CAPSTAN_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Ask about a workspace or have it act: retrieval, a plan, sandboxed commands, a streamed answer.
    Ask(ask::AskArgs),
    /// Bring a workspace's search index up to date (asking does this on its own).
    Index(kb::IndexArgs),
    /// Search a workspace's knowledge base and print ranked, cited passages.
    Search(kb::SearchArgs),
    /// What the OS sandbox for commands can use on this machine.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// List, check and inspect capability plugins.
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
    /// Run one task straight on a capability (for plugin authors and scripts).
    Invoke(invoke::InvokeArgs),
    /// Delegate tasks to agent runtimes (Claude Code, OpenCode, Capstan's own model).
    #[command(subcommand)]
    Agent(agent::AgentCommand),
    /// Serve the workspace's capabilities as MCP tools (stdio, or streamable HTTP with --listen).
    Mcp(mcp::McpArgs),
    /// Serve frontends: HTTP + SSE API, AG-UI endpoint and web chat, or JSON-RPC on stdio.
    Serve(serve::ServeArgs),
    /// A conversation in the terminal: one session, history carried over, approvals at the prompt.
    Chat(chat::ChatArgs),
    /// Register, list, bind (per session) and remove workspace folders.
    #[command(subcommand)]
    Workspace(workspace::WorkspaceCommand),
}

#[derive(Subcommand, Debug)]
pub enum SandboxCommand {
    /// Report Landlock, seccomp and namespace support; exit 1 if commands cannot be sandboxed.
    Check,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Ask(args) => ask::run(&cli.global, args).await,
        Command::Index(args) => kb::index(&cli.global, args).await,
        Command::Search(args) => kb::search(&cli.global, args).await,
        Command::Sandbox(SandboxCommand::Check) => {
            let report = capstan_sandbox::check();
            outln!("{report}");
            Ok(if report.sandbox_available() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Plugins(cmd) => plugins::run(&cli.global, cmd).await,
        Command::Invoke(args) => invoke::run(&cli.global, args).await,
        Command::Agent(cmd) => agent::run(&cli.global, cmd).await,
        Command::Mcp(args) => mcp::run(&cli.global, args).await,
        Command::Serve(args) => serve::run(&cli.global, args).await,
        Command::Chat(args) => chat::run(&cli.global, args).await,
        Command::Workspace(cmd) => workspace::run(&cli.global, cmd).await,
    }
}

/// Logs are for whoever debugs Capstan: none without `-v` or `RUST_LOG`.
/// What a user must know is said in plain lines (`crate::term::warn`). No
/// colour: Capstan prints plain text everywhere.
fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "off",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(|| crate::term::LogWriter)
        .try_init();
}

impl GlobalArgs {
    pub fn dirs(&self) -> Result<Dirs> {
        Dirs::resolve(&DirOverrides {
            home: self.home.clone(),
            config: self.config_dir.clone(),
            data: self.data_dir.clone(),
            cache: self.cache_dir.clone(),
        })
    }
}

/// A workspace given on the command line, checked and made canonical.
pub fn workspace_root(dir: &Path) -> Result<PathBuf> {
    let root = dir.canonicalize().with_context(|| {
        format!(
            "workspace {} does not exist; pass an existing directory to --workspace",
            dir.display()
        )
    })?;
    if !root.is_dir() {
        bail!("workspace {} is not a directory", root.display());
    }
    Ok(root)
}

/// The runtime and registry for one command: bundled plugins and the user's
/// capstan.toml (a workspace's capstan.toml is checked, never obeyed).
pub async fn load(
    global: &GlobalArgs,
    workspace: Option<&Path>,
) -> Result<(Dirs, Runtime, Registry)> {
    let dirs = global.dirs()?;
    let runtime = Runtime::new(
        dirs.component_cache(),
        vec![dirs.config.clone(), dirs.data.clone()],
    )?;
    let registry = Registry::load(
        &runtime,
        &ManifestSources::new(dirs.user_config_file(), workspace),
    )
    .await;
    Ok((dirs, runtime, registry))
}
