//! The `capstan` command line.

mod agent;
mod ask;
mod changes;
mod chat;
mod feed;
mod idle_trim;
mod invoke;
mod kb;
mod kb_direct;
mod mcp;
mod plugins;
mod plugins_manage;
mod plugins_oci;
mod secrets;
mod serve;
mod setup;
mod workspace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::dirs::{DirOverrides, Dirs};
use crate::plugins::registry::{ManifestSources, Registry};
use crate::plugins::runtime::{Capacity, Runtime};
use crate::workspace_gate::WorkspaceGate;
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
                  under one directory (tests do). `capstan config path` prints the places, `capstan config check` \
                  checks the file, `capstan doctor` checks everything."
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
    /// Where the config lives, what is in force, and whether it is valid.
    #[command(subcommand)]
    Config(setup::ConfigCommand),
    /// Write your capstan.toml, every setting commented out and explained; never overwrites.
    Init(setup::InitArgs),
    /// Check the toolchain, sandbox, config, model, plugins and MCP servers, each with its fix.
    Doctor(setup::DoctorArgs),
    /// List the change sets runs made to workspaces, with diffs (`--diff`).
    Changes(changes::ChangesArgs),
    /// Take back a run's, task's or change set's workspace changes (refuses files changed since).
    Undo(changes::UndoArgs),
    /// Print a shell completion script: `capstan completions bash > /etc/bash_completion.d/capstan`.
    Completions(setup::CompletionsArgs),
}

impl Command {
    /// Whether the command may run sandboxed commands (a plan's terminal tasks, an
    /// agent runner, a served tool), and so is worth a launcher zygote.
    fn may_run_commands(&self) -> bool {
        match self {
            Command::Ask(_)
            | Command::Invoke(_)
            | Command::Agent(_)
            | Command::Mcp(_)
            | Command::Serve(_)
            | Command::Chat(_) => true,
            Command::Index(_)
            | Command::Search(_)
            | Command::Sandbox(_)
            | Command::Plugins(_)
            | Command::Workspace(_)
            | Command::Config(_)
            | Command::Init(_)
            | Command::Doctor(_)
            | Command::Changes(_)
            | Command::Undo(_)
            | Command::Completions(_) => false,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum SandboxCommand {
    /// Report Landlock, seccomp and namespace support; exit 1 if commands cannot be sandboxed.
    Check {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn main() -> ExitCode {
    let cli = parse();
    // Still one thread here (the runtime starts below): commands that may run
    // sandboxed commands fork their launchers from a copy made now, instead of
    // starting this binary again for each (capstan_sandbox::prefork_launcher).
    if cli.command.may_run_commands() {
        capstan_sandbox::prefork_launcher();
    }
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

/// The command line, with `--help` naming where this user's config lives (resolved
/// now, from CAPSTAN_HOME and the other overrides, as the command itself will).
fn parse() -> Cli {
    let mut command = Cli::command();
    if let Ok(dirs) = Dirs::resolve(&DirOverrides::default()) {
        let base = command
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        command = command.after_help(format!("{base}\n\n{}", setup::locations(&dirs)));
    }
    let matches = command.get_matches();
    match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Ask(args) => ask::run(&cli.global, args).await,
        Command::Index(args) => kb::index(&cli.global, args).await,
        Command::Search(args) => kb::search(&cli.global, args).await,
        Command::Sandbox(SandboxCommand::Check { json }) => {
            let report = capstan_sandbox::check();
            let network = sandbox_network(&cli.global, &report)?;
            if json {
                let mut out = serde_json::to_value(&report)?;
                out["sandbox_available"] = report.sandbox_available().into();
                out["network"] = serde_json::to_value(&network)?;
                outln!("{}", crate::term::json_pretty(&out));
            } else {
                outln!("{report}");
                outln!("{network}");
            }
            if network.failed() {
                crate::term::warn(
                    "the [network] policy cannot be enforced as configured (see `egress proxy` above); \
                     commands it applies to are refused, never run with the host's network",
                );
                return Ok(ExitCode::from(1));
            }
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
        Command::Config(cmd) => setup::config(&cli.global, cmd).await,
        Command::Init(args) => setup::init(&cli.global, args).await,
        Command::Doctor(args) => setup::doctor(&cli.global, args).await,
        Command::Completions(args) => setup::completions(args),
        Command::Changes(args) => changes::changes(&cli.global, args).await,
        Command::Undo(args) => changes::undo(&cli.global, args).await,
    }
}

/// The `[network]` part of `capstan sandbox check`.
fn sandbox_network(
    global: &GlobalArgs,
    support: &capstan_sandbox::SupportReport,
) -> Result<crate::config::network_report::NetworkReport> {
    let dirs = global.dirs()?;
    let config = crate::config::Config::load(&dirs.user_config_file())?;
    config.network.check()?;
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    Ok(crate::config::network_report::NetworkReport::new(
        &config.network,
        support,
        home.as_deref(),
    ))
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

/// A workspace given on the command line, made canonical and passed through
/// the workspace gate (crate::workspace_gate): never Capstan's own dirs, `/`,
/// the home dir or a system dir.
pub fn workspace_root(global: &GlobalArgs, dir: &Path) -> Result<PathBuf> {
    Ok(WorkspaceGate::for_dirs(&global.dirs()?).check(dir)?)
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
        vec![dirs.config.clone(), dirs.data.clone(), dirs.cache.clone()],
        Capacity::OneRun,
    )?;
    let registry = Registry::load(
        &runtime,
        &ManifestSources::new(dirs.user_config_file(), workspace),
    )
    .await;
    Ok((dirs, runtime, registry))
}
