//! `capstan workspace add|list|use|remove`: the folders Capstan may work in,
//! their policy profiles, and which one a session uses.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use capstan_store::{Profile, Store, Workspace};

use super::{GlobalArgs, workspace_root};
use crate::dirs::Dirs;
use crate::{errln, outln};

#[derive(clap::Subcommand, Debug)]
pub enum WorkspaceCommand {
    /// Register a folder (its policy profile decides which commands run without asking).
    Add {
        dir: PathBuf,
        /// Display name (default: the folder's name).
        #[arg(long)]
        name: Option<String>,
        /// cautious: ask for anything but read-only commands; trusted: also run writes; locked: run nothing.
        #[arg(long, value_parser = ["cautious", "trusted", "locked"], default_value = "cautious")]
        profile: String,
    },
    /// Registered workspaces with their profiles, and the sessions using them.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Bind a workspace to a session (default: the most recent session); its next run works there.
    Use {
        /// The folder or the workspace id.
        workspace: String,
        #[arg(long, value_name = "ID")]
        session: Option<String>,
    },
    /// Forget a workspace (its folder is not touched; sessions keep their history).
    Remove {
        /// The folder or the workspace id.
        workspace: String,
    },
}

pub async fn run(global: &GlobalArgs, cmd: WorkspaceCommand) -> Result<ExitCode> {
    let dirs = global.dirs()?;
    Dirs::ensure(&dirs.data)?;
    let store = Store::open(dirs.data.join("capstan.db")).context("opening Capstan's database")?;
    match cmd {
        WorkspaceCommand::Add { dir, name, profile } => {
            let root = workspace_root(global, &dir)?;
            let profile: Profile = profile.parse().map_err(anyhow::Error::msg)?;
            let name = name.unwrap_or_else(|| {
                root.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
            let ws = match store.get_workspace_by_root(&root)? {
                Some(ws) => {
                    store.set_profile(&ws.id, profile)?;
                    errln!("already registered; profile set to {profile}");
                    Workspace {
                        policy_profile: profile,
                        ..ws
                    }
                }
                None => store.add_workspace(&root, &name, profile)?,
            };
            outln!("{}", line(&ws));
        }
        WorkspaceCommand::List { json } => {
            let all = store.list_workspaces()?;
            if all.is_empty() && !json {
                errln!(
                    "no workspaces yet: `capstan workspace add DIR`, or pass --workspace DIR to ask, chat or serve"
                );
            }
            let sessions = store.list_sessions(usize::MAX)?;
            let used = |ws: &Workspace| {
                sessions
                    .iter()
                    .filter(|s| s.workspace_id.as_deref() == Some(&ws.id))
                    .count()
            };
            if json {
                let rows: Vec<serde_json::Value> = all
                    .iter()
                    .map(|ws| {
                        serde_json::json!({
                            "id": ws.id, "name": ws.name, "root": ws.root_path,
                            "profile": ws.policy_profile.as_str(), "sessions": used(ws),
                        })
                    })
                    .collect();
                outln!(
                    "{}",
                    crate::term::json_pretty(&serde_json::json!({"workspaces": rows}))
                );
            }
            for ws in all.iter().filter(|_| !json) {
                outln!("{}   {} session(s)", line(ws), used(ws));
            }
        }
        WorkspaceCommand::Use { workspace, session } => {
            let ws = find(&store, &workspace)?;
            let session = match session {
                Some(id) => store.get_session(&id)?.with_context(|| {
                    format!("no session `{id}`; `capstan chat` then /sessions lists them")
                })?,
                None => store.list_sessions(1)?.into_iter().next().context(
                    "no session yet; ask something first, or pass --workspace to ask or chat",
                )?,
            };
            store.set_session_workspace(&session.id, Some(&ws.id))?;
            outln!(
                "session {} ({}) now uses {} (policy: {})",
                session.id,
                session.title,
                ws.root_path.display(),
                ws.policy_profile
            );
        }
        WorkspaceCommand::Remove { workspace } => {
            let ws = find(&store, &workspace)?;
            store.remove_workspace(&ws.id)?;
            outln!(
                "removed {} ({}); the folder is untouched",
                ws.id,
                ws.root_path.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn line(ws: &Workspace) -> String {
    format!(
        "{}  {:<20} policy: {:<9} {}",
        ws.id,
        ws.name,
        ws.policy_profile.as_str(),
        ws.root_path.display()
    )
}

/// A workspace by id or by folder.
fn find(store: &Store, key: &str) -> Result<Workspace> {
    if let Some(ws) = store.get_workspace_by_id(key)? {
        return Ok(ws);
    }
    if let Some(ws) = store.get_workspace_by_root(&PathBuf::from(key))? {
        return Ok(ws);
    }
    bail!("no workspace `{key}`; `capstan workspace list` shows them (by id or folder)")
}
