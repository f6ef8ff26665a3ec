//! `[changes]`: whether sandboxed commands' writes are captured, whether
//! they land at once or wait for a review, which paths are always reviewed,
//! and how long previous versions are kept for undo.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Paths whose changes always go to review (workspace-relative; a trailing
/// `/` covers a whole directory).
pub const PROTECTED: &[&str] = &[
    ".git/config",
    ".git/hooks/",
    ".envrc",
    ".capstan/",
    "capstan.toml",
];

/// `apply` or `review`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyMode {
    /// Land at once, keep undo.
    #[default]
    Apply,
    /// Hold every change set as an approval.
    Review,
}

/// `[changes]` in the user's capstan.toml.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChangesSection {
    /// Capture every sandboxed command's writes (staged, then landed by
    /// Capstan with the previous versions kept). Needs the sandbox: with
    /// `sandbox = "off"` writes go straight to the workspace, uncaptured.
    pub capture: bool,
    /// `apply` (default) or `review`.
    pub apply: ApplyMode,
    /// More protected paths, on top of the built-in ones.
    pub protected: Vec<String>,
    /// Previous versions are forgotten after this many days (0: never).
    pub keep_days: u64,
    /// Past this many MiB of previous versions, the oldest sets go first.
    pub max_mb: u64,
    /// Per workspace: `[changes.workspace."/path"] apply = "review"`.
    pub workspace: BTreeMap<PathBuf, WorkspaceChanges>,
}

impl Default for ChangesSection {
    fn default() -> Self {
        let r = capstan_changes::Retention::default();
        ChangesSection {
            capture: true,
            apply: ApplyMode::Apply,
            protected: Vec::new(),
            keep_days: r.keep_days,
            max_mb: r.max_bytes >> 20,
            workspace: BTreeMap::new(),
        }
    }
}

/// `[changes.workspace."<root>"]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceChanges {
    pub apply: Option<ApplyMode>,
    pub protected: Vec<String>,
}

impl ChangesSection {
    pub fn retention(&self) -> capstan_changes::Retention {
        capstan_changes::Retention {
            keep_days: self.keep_days,
            max_bytes: self.max_mb << 20,
        }
    }

    /// The apply mode and protected paths of one workspace (`workspace`
    /// canonical): the built-in protected paths, the user's, and the
    /// workspace's own entry's on top.
    pub fn for_workspace(&self, workspace: &Path) -> (ApplyMode, Vec<String>) {
        let mut apply = self.apply;
        let mut protected: Vec<String> = PROTECTED.iter().map(|s| s.to_string()).collect();
        protected.extend(self.protected.iter().cloned());
        for (root, w) in &self.workspace {
            if root == workspace || std::fs::canonicalize(root).is_ok_and(|r| r == workspace) {
                apply = w.apply.unwrap_or(apply);
                protected.extend(w.protected.iter().cloned());
            }
        }
        (apply, protected)
    }
}
