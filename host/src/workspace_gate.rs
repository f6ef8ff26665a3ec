//! The one workspace gate. Every entry point that binds a folder as a
//! workspace (the CLI commands, `capstan serve` over HTTP, AG-UI and stdio,
//! `capstan mcp`, and the plugin runtime before each task) asks it, so there is
//! one answer to "may this folder be a workspace?".
//!
//! Two rules:
//! - Never, from anywhere: `/`; Capstan's own config, data or cache dir, a
//!   folder inside one, or a folder that contains one (a command there could
//!   rewrite compiled components, the database or the user's grants); a folder
//!   that is or contains the user's home or a system directory (`/etc`,
//!   `/usr`, `/var`...); a folder inside the system directories that never
//!   hold projects (`/etc`, `/proc`, `/sys`, `/dev`, `/boot`, `/run`).
//! - Over the network (HTTP, AG-UI, MCP over HTTP) only folders the user
//!   registered from the command line (`capstan workspace add`, or `-w` given
//!   to `capstan serve`): a web page must not be able to name a folder.
//!
//! Paths are made canonical first, so `..` and symlinks cannot dodge a rule;
//! the forbidden places are made canonical too (`/bin` may be `/usr/bin`).

use std::path::{Component, Path, PathBuf};

use crate::dirs::Dirs;

/// Directories that are never a workspace and never inside one.
const SYSTEM_DIRS: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr",
    "/var",
];

/// System directories that hold no projects: nothing inside them is a workspace.
const NO_PROJECTS_INSIDE: &[&str] = &["/boot", "/dev", "/etc", "/proc", "/run", "/sys"];

/// Who is asking for the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The user at the command line (or a frontend they spawned on stdio): any
    /// safe folder, registered on first use.
    Local,
    /// A network client (HTTP, AG-UI, MCP over HTTP): registered folders only.
    Remote,
}

/// Why a folder cannot be a workspace; the message says what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("workspace {given} cannot be used ({error}); pass the path of an existing directory")]
    Missing { given: String, error: String },
    #[error("workspace {0} is not a directory; pass the path of a directory")]
    NotADirectory(String),
    #[error(
        "workspace {0} is the filesystem root; a workspace is one project folder, never `/`. \
         Pass the project's own folder"
    )]
    Root(String),
    #[error(
        "workspace {root} overlaps Capstan's own directory {own}: a command there could rewrite \
         Capstan's compiled code, database or config. Choose a project folder outside it \
         (or move Capstan's state with CAPSTAN_HOME)"
    )]
    CapstanOwn { root: String, own: String },
    #[error(
        "workspace {root} is or contains your home directory {home}; a workspace is one project \
         folder. Pass the project's own folder (e.g. {home}/my-project)"
    )]
    Home { root: String, home: String },
    #[error(
        "workspace {root} is, contains or lies in the system directory {system}; a workspace is \
         one project folder. Pass the project's own folder"
    )]
    System { root: String, system: String },
    #[error(
        "workspace {root} is not registered: over the network only folders you registered on \
         this machine can be used. Run `capstan workspace add {root}` (or start the server with \
         `-w {root}`), then try again"
    )]
    Unregistered { root: String },
}

impl Refusal {
    /// The folder exists but may not be used here (as opposed to a bad path).
    pub fn is_forbidden(&self) -> bool {
        !matches!(self, Refusal::Missing { .. } | Refusal::NotADirectory(_))
    }
}

#[derive(Debug, Clone)]
pub struct WorkspaceGate {
    /// Capstan's own directories, canonical where they exist.
    own: Vec<PathBuf>,
    home: Option<PathBuf>,
    system: Vec<PathBuf>,
    no_projects_inside: Vec<PathBuf>,
}

impl WorkspaceGate {
    /// A gate that keeps workspaces away from `own` (Capstan's directories).
    pub fn new(own: impl IntoIterator<Item = PathBuf>) -> Self {
        let home = directories::BaseDirs::new().map(|b| canonical_lenient(b.home_dir()));
        let both = |list: &[&str]| -> Vec<PathBuf> {
            let mut out = Vec::new();
            for dir in list {
                let literal = PathBuf::from(dir);
                let canonical = canonical_lenient(&literal);
                if canonical != literal {
                    out.push(canonical);
                }
                out.push(literal);
            }
            out
        };
        Self {
            own: own.into_iter().map(|d| canonical_lenient(&d)).collect(),
            home,
            system: both(SYSTEM_DIRS),
            no_projects_inside: both(NO_PROJECTS_INSIDE),
        }
    }

    /// The gate for Capstan's directories.
    pub fn for_dirs(dirs: &Dirs) -> Self {
        Self::new([dirs.config.clone(), dirs.data.clone(), dirs.cache.clone()])
    }

    /// The canonical root of `dir` if it may be a workspace at all.
    pub fn check(&self, dir: &Path) -> Result<PathBuf, Refusal> {
        let root = dir.canonicalize().map_err(|e| Refusal::Missing {
            given: dir.display().to_string(),
            error: e.to_string(),
        })?;
        if !root.is_dir() {
            return Err(Refusal::NotADirectory(root.display().to_string()));
        }
        self.check_canonical(&root)?;
        Ok(root)
    }

    /// As [`WorkspaceGate::check`] for a caller: a remote one may only use a
    /// folder `registered` says yes to.
    pub fn check_for(
        &self,
        dir: &Path,
        caller: Caller,
        registered: impl Fn(&Path) -> bool,
    ) -> Result<PathBuf, Refusal> {
        let root = self.check(dir)?;
        if caller == Caller::Remote && !registered(&root) {
            return Err(Refusal::Unregistered {
                root: root.display().to_string(),
            });
        }
        Ok(root)
    }

    /// The never-rules on a root that is already canonical (re-made canonical
    /// anyway when it exists: a symlink may have been swapped in since).
    pub fn check_canonical(&self, root: &Path) -> Result<(), Refusal> {
        let root = canonical_lenient(root);
        let shown = || root.display().to_string();
        if root.parent().is_none() {
            return Err(Refusal::Root(shown()));
        }
        for own in &self.own {
            if own.starts_with(&root) || root.starts_with(own) {
                return Err(Refusal::CapstanOwn {
                    root: shown(),
                    own: own.display().to_string(),
                });
            }
        }
        if let Some(home) = &self.home
            && home.starts_with(&root)
        {
            return Err(Refusal::Home {
                root: shown(),
                home: home.display().to_string(),
            });
        }
        for system in &self.system {
            if system.starts_with(&root) {
                return Err(Refusal::System {
                    root: shown(),
                    system: system.display().to_string(),
                });
            }
        }
        for system in &self.no_projects_inside {
            if root.starts_with(system) {
                return Err(Refusal::System {
                    root: shown(),
                    system: system.display().to_string(),
                });
            }
        }
        Ok(())
    }
}

/// Why a workspace-relative path a client sent is refused before anything
/// is opened: the plugins' rules for `path` (plugins/shared/files.rs). Each
/// door words the refusal for its own callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelativePathRefusal {
    /// A NUL character.
    Nul,
    /// Absolute (`/x`, `\\x`, `C:x`), not relative to the workspace root.
    Absolute,
    /// A `..` component.
    ParentDir,
}

/// The plugins' rules for a workspace-relative path, checked on the string:
/// no NUL, nothing absolute, no `..`. What a string cannot show (a symlink
/// out) is the opener's job: [`confine`] canonicalises, the citation viewer
/// opens through a capability handle.
pub fn check_relative(rel: &str) -> Result<&Path, RelativePathRefusal> {
    if rel.contains('\0') {
        return Err(RelativePathRefusal::Nul);
    }
    let windows_drive =
        rel.len() >= 2 && rel.as_bytes()[1] == b':' && rel.as_bytes()[0].is_ascii_alphabetic();
    if rel.starts_with('/') || rel.starts_with('\\') || windows_drive {
        return Err(RelativePathRefusal::Absolute);
    }
    let path = Path::new(rel);
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(RelativePathRefusal::ParentDir);
    }
    Ok(path)
}

/// Why [`confine`] refused a path; the message names the path and the rule.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The string broke a rule [`check_relative`] checks.
    #[error("{}", refusal_message(.rel, *.refusal))]
    Refused {
        rel: String,
        refusal: RelativePathRefusal,
    },
    /// Nothing at the path (or it cannot be resolved).
    #[error("`{rel}`: {source}")]
    Unresolvable { rel: String, source: std::io::Error },
    /// It exists, but a symlink leads outside the workspace.
    #[error("`{rel}` resolves outside the workspace (through a symlink)")]
    Escapes { rel: String },
}

fn refusal_message(rel: &str, refusal: RelativePathRefusal) -> String {
    match refusal {
        RelativePathRefusal::Nul => format!("`{}` contains a NUL character", rel.escape_debug()),
        RelativePathRefusal::Absolute => {
            format!("`{rel}` must be relative to the workspace root, not absolute")
        }
        RelativePathRefusal::ParentDir => {
            format!("`{rel}` must stay inside the workspace (no `..`)")
        }
    }
}

/// A path a client names inside a workspace (an MCP resource URI, a
/// completion prefix, a command's cwd), relative to the canonical `root`:
/// [`check_relative`], and then the rule a string cannot show: after every
/// symlink is followed the file is still inside `root`. The error says which
/// rule the path broke.
pub fn confine(root: &Path, rel: &str) -> Result<PathBuf, ConfineError> {
    let path = check_relative(rel).map_err(|refusal| ConfineError::Refused {
        rel: rel.to_string(),
        refusal,
    })?;
    let real = root
        .join(path)
        .canonicalize()
        .map_err(|source| ConfineError::Unresolvable {
            rel: rel.to_string(),
            source,
        })?;
    if !real.starts_with(root) {
        return Err(ConfineError::Escapes {
            rel: rel.to_string(),
        });
    }
    Ok(real)
}

/// Flags every read of a workspace file the host makes itself: `O_NONBLOCK`,
/// so a FIFO with no writer or a device opens at once instead of holding the
/// thread until something writes to it, and `O_NOCTTY`. The caller then checks
/// the open handle's metadata (`fstat`) is a regular file, so what it reads is
/// what it checked; a regular file reads normally under `O_NONBLOCK`.
const NONBLOCKING_READ_FLAGS: i32 = libc::O_NONBLOCK | libc::O_NOCTTY;

/// Open options for reading a workspace file through a capability handle
/// (see [`NONBLOCKING_READ_FLAGS`]).
pub fn nonblocking_read() -> cap_std::fs::OpenOptions {
    use cap_std::fs::OpenOptionsExt as _;
    let mut options = cap_std::fs::OpenOptions::new();
    options.read(true).custom_flags(NONBLOCKING_READ_FLAGS);
    options
}

/// Open options for reading a workspace file already confined by
/// [`confine`] (see [`NONBLOCKING_READ_FLAGS`]).
pub fn nonblocking_read_std() -> std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut options = std::fs::OpenOptions::new();
    options.read(true).custom_flags(NONBLOCKING_READ_FLAGS);
    options
}

/// `path` made canonical as far as it exists, the rest appended without `.`
/// or `..` tricks (a missing component cannot be a symlink). Capstan's own
/// dirs may not exist yet when a workspace is checked.
fn canonical_lenient(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let mut rest = Vec::new();
    let mut base = path.to_path_buf();
    loop {
        if let Ok(p) = base.canonicalize() {
            let mut out = p;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (base.file_name().map(|n| n.to_os_string()), base.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                base = parent.to_path_buf();
            }
            // Nothing of it exists (or it ends in `..`): normalise lexically.
            _ => return lexical(path),
        }
    }
}

fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(own: &Path) -> WorkspaceGate {
        WorkspaceGate::new([own.join("config"), own.join("data"), own.join("cache")])
    }

    #[test]
    fn system_dirs_root_and_home_are_refused() {
        let home = tempfile::tempdir().unwrap();
        let g = gate(home.path());
        for dir in ["/", "/etc", "/usr", "/var", "/proc/self", "/etc/..", "/tmp"] {
            let err = g.check(Path::new(dir)).unwrap_err();
            assert!(err.is_forbidden(), "{dir}: {err}");
        }
        if let Some(h) = directories::BaseDirs::new() {
            assert!(matches!(
                g.check(h.home_dir()),
                Err(Refusal::Home { .. }) | Err(Refusal::System { .. })
            ));
        }
    }

    #[test]
    fn capstan_dirs_inside_and_around_are_refused_under_any_spelling() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("cache/components")).unwrap();
        std::fs::create_dir_all(home.path().join("elsewhere")).unwrap();
        let g = gate(home.path());
        for dir in [
            home.path().to_path_buf(),
            home.path().join("cache"),
            home.path().join("cache/components"),
            home.path().join("elsewhere/../cache"),
        ] {
            assert!(
                matches!(g.check(&dir), Err(Refusal::CapstanOwn { .. })),
                "{}",
                dir.display()
            );
        }
        let link = home.path().join("elsewhere/link");
        std::os::unix::fs::symlink(home.path().join("cache"), &link).unwrap();
        assert!(matches!(g.check(&link), Err(Refusal::CapstanOwn { .. })));
        // A sibling project is fine.
        let ok = g.check(&home.path().join("elsewhere")).unwrap();
        assert!(ok.ends_with("elsewhere"));
    }

    #[test]
    fn remote_callers_need_a_registered_folder() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let g = gate(home.path());
        let err = g
            .check_for(project.path(), Caller::Remote, |_| false)
            .unwrap_err();
        assert!(err.to_string().contains("capstan workspace add"), "{err}");
        assert!(
            g.check_for(project.path(), Caller::Remote, |_| true)
                .is_ok()
        );
        assert!(
            g.check_for(project.path(), Caller::Local, |_| false)
                .is_ok()
        );
    }

    #[test]
    fn missing_parts_are_normalised() {
        assert_eq!(
            canonical_lenient(Path::new("/nonexistent-x/a/../b")),
            PathBuf::from("/nonexistent-x/b")
        );
    }
}
