//! What a task changed in the workspace: the closed sets of the
//! `workspace.changes` event, shared by the sandbox (which classifies a
//! command's writes), the change store (which lands and undoes them) and
//! every frontend that shows them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::names;

/// What happened to one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// The path did not exist before.
    Created,
    /// Same path, other content (a symlink: other target).
    Modified,
    /// The path no longer exists.
    Deleted,
    /// Moved from another path, same bytes.
    Renamed,
    /// Same content (or same directory), other permission bits.
    ModeChanged,
}

names!(ChangeKind, "change kind", {
    Created => "created",
    Modified => "modified",
    Deleted => "deleted",
    Renamed => "renamed",
    ModeChanged => "mode_changed",
});

/// The type of filesystem entry a change is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryType {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (its target is never followed).
    Symlink,
}

names!(EntryType, "entry type", {
    File => "file",
    Dir => "dir",
    Symlink => "symlink",
});

/// Where a change set is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeSetState {
    /// Staged, waiting for a review.
    Pending,
    /// In the workspace.
    Applied,
    /// Denied in review: never landed.
    Discarded,
    /// Taken back.
    Undone,
}

names!(ChangeSetState, "change set state", {
    Pending => "pending",
    Applied => "applied",
    Discarded => "discarded",
    Undone => "undone",
});

/// One path of a `workspace.changes` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChangedFile {
    /// Workspace-relative, `/`-separated.
    pub path: String,
    /// What happened to it.
    pub kind: ChangeKind,
    /// What sort of entry it is (after the change; before, when deleted).
    pub entry: EntryType,
    /// Renamed: the old path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Size in bytes before; absent when created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_size: Option<u64>,
    /// Size in bytes after; absent when deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_size: Option<u64>,
    /// Permission bits, octal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_mode: Option<String>,
    /// Permission bits after, octal; absent when deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_mode: Option<String>,
    /// Unified diff (text files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// One line for binary and office files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// A plugin operation wrote it without naming it in its input: seen by
    /// comparing the workspace before and after, but its previous version
    /// was not kept (undo leaves it as it is).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undeclared: bool,
}
