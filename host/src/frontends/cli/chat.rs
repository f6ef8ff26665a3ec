//! `capstan chat`: a REPL on one session. Each line is a message (history
//! carries over); lines typed while a run works answer its approvals or wait
//! their turn; `/cancel` or Ctrl-C stops the run in flight.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use capstan_store::Decision;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::feed::{ApproveSource, Ask, Feed, Outcomes, answer_hint, parse_decision, stdin_lines};
use super::{GlobalArgs, workspace_root};
use crate::plugins::services::approval::ApproveMode;
use crate::run::app::{App, AskRequest};
use crate::{err, errln};

const HELP: &str = "\
Type a message and press Enter. Commands:
  /workspace [DIR]   show the workspace, or bind DIR (remembered by the session)
  /sessions          recent sessions (* marks this one)
  /session ID        continue another session
  /cancel            cancel the run in flight (Ctrl-C does too)
  /help              this text
  /quit              leave (end of input does too)
While a run asks for approval, answer y (yes), n (no), a (always this session) or b (abort).";

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  capstan chat --workspace ./my-project\n  \
capstan chat --session ses_0hs8fy26kxm9\n  \
printf 'run `make check`\\ny\\n' | capstan chat -w examples/handbook   # answers piped in")]
pub struct ChatArgs {
    /// The workspace folder (default: the session's last one).
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Continue this session instead of starting a new one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// How approvals are answered; `ask` prompts in the chat.
    #[arg(long, value_enum, default_value = "ask")]
    pub approve: ApproveMode,
}

struct Chat {
    app: Arc<App>,
    approve: ApproveSource,
    session: Option<String>,
    workspace: Option<PathBuf>,
    lines: mpsc::UnboundedReceiver<String>,
    stdin_open: bool,
    typed_ahead: VecDeque<String>,
}

pub async fn run(global: &GlobalArgs, args: ChatArgs) -> Result<ExitCode> {
    let workspace = args
        .workspace
        .as_deref()
        .map(|d| workspace_root(global, d))
        .transpose()?;
    let app = Arc::new(App::open(global.dirs()?, args.approve).await?);
    // Long-running: watch workspaces instead of walking them before each question.
    app.indexes.watch_changes();
    if let Some(id) = &args.session
        && app.store.get_session(id)?.is_none()
    {
        anyhow::bail!("no session `{id}`; `capstan chat` then /sessions lists them");
    }
    let mut chat = Chat {
        app,
        approve: ApproveSource::Flag(args.approve),
        session: args.session,
        workspace,
        lines: stdin_lines(),
        stdin_open: true,
        typed_ahead: VecDeque::new(),
    };
    errln!("capstan chat: /help for commands, /quit to leave");
    chat.show_workspace();
    loop {
        err!("you> ");
        let line = match chat.typed_ahead.pop_front() {
            Some(l) => l,
            None => tokio::select! {
                l = chat.lines.recv() => match l {
                    Some(l) => l,
                    None => break,
                },
                _ = tokio::signal::ctrl_c() => break,
            },
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(command) = line.strip_prefix('/') {
            let (name, arg) = command.split_once(' ').unwrap_or((command, ""));
            match (name, arg.trim()) {
                ("quit" | "exit", _) => break,
                ("help", _) => errln!("{HELP}"),
                ("cancel", _) => errln!("no run in progress"),
                ("sessions", _) => chat.list_sessions()?,
                ("session", id) if !id.is_empty() => chat.switch_session(id)?,
                ("workspace", "") => chat.show_workspace(),
                ("workspace", dir) => match workspace_root(global, &PathBuf::from(dir)) {
                    Ok(root) => {
                        chat.workspace = Some(root);
                        chat.show_workspace();
                    }
                    Err(e) => errln!("{e:#}"),
                },
                _ => errln!("unknown command `/{command}`; /help lists them"),
            }
            continue;
        }
        chat.turn(line.to_string()).await?;
    }
    errln!();
    if let Some(id) = &chat.session {
        errln!("session {id} (continue it: capstan chat --session {id})");
    }
    Ok(ExitCode::SUCCESS)
}

impl Chat {
    /// The workspace the next run gets, with its policy profile.
    fn show_workspace(&self) {
        let root = self.workspace.clone().or_else(|| {
            let session = self
                .app
                .store
                .get_session(self.session.as_deref()?)
                .ok()??;
            let ws = self
                .app
                .store
                .get_workspace_by_id(&session.workspace_id?)
                .ok()??;
            Some(ws.root_path)
        });
        match root {
            None => errln!("workspace: none (questions only; /workspace DIR binds one)"),
            Some(root) => {
                let profile = match self.app.store.get_workspace_by_root(&root).ok().flatten() {
                    Some(ws) => self.app.config.profile_for(&ws).to_string(),
                    None => format!(
                        "{}; registered at the next run",
                        self.app.config.policy.profile
                    ),
                };
                errln!("workspace: {} (policy: {profile})", root.display());
            }
        }
    }

    fn list_sessions(&self) -> Result<()> {
        let sessions = self.app.store.list_sessions(10)?;
        if sessions.is_empty() {
            errln!("no sessions yet");
        }
        for s in sessions {
            let mark = if Some(&s.id) == self.session.as_ref() {
                "*"
            } else {
                " "
            };
            errln!("{mark} {}  {}  ({})", s.id, s.title, s.updated_at);
        }
        Ok(())
    }

    fn switch_session(&mut self, id: &str) -> Result<()> {
        if self.app.store.get_session(id)?.is_none() {
            errln!("no session `{id}`; /sessions lists them");
            return Ok(());
        }
        self.session = Some(id.to_string());
        self.workspace = None;
        errln!("continuing session {id}");
        self.show_workspace();
        Ok(())
    }

    /// One message, start to end, answering approvals and `/cancel` meanwhile.
    async fn turn(&mut self, message: String) -> Result<()> {
        let (feed, mut asks) = Feed::new(
            false,
            self.approve,
            Outcomes::PlanTasks,
            self.app.broker.clone(),
        );
        let cancel = CancellationToken::new();
        let req = AskRequest {
            message,
            session_id: self.session.clone(),
            workspace: self.workspace.clone(),
            quota: None,
        };
        let app = self.app.clone();
        let frontend = feed.frontend();
        let run_cancel = cancel.clone();
        let mut run = tokio::spawn(async move { app.ask(req, frontend, run_cancel).await });
        let mut waiting: VecDeque<Ask> = VecDeque::new();
        loop {
            // An approval decided elsewhere (expired, answered from the web chat)
            // no longer waits for a line here: the next line is a new message.
            self.forget_settled(&mut waiting);
            // Lines typed ahead answer approvals first.
            while !waiting.is_empty()
                && let Some(line) = self.typed_ahead.pop_front()
            {
                self.answer(&line, &mut waiting, &cancel);
            }
            if !self.stdin_open {
                for ask in waiting.drain(..) {
                    errln!("(end of input: denied)");
                    let _ = self.app.broker.decide(
                        &ask.approval_id,
                        Decision::Denied,
                        crate::plugins::services::approval::Via::Terminal,
                    );
                }
            }
            tokio::select! {
                done = &mut run => {
                    let done = done??;
                    self.session = Some(done.session_id);
                    return Ok(());
                }
                Some(ask) = asks.recv() => waiting.push_back(ask),
                line = self.lines.recv(), if self.stdin_open => match line {
                    None => self.stdin_open = false,
                    Some(line) if line.trim() == "/cancel" => {
                        errln!("· cancelling…");
                        cancel.cancel();
                    }
                    Some(line) => {
                        self.forget_settled(&mut waiting);
                        if waiting.is_empty() {
                            self.typed_ahead.push_back(line);
                        } else {
                            self.answer(&line, &mut waiting, &cancel);
                        }
                    }
                },
                _ = tokio::signal::ctrl_c() => {
                    errln!("\n· cancelling…");
                    cancel.cancel();
                }
            }
        }
    }

    fn forget_settled(&self, waiting: &mut VecDeque<Ask>) {
        waiting.retain(|ask| self.app.broker.is_open(&ask.approval_id));
    }

    fn answer(&self, line: &str, waiting: &mut VecDeque<Ask>, cancel: &CancellationToken) {
        if line.trim() == "/cancel" {
            errln!("· cancelling…");
            cancel.cancel();
            return;
        }
        let Some(ask) = waiting.front() else { return };
        match parse_decision(line, ask) {
            Some(decision) => {
                let _ = self.app.broker.decide(
                    &ask.approval_id,
                    decision,
                    crate::plugins::services::approval::Via::Terminal,
                );
                waiting.pop_front();
            }
            None => {
                err!("{}", answer_hint(ask));
            }
        }
    }
}
