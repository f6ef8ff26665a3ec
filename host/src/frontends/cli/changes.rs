//! `capstan changes [RUN]` and `capstan undo [RUN|TASK|SET]`: the change
//! sets runs made to workspaces, their diffs, and taking them back.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use capstan_changes::{ChangeSetState, Conflicts, Record, Store};

use super::{GlobalArgs, workspace_root};
use crate::config::Config;
use crate::outln;
use crate::plugins::services::changes::open_store;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Each change set is one task's writes to one workspace: its id, state \
(applied, pending review, discarded, undone), run and task, then one line per path (created, \
modified, deleted, renamed, mode_changed).\n\n\
Examples:\n  capstan changes --workspace .            the sets of this folder\n  \
capstan changes run_0xfgr92yyjmz --diff  one run's sets with their diffs\n  \
capstan undo --workspace .               take back this folder's newest set"
)]
pub struct ChangesArgs {
    /// A run id, task id or change set id (default: every change set, newest last).
    pub target: Option<String>,
    /// Only the change sets of this workspace folder.
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Print the unified diffs too.
    #[arg(long)]
    pub diff: bool,
    /// Print JSON (one object per change set, diffs included).
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Undo puts back the previous versions Capstan kept when the set landed \
and removes the files it created. A file changed again since (by you or a later run) is not \
overwritten: undo refuses and names it, unless you choose --keep-changed or --force. The sets \
of a run are undone newest first.\n\n\
Exit status: 0 when undone, 1 when refused (nothing was changed), 2 on errors (nothing to undo, a bad argument).\n\n\
Examples:\n  capstan undo --workspace .        the newest applied set of this folder\n  \
capstan undo run_0xfgr92yyjmz     every set of one run\n  \
capstan undo cs-1795843254320-122a94ec --keep-changed"
)]
pub struct UndoArgs {
    /// A run id, task id or change set id (default: the newest applied change set,
    /// of any workspace unless --workspace is given).
    pub target: Option<String>,
    /// Only the change sets of this workspace folder.
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Put the previous versions back even over files changed since.
    #[arg(long, conflicts_with = "keep_changed")]
    pub force: bool,
    /// Undo the other files and leave the ones changed since as they are.
    #[arg(long)]
    pub keep_changed: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn store(global: &GlobalArgs) -> Result<Store> {
    let dirs = global.dirs()?;
    let config = Config::load(&dirs.user_config_file())?;
    open_store(&dirs.data, &config.changes)
}

/// The sets a target names (a set id, or every set of a run or task), of
/// `workspace` only when given (a folder, resolved as every command does).
fn select(
    global: &GlobalArgs,
    store: &Store,
    target: Option<&str>,
    workspace: Option<&Path>,
) -> Result<Vec<Record>> {
    let workspace = workspace.map(|d| workspace_root(global, d)).transpose()?;
    let picked: Vec<Record> = store
        .list()?
        .into_iter()
        .filter(|r| workspace.as_ref().is_none_or(|w| &r.workspace == w))
        .filter(|r| {
            target.is_none_or(|t| r.id == t || r.origin.run_id == t || r.origin.task_id == t)
        })
        .collect();
    if let Some(t) = target
        && picked.is_empty()
    {
        let of = workspace
            .as_ref()
            .map(|w| format!("of {} ", w.display()))
            .unwrap_or_default();
        bail!(
            "no change set {of}belongs to {t:?}; `capstan changes` lists every change set with its run and task"
        );
    }
    Ok(picked)
}

pub async fn changes(global: &GlobalArgs, args: ChangesArgs) -> Result<ExitCode> {
    let store = store(global)?;
    let sets = select(
        global,
        &store,
        args.target.as_deref(),
        args.workspace.as_deref(),
    )?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&sets)?);
        return Ok(ExitCode::SUCCESS);
    }
    if sets.is_empty() {
        match &args.workspace {
            Some(w) => outln!("no change sets in {} yet", w.display()),
            None => outln!("no change sets yet"),
        }
    }
    for r in &sets {
        let (before, after) = r.sizes();
        outln!(
            "{}  {}  run {}  task {}  {} file(s), {} -> {} bytes",
            r.id,
            r.state.as_str(),
            r.origin.run_id,
            r.origin.task_id,
            r.changes.len(),
            before,
            after
        );
        outln!("  from `{}` in {}", r.origin.source, r.workspace.display());
        for c in &r.changes {
            let from = c
                .from
                .as_ref()
                .map(|f| format!(" (from {f})"))
                .unwrap_or_default();
            outln!("  {:<12} {}{}", c.kind.as_str(), c.path, from);
            if args.diff
                && let Some(d) = &c.diff
            {
                for line in d.lines() {
                    outln!("    {line}");
                }
            }
        }
        for k in &r.kept {
            outln!("  kept by undo: {} ({})", k.path, k.why);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn undo(global: &GlobalArgs, args: UndoArgs) -> Result<ExitCode> {
    let store = store(global)?;
    let mut sets: Vec<Record> = select(
        global,
        &store,
        args.target.as_deref(),
        args.workspace.as_deref(),
    )?
    .into_iter()
    .filter(|r| r.state == ChangeSetState::Applied)
    .collect();
    if args.target.is_none() {
        // Only the newest.
        sets = sets.pop().into_iter().collect();
    }
    if sets.is_empty() {
        match &args.workspace {
            Some(w) => bail!(
                "nothing to undo in {}: no applied change set matches (see `capstan changes --workspace {}`)",
                w.display(),
                w.display()
            ),
            None => bail!("nothing to undo: no applied change set matches (see `capstan changes`)"),
        }
    }
    let conflicts = if args.force {
        Conflicts::Force
    } else if args.keep_changed {
        Conflicts::Skip
    } else {
        Conflicts::Refuse
    };
    // Newest first: a later set may have changed what an earlier one wrote.
    sets.reverse();
    let mut reports = Vec::new();
    let mut refused_any = false;
    for r in &sets {
        let s = store.clone();
        let id = r.id.clone();
        let report = tokio::task::spawn_blocking(move || s.undo(&id, conflicts)).await??;
        refused_any |= !report.done;
        reports.push(report);
        if refused_any {
            break;
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        // Named with its workspace and command: without a target, the
        // newest set may be another folder's than the one you are in.
        for (rep, r) in reports.iter().zip(&sets) {
            let what = format!(
                "{} (`{}` in {})",
                rep.id,
                r.origin.source,
                r.workspace.display()
            );
            if rep.done {
                outln!("undid {what}: {} path(s) restored", rep.restored.len());
                for k in &rep.refused {
                    outln!("  left as it is: {} ({})", k.path, k.why);
                }
            } else {
                outln!(
                    "refused to undo {what}: {} file(s) cannot be put back as the set left them, nothing was undone:",
                    rep.refused.len()
                );
                for k in &rep.refused {
                    outln!("  {}: {}", k.path, k.why);
                }
                outln!(
                    "run again with --keep-changed to undo the other files, or --force to also overwrite files changed since (a file whose previous version was not kept stays as it is)"
                );
            }
        }
    }
    Ok(if refused_any {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
