//! `capstan mcp`: the workspace's capabilities as MCP tools, over stdio (for a
//! client that spawns Capstan) or streamable HTTP (`--listen`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use super::{GlobalArgs, workspace_root};
use crate::app::App;
use crate::mcp::{CapstanMcp, McpHost, http_router};
use crate::outln;
use crate::services::approval::ApproveMode;

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
claude --mcp-config '{\"mcpServers\":{\"capstan\":{\"command\":\"capstan\",\"args\":[\"mcp\",\"--workspace\",\"/path/to/project\"]}}}'\n\n\
Tool names are <capability>.<operation>; see docs/MCP.md."
)]
pub struct McpArgs {
    /// The workspace the tools act on. Without one, tools that read files or
    /// run commands answer `workspace-required`.
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio. Loopback
    /// addresses only, unless a bearer token is set.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Require `Authorization: Bearer <TOKEN>` on every HTTP request.
    #[arg(
        long,
        env = "CAPSTAN_MCP_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// How approvals are answered: ask the client (elicitation; denied when it
    /// cannot be asked), all (grant; sandbox and deny rules still hold), none.
    #[arg(long, value_enum, default_value = "ask")]
    pub approve: ApproveMode,
}

pub async fn run(global: &GlobalArgs, args: McpArgs) -> Result<ExitCode> {
    if let Some(addr) = args.listen
        && !addr.ip().is_loopback()
        && args.token.is_none()
    {
        bail!(
            "refusing to serve MCP on {addr} without a bearer token: anyone who can reach it could \
             run commands in the workspace. Listen on 127.0.0.1, or set --token (or CAPSTAN_MCP_TOKEN)"
        );
    }
    let workspace = args.workspace.as_deref().map(workspace_root).transpose()?;
    let app = Arc::new(App::open(global.dirs()?, args.approve).await?);
    let host = McpHost::new(app, workspace).await;
    match args.listen {
        None => {
            let service = CapstanMcp::new(host)
                .serve(rmcp::transport::stdio())
                .await
                .context("MCP handshake on stdio failed")?;
            service.waiting().await?;
            Ok(ExitCode::SUCCESS)
        }
        Some(addr) => {
            let shutdown = CancellationToken::new();
            let any_host = !addr.ip().is_loopback();
            let router = http_router(host, args.token, any_host, shutdown.clone());
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            let bound = listener.local_addr()?;
            // The first line on stdout says where to connect (port 0 picks one).
            outln!("capstan mcp: listening on http://{bound}/mcp");
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = tokio::signal::ctrl_c().await;
                    shutdown.cancel();
                })
                .await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
