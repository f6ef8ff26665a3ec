//! `capstan serve`: the HTTP server (API, SSE, AG-UI, web chat) or, with
//! `--stdio`, JSON-RPC over stdin/stdout.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;

use super::{GlobalArgs, workspace_root};
use tokio_util::sync::CancellationToken;

use crate::frontends::mcp::McpHost;
use crate::frontends::server::guard::TokenChoice;
use crate::frontends::server::runs::{RunManager, StreamLimits};
use crate::frontends::server::{DEFAULT_MAX_BODY_BYTES, HttpOptions};
use crate::plugins::runtime::Capacity;
use crate::plugins::services::approval::ApproveMode;
use crate::run::app::App;
use crate::workspace_gate::Caller;

#[derive(clap::Args, Debug)]
#[command(after_help = "Endpoints (HTTP):\n  \
GET  /?token=...                the web chat (the start-up URL; the token becomes a cookie)\n  \
POST /v1/runs                   start a run; the response is its SSE event stream\n  \
POST /v1/runs/{id}/cancel       cancel a run\n  \
POST /v1/approvals/{id}         answer an approval {\"decision\":\"approved\"}\n  \
GET  /v1/runs/{id}/events       replay a run's events (then follow it live)\n  \
GET  /v1/sessions, /v1/sessions/{id}/turns, /v1/runs, /v1/workspaces\n  \
PATCH, DELETE /v1/sessions/{id}    rename {\"title\":...} or delete a session (approvals stay)\n  \
GET  /v1/workspaces/{id}/file?path=  a workspace text file, read-only (the citation viewer)\n  \
POST /agui                      AG-UI endpoint (RunAgentInput in, AG-UI events out)\n  \
POST /mcp                       MCP (streamable HTTP): the capabilities as tools (docs/MCP.md)\n  \
GET  /openapi.json              the whole API\n\n\
Security: every request must name this server in `Host` (its address, localhost, or --allow-host),\n\
come from no page or this server's own (`Origin`, or --allow-origin), and carry the token (made at\n\
start-up and printed in the web chat URL; CAPSTAN_TOKEN or --token-file to choose it): API clients send\n\
`Authorization: Bearer <token>`. Runs may only use workspaces registered with\n\
`capstan workspace add DIR` or given with -w.\n\n\
With --stdio: JSON-RPC 2.0, one message per line (methods: server.info, run.start, run.cancel,\n\
approval.decide, run.events, sessions.list, session.turns, runs.list, workspaces.list, ...);\n\
run events arrive as `run.event` notifications. docs/EVENTS.md describes both.\n\n\
Examples:\n  capstan serve                         # http://127.0.0.1:7878/\n  \
capstan serve --port 0 -w ./my-project  # any free port, default workspace\n  \
CAPSTAN_TOKEN=$(openssl rand -hex 16) capstan serve --host 0.0.0.0 --allow-host myhost.lan\n  \
capstan serve --stdio                 # for a frontend that spawns capstan")]
pub struct ServeArgs {
    /// Speak JSON-RPC 2.0 on stdin/stdout instead of HTTP.
    #[arg(long)]
    pub stdio: bool,
    /// Address to bind. Anything but loopback needs a token (not --no-token).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port (0 picks a free one; the chosen address is printed on stdout).
    #[arg(long, env = "CAPSTAN_PORT", default_value_t = 7878)]
    pub port: u16,
    /// Token every API request must carry (`Authorization: Bearer ...`, or
    /// the web chat's cookie). Default: a random one, printed in the web chat URL.
    /// Prefer CAPSTAN_TOKEN or --token-file: every process of the machine can
    /// read a command line.
    #[arg(long, env = "CAPSTAN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the token from the first line of FILE (keep it 0600).
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// Serve without a token (Host and Origin are still checked). Any
    /// program on this machine can then drive Capstan; loopback only.
    #[arg(long, conflicts_with_all = ["token", "token_file"])]
    pub no_token: bool,
    /// Another name this server answers to in `Host` (`name` or `name:port`),
    /// e.g. behind a reverse proxy. Repeatable; adds to `[server] allowed_hosts`.
    #[arg(long, value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// An origin whose pages may call this server (`https://app.example.com`).
    /// Repeatable; adds to `[server] allowed_origins`.
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// Event streams (SSE, AG-UI) open at once over all runs; past it, 503.
    /// Default: `[server] max_streams` (256).
    #[arg(long, value_name = "N")]
    pub max_streams: Option<usize>,
    /// Event streams open at once on one run; past it, 429.
    /// Default: `[server] max_streams_per_run` (16).
    #[arg(long, value_name = "N")]
    pub max_streams_per_run: Option<usize>,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Workspace for runs that name none and whose session has none; it is
    /// registered, so HTTP clients may name it.
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The store: `postgres://user:password@host:port/db` makes this server
    /// one replica of several sharing that database (docs/DEPLOY.md).
    /// Default: `[store] url` in capstan.toml, else the SQLite file in the data dir.
    #[arg(
        long,
        env = "CAPSTAN_STORE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub store: Option<String>,
    /// How approvals are answered: `ask` waits for a frontend to decide.
    #[arg(long, value_enum, default_value = "ask")]
    pub approve: ApproveMode,
}

pub async fn run(global: &GlobalArgs, args: ServeArgs) -> Result<ExitCode> {
    let workspace = args
        .workspace
        .as_deref()
        .map(|d| workspace_root(global, d))
        .transpose()?;
    // Checked before anything opens: a bad flag combination fails fast.
    let given = super::secrets::token(
        args.token,
        args.token_file.as_deref(),
        "token",
        "CAPSTAN_TOKEN",
    )?;
    super::secrets::check_store_url(args.store.as_deref(), "store", "CAPSTAN_STORE_URL");
    let token = TokenChoice::pick(given, args.no_token)?;
    let app = Arc::new(
        App::open_with(
            global.dirs()?,
            args.approve,
            None,
            args.store,
            Capacity::Server,
        )
        .await?,
    );
    // Long-running: watch workspaces instead of walking them before each question.
    app.indexes.watch_changes();
    super::idle_trim::spawn();
    if let Some(root) = &workspace {
        register(&app, root)?;
    }
    let server = &app.config.server;
    let users = user_tokens(&server.users, &token)?;
    let limits = StreamLimits {
        per_run: args
            .max_streams_per_run
            .unwrap_or(server.max_streams_per_run),
        total: args.max_streams.unwrap_or(server.max_streams),
    };
    if args.stdio {
        // The frontend that spawned this process is the user's own: a local caller.
        let runs = Arc::new(RunManager::new(
            app.clone(),
            workspace.clone(),
            Caller::Local,
            limits,
        ));
        crate::frontends::server::replica::start(&runs);
        crate::frontends::server::stdio::serve_stdio(runs).await?;
    } else {
        let runs = Arc::new(RunManager::new(
            app.clone(),
            workspace.clone(),
            Caller::Remote,
            limits,
        ));
        crate::frontends::server::replica::start(&runs);
        let opts = HttpOptions {
            addr: SocketAddr::new(args.host, args.port),
            token,
            allowed_hosts: [server.allowed_hosts.clone(), args.allow_host].concat(),
            allowed_origins: [server.allowed_origins.clone(), args.allow_origin].concat(),
            max_body_bytes: args.max_body_bytes,
            users,
        };
        // MCP joins the server here, behind its doors and body limit.
        let mcp_shutdown = CancellationToken::new();
        let mcp = crate::frontends::mcp::http_router(
            McpHost::new(app, workspace).await,
            mcp_shutdown.clone(),
        );
        // MCP's streams stay open until told to close; without this, Ctrl-C would
        // wait on a connected client forever.
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            mcp_shutdown.cancel();
        });
        crate::frontends::server::serve_http(runs, opts, vec![mcp]).await?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The `[[server.user]]` tokens with their quotas, checked: names and
/// tokens distinct, none equal to the server's own token, and a server
/// token to begin with (without one, nobody would be a user and no limit
/// would apply).
fn user_tokens(
    users: &[crate::config::ServerUser],
    token: &TokenChoice,
) -> Result<Vec<(String, capstan_store::Quota)>> {
    if users.is_empty() {
        return Ok(Vec::new());
    }
    let Some(own) = token.token() else {
        anyhow::bail!(
            "[[server.user]] entries need the server's token: with --no-token every program on \
             this machine gets in with no user and no limit. Drop --no-token, or remove the \
             entries"
        );
    };
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let mut out: Vec<(String, capstan_store::Quota)> = Vec::new();
    for user in users {
        if user.name.trim().is_empty() {
            anyhow::bail!("a [[server.user]] entry has no `name`; give each user a name");
        }
        let t = user.token(home.as_deref())?;
        if out.iter().any(|(_, q)| q.user == user.name) {
            anyhow::bail!(
                "[[server.user]] `{}` is listed twice; give each entry its own name",
                user.name
            );
        }
        if t == own || out.iter().any(|(other, _)| *other == t) {
            anyhow::bail!(
                "[[server.user]] `{}` has the same token as the server or another user; give \
                 each user a token of their own",
                user.name
            );
        }
        out.push((t, user.quota()));
    }
    Ok(out)
}

/// A workspace given with `-w` is the user's choice at the command line:
/// registered, so network clients may use it too.
/// Replicas started together may register the same folder at once: the
/// store's `ensure_workspace` is idempotent.
fn register(app: &App, root: &std::path::Path) -> Result<()> {
    app.store.ensure_workspace(root)?;
    Ok(())
}
