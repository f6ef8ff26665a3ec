//! `capstan mcp`: the workspace's capabilities as MCP tools, over stdio (for a
//! client that spawns Capstan) or streamable HTTP (`--listen`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::middleware;
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use super::{GlobalArgs, workspace_root};
use crate::frontends::mcp::{CapstanMcp, McpHost, http_router};
use crate::frontends::server::guard::{self, Doors, TokenChoice};
use crate::plugins::services::approval::ApproveMode;
use crate::run::app::App;
use crate::{errln, outln};

#[derive(clap::Args, Debug)]
#[command(
    long_about = "Serve the workspace's capabilities as MCP tools, one per operation: \
local_kb_retrieval.search, terminal_exec.run, docx.create... Calls take the same path as a \
plan task: workspace gate, exec policy, sandbox and approval gate.\n\n\
Approvals: with --approve ask (the default) Capstan asks the client through MCP elicitation; a \
client that cannot be asked gets a denied result that says how to allow the call.",
    after_help = "Examples:\n  \
capstan mcp --workspace ./my-project                      # stdio, for a client that spawns it\n  \
capstan mcp --workspace . --listen 127.0.0.1:8765         # streamable HTTP at http://127.0.0.1:8765/mcp\n  \
                                                           # (send the printed token: Authorization: Bearer ...)\n  \
claude --mcp-config '{\"mcpServers\":{\"capstan\":{\"command\":\"capstan\",\"args\":[\"mcp\",\"--workspace\",\"/path/to/project\"]}}}'\n\n\
Tool names are <capability>.<operation>; see docs/MCP.md."
)]
pub struct McpArgs {
    /// The workspace the tools act on. Without one, tools that read files or
    /// run commands answer `workspace-required`.
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio. Every
    /// request must name ADDR (or localhost, or --allow-host) in `Host`, carry
    /// no foreign `Origin`, and carry the token.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// The token every HTTP request must carry (`Authorization: Bearer
    /// <TOKEN>`). Default: a random one, printed at start-up.
    #[arg(
        long,
        env = "CAPSTAN_MCP_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Read the token from the first line of FILE (keep it 0600); a token
    /// on the command line is visible to every process of the machine.
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    pub token_file: Option<std::path::PathBuf>,
    /// Serve HTTP without a token (loopback only; Host and Origin are still
    /// checked). Any program on this machine can then call the tools.
    #[arg(long, conflicts_with_all = ["token", "token_file"])]
    pub no_token: bool,
    /// Another name the server answers to in `Host`. Repeatable; adds to
    /// `[server] allowed_hosts`.
    #[arg(long, value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// An origin whose pages may call the server. Repeatable; adds to
    /// `[server] allowed_origins`.
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// How approvals are answered: ask the client (elicitation; denied when it
    /// cannot be asked), all (grant; sandbox and deny rules still hold), none.
    #[arg(long, value_enum, default_value = "ask")]
    pub approve: ApproveMode,
    /// Also serve the fixture tools, resources and prompts the official MCP
    /// conformance suite calls (`test_simple_text`, `test://static-text`...).
    /// For tests only: hidden from --help.
    #[arg(long, hide = true)]
    pub conformance_fixtures: bool,
}

pub async fn run(global: &GlobalArgs, args: McpArgs) -> Result<ExitCode> {
    let token = match args.listen {
        Some(addr) => {
            let given = super::secrets::token(
                args.token.clone(),
                args.token_file.as_deref(),
                "token",
                "CAPSTAN_MCP_TOKEN",
            )?;
            let token = TokenChoice::pick(given, args.no_token)?;
            token.check_bind(addr, "capstan mcp")?;
            Some(token)
        }
        None => None,
    };
    let workspace = args
        .workspace
        .as_deref()
        .map(|d| workspace_root(global, d))
        .transpose()?;
    let app = Arc::new(
        App::open_with(
            global.dirs()?,
            args.approve,
            None,
            None,
            crate::plugins::runtime::Capacity::Server,
        )
        .await?,
    );
    // Long-running: watch workspaces instead of walking them before each question.
    app.indexes.watch_changes();
    if let Some(ws) = &workspace {
        app.check_workspace(ws)?;
    }
    let server = app.config.server.clone();
    let host = if args.conformance_fixtures {
        McpHost::with_conformance_fixtures(app, workspace).await
    } else {
        McpHost::new(app, workspace).await
    };
    match (args.listen, token) {
        (Some(addr), Some(token)) => {
            let shutdown = CancellationToken::new();
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            let bound = listener.local_addr()?;
            let doors = Arc::new(Doors::new(
                bound,
                &[server.allowed_hosts, args.allow_host].concat(),
                &[server.allowed_origins, args.allow_origin].concat(),
                token.token().map(String::from),
                "capstan mcp",
            ));
            let router = http_router(host, shutdown.clone())
                .layer(middleware::from_fn_with_state(doors.clone(), guard::token))
                .layer(middleware::from_fn_with_state(
                    doors,
                    guard::host_and_origin,
                ));
            // The first line on stdout says where to connect (port 0 picks one).
            outln!("capstan mcp: listening on http://{bound}/mcp");
            match &token {
                TokenChoice::Generated(t) => errln!(
                    "capstan mcp: token {t}\n  clients send `Authorization: Bearer {t}` (choose it with CAPSTAN_MCP_TOKEN or --token-file)"
                ),
                TokenChoice::Given(_) => {
                    errln!("capstan mcp: clients send `Authorization: Bearer <your token>`")
                }
                TokenChoice::Disabled => {}
            }
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = tokio::signal::ctrl_c().await;
                    shutdown.cancel();
                })
                .await?;
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            let service = CapstanMcp::new(host)
                .serve(rmcp::transport::stdio())
                .await
                .context("MCP handshake on stdio failed")?;
            service.waiting().await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
