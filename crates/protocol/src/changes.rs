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
    Created,
    Modified,
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
    File,
    Dir,
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
    /// Workspace-relative.
    pub path: String,
    pub kind: ChangeKind,
    pub entry: EntryType,
    /// Renamed: the old path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_size: Option<u64>,
    /// Permission bits, octal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_mode: Option<String>,
    /// Unified diff (text files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// One line for binary and office files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}
