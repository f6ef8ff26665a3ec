//! `capstan workspace add|list|use|remove`: the folders Capstan may work in,
//! their policy profiles, and which one a session uses.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use capstan_store::{Profile, Store, Workspace};

use super::{GlobalArgs, workspace_root};
use crate::config::Config;
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
        /// cautious: ask for anything but read-only commands; trusted: also run writes;
        /// locked: run nothing; config: follow `[policy] profile` in capstan.toml.
        /// Default for a new folder: config (itself `cautious` unless you set it).
        #[arg(long, value_parser = ["cautious", "trusted", "locked", "config"])]
        profile: Option<String>,
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
    // Only to show the profile a workspace without its own follows; a broken
    // config is reported by the commands that need it, not here.
    let config = Config::load(&dirs.user_config_file()).ok();
    let line = |ws: &Workspace| line(ws, config.as_ref());
    match cmd {
        WorkspaceCommand::Add { dir, name, profile } => {
            let root = workspace_root(global, &dir)?;
            let profile: Option<Option<Profile>> = match profile.as_deref() {
                None => None,
                Some("config") => Some(None),
                Some(p) => Some(Some(p.parse().map_err(anyhow::Error::msg)?)),
            };
            let name = name.unwrap_or_else(|| {
                root.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
            let ws = match (store.get_workspace_by_root(&root)?, profile) {
                (Some(ws), None) => {
                    errln!("already registered (--profile changes its profile)");
                    ws
                }
                (Some(ws), Some(profile)) => {
                    store.set_profile(&ws.id, profile)?;
                    errln!("already registered; profile changed");
                    Workspace {
                        policy_profile: profile,
                        ..ws
                    }
                }
                (None, profile) => store.add_workspace(&root, &name, profile.flatten())?,
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
                            "profile": profile_words(ws, config.as_ref()).0,
                            "profile_from": profile_words(ws, config.as_ref()).1,
                            "sessions": used(ws),
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
            let (profile, from) = profile_words(&ws, config.as_ref());
            outln!(
                "session {} ({}) now uses {} (policy: {profile}, from the {from})",
                session.id,
                session.title,
                ws.root_path.display(),
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

/// The profile in force and where it comes from (`workspace` or `config`);
/// `?` when the config cannot be read.
fn profile_words(ws: &Workspace, config: Option<&Config>) -> (String, &'static str) {
    match (ws.policy_profile, config) {
        (Some(p), _) => (p.to_string(), "workspace"),
        (None, Some(config)) => (config.profile_for(ws).to_string(), "config"),
        (None, None) => ("?".into(), "config"),
    }
}

fn line(ws: &Workspace, config: Option<&Config>) -> String {
    let (profile, from) = profile_words(ws, config);
    format!(
        "{}  {:<20} policy: {:<9} {:<10} {}",
        ws.id,
        ws.name,
        profile,
        format!("({from})"),
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
