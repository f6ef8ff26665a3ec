//! `capstan serve`: the HTTP server (API, SSE, AG-UI, web chat) or, with
//! `--stdio`, JSON-RPC over stdin/stdout.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;

use super::{GlobalArgs, workspace_root};
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::mcp::McpHost;
use crate::server::runs::RunManager;
use crate::server::{DEFAULT_MAX_BODY_BYTES, HttpOptions};
use crate::services::approval::ApproveMode;

#[derive(clap::Args, Debug)]
#[command(after_help = "Endpoints (HTTP):\n  \
GET  /                          the web chat (add #token=... when a token is set)\n  \
POST /v1/runs                   start a run; the response is its SSE event stream\n  \
POST /v1/runs/{id}/cancel       cancel a run\n  \
POST /v1/approvals/{id}         answer an approval {\"decision\":\"approved\"}\n  \
GET  /v1/runs/{id}/events       replay a run's events (then follow it live)\n  \
GET  /v1/sessions, /v1/sessions/{id}/turns, /v1/runs, /v1/workspaces\n  \
POST /agui                      AG-UI endpoint (RunAgentInput in, AG-UI events out)\n  \
POST /mcp                       MCP (streamable HTTP): the capabilities as tools (docs/MCP.md)\n  \
GET  /openapi.json              the whole API\n\n\
With --stdio: JSON-RPC 2.0, one message per line (methods: server.info, run.start, run.cancel,\n\
approval.decide, run.events, sessions.list, session.turns, runs.list, workspaces.list, ...);\n\
run events arrive as `run.event` notifications. docs/EVENTS.md describes both.\n\n\
Examples:\n  capstan serve                         # http://127.0.0.1:7878/\n  \
capstan serve --port 0 -w ./my-project  # any free port, default workspace\n  \
CAPSTAN_TOKEN=$(openssl rand -hex 16) capstan serve --host 0.0.0.0\n  \
capstan serve --stdio                 # for a frontend that spawns capstan")]
pub struct ServeArgs {
    /// Speak JSON-RPC 2.0 on stdin/stdout instead of HTTP.
    #[arg(long)]
    pub stdio: bool,
    /// Address to bind. Anything but loopback needs --token.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port (0 picks a free one; the chosen address is printed on stdout).
    #[arg(long, env = "CAPSTAN_PORT", default_value_t = 7878)]
    pub port: u16,
    /// Bearer token every API request must carry (`Authorization: Bearer ...`).
    #[arg(long, env = "CAPSTAN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Workspace for runs that name none and whose session has none.
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// How approvals are answered: `ask` waits for a frontend to decide.
    #[arg(long, value_enum, default_value = "ask")]
    pub approve: ApproveMode,
}

pub async fn run(global: &GlobalArgs, args: ServeArgs) -> Result<ExitCode> {
    let workspace = args.workspace.as_deref().map(workspace_root).transpose()?;
    let app = Arc::new(App::open(global.dirs()?, args.approve).await?);
    let runs = Arc::new(RunManager::new(app.clone(), workspace.clone()));
    if args.stdio {
        crate::server::stdio::serve_stdio(runs).await?;
    } else {
        let opts = HttpOptions {
            addr: SocketAddr::new(args.host, args.port),
            token: args.token,
            max_body_bytes: args.max_body_bytes,
        };
        // Routers from other layers join the server here, behind its token check
        // and body limit (so MCP's own token is not needed).
        let mcp_shutdown = CancellationToken::new();
        let mcp = crate::mcp::http_router(
            McpHost::new(app, workspace).await,
            None,
            !args.host.is_loopback(),
            mcp_shutdown.clone(),
        );
        // MCP's streams stay open until told to close; without this, Ctrl-C would
        // wait on a connected client forever.
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            mcp_shutdown.cancel();
        });
        let extra = vec![mcp];
        crate::server::serve_http(runs, opts, extra).await?;
    }
    Ok(ExitCode::SUCCESS)
}
