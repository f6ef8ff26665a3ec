//! Capture: the command's writes as a change set instead of a blind copy-back.
//!
//! With [`crate::ExecSpec::capture`] set, the workspace is always the quota
//! overlay (see [`crate::quota`]) and, when the task is over, init *stages*
//! the upper layer instead of replaying it: every regular file of the upper
//! layer is copied (holes kept) into the capture directory under a numbered
//! name, with its final permission bits and modification time (so that
//! landing it is one rename), and one JSON line per upper-layer entry goes to `manifest.jsonl`
//! there ([`Staged`]: whiteouts, directories with their opaque flag, files,
//! symlinks), in pre-order (a directory before what it holds). The
//! workspace itself is not touched.
//!
//! Back in the caller, [`classify`] compares the manifest with the workspace
//! as it is and returns a [`ChangeSet`]: what was created, modified, deleted
//! (a whiteout or an opaque directory deletes whole trees: every file in them
//! is listed), renamed (a deleted file whose exact bytes reappear elsewhere),
//! or only had its mode changed; files copied up without a change are left
//! out. [`ChangeSet::ops`] is the manifest minus those unchanged files: the
//! operations that, replayed in order, make the workspace what the command
//! saw. Landing them (atomically, with previous versions kept) is the job of
//! the `capstan-changes` crate.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::io::{BufRead, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use serde::{Deserialize, Serialize};

use crate::quota::{CopyBack, copy_sparse, list, opaque, open_dir_at, shown};

/// Name of the manifest in the capture directory.
pub const MANIFEST: &str = "manifest.jsonl";

/// One entry of the upper layer, as staged by init. Paths are relative to the
/// workspace root, `/`-separated, one component per name read from the layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Staged {
    /// The command deleted whatever was at `path` (file or whole tree).
    Whiteout {
        /// Workspace-relative path that was deleted.
        path: String,
    },
    /// A directory; `opaque`: it replaced the old one (nothing of the old
    /// tree below it survives unless listed again).
    Dir {
        /// Workspace-relative path of the directory.
        path: String,
        /// Its permission bits.
        mode: u32,
        /// Whether it replaced the old directory wholesale.
        opaque: bool,
    },
    /// A regular file whose new content is the capture directory's `staged`.
    File {
        /// Workspace-relative path of the file.
        path: String,
        /// Its permission bits.
        mode: u32,
        /// Its new size in bytes.
        size: u64,
        /// Modification time, seconds since the Unix epoch.
        mtime: i64,
        /// Nanoseconds part of the modification time.
        mtime_nsec: i64,
        /// Name of the file holding the new content, in the capture directory.
        staged: String,
    },
    /// A symbolic link.
    Symlink {
        /// Workspace-relative path of the link.
        path: String,
        /// The link's target, as written (not resolved).
        target: String,
    },
}

impl Staged {
    /// The workspace-relative path the operation is about.
    pub fn path(&self) -> &str {
        match self {
            Staged::Whiteout { path }
            | Staged::Dir { path, .. }
            | Staged::File { path, .. }
            | Staged::Symlink { path, .. } => path,
        }
    }
}

pub use capstan_protocol::{ChangeKind, EntryType};

/// One side (before or after) of a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Side {
    /// What sort of entry it is.
    #[serde(rename = "type")]
    pub entry: EntryType,
    /// Permission bits.
    pub mode: u32,
    /// Bytes (files), 0 otherwise.
    pub size: u64,
    /// Symlink target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Workspace-relative, `/`-separated path (the new one, for a rename).
    pub path: String,
    /// What happened to it.
    pub kind: ChangeKind,
    /// Renamed: where the file was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The entry before (none when created).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<Side>,
    /// The entry after (none when deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<Side>,
    /// New file content: the staged file's name in the capture directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<String>,
}

/// What a command changed, computed from the upper layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSet {
    /// The capture directory (staged files and manifest).
    pub staging: PathBuf,
    /// The workspace root (canonical).
    pub workspace: PathBuf,
    /// Operations to replay, in order, to land the change set.
    pub ops: Vec<Staged>,
    /// The changes, one per path (renames folded into one entry).
    pub changes: Vec<Change>,
}

impl ChangeSet {
    /// Whether the command changed nothing.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

// ---------------------------------------------------------------------------
// Init side: staging the upper layer.
// ---------------------------------------------------------------------------

/// Stages the upper layer into `staging`. Runs in init, with no process of
/// the task left.
pub(crate) fn stage(upper: BorrowedFd, staging: BorrowedFd, xattr_prefix: &str) -> CopyBack {
    let mut report = CopyBack::default();
    // Staged files are created with their final permission bits (one
    // `fchmod` fewer per file); no process of the task is left to inherit
    // this umask, and init exits after staging.
    nix::sys::stat::umask(Mode::empty());
    let manifest = nix::fcntl::openat(
        staging,
        c"manifest.jsonl",
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    );
    let manifest = match manifest {
        Ok(fd) => fd,
        Err(e) => {
            report
                .errors
                .push(format!("cannot create the change manifest: {e}"));
            return report;
        }
    };
    let mut st = Stager {
        out: std::io::BufWriter::new(std::fs::File::from(manifest)),
        staging,
        prefix: xattr_prefix,
        next: 0,
        report: &mut report,
    };
    st.dir(upper, Path::new(""));
    if let Err(e) = st.out.flush() {
        report
            .errors
            .push(format!("cannot write the change manifest: {e}"));
    }
    report
}

struct Stager<'a> {
    out: std::io::BufWriter<std::fs::File>,
    staging: BorrowedFd<'a>,
    prefix: &'a str,
    next: u64,
    report: &'a mut CopyBack,
}

impl Stager<'_> {
    fn dir(&mut self, upper: BorrowedFd, at: &Path) {
        let names = match list(upper) {
            Ok(n) => n,
            Err(e) => {
                self.report.errors.push(format!("{}: {e}", shown(at)));
                return;
            }
        };
        for name in names {
            let path = at.join(OsStr::from_bytes(name.to_bytes()));
            if let Err(e) = self.entry(upper, &name, &path) {
                self.report.errors.push(format!("{}: {e}", shown(&path)));
            }
        }
    }

    fn write(&mut self, entry: &Staged) -> Result<(), String> {
        let mut line = serde_json::to_vec(entry).map_err(|e| e.to_string())?;
        line.push(b'\n');
        self.out.write_all(&line).map_err(|e| e.to_string())
    }

    fn entry(&mut self, upper: BorrowedFd, name: &CStr, path: &Path) -> Result<(), String> {
        let Some(rel) = path.to_str().map(str::to_owned) else {
            return Err("the name is not UTF-8 and cannot be captured".into());
        };
        let st = nix::sys::stat::fstatat(upper, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| e.to_string())?;
        let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
        let mode = st.st_mode & 0o777;
        match kind {
            SFlag::S_IFCHR if st.st_rdev == 0 => self.write(&Staged::Whiteout { path: rel }),
            SFlag::S_IFDIR => {
                let sub = open_dir_at(upper, name).map_err(|e| e.to_string())?;
                let opaque = opaque(&sub, self.prefix);
                self.write(&Staged::Dir {
                    path: rel,
                    mode,
                    opaque,
                })?;
                self.dir(sub.as_fd(), path);
                Ok(())
            }
            SFlag::S_IFREG => {
                let staged = self.next.to_string();
                self.next += 1;
                let src = nix::fcntl::openat(
                    upper,
                    name,
                    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| e.to_string())?;
                let cname = CString::new(staged.clone()).map_err(|e| e.to_string())?;
                // The staged file takes its final mode (permission bits only:
                // no setuid/setgid; created under a zero umask, see `stage`)
                // and modification time here, so landing it is a rename and
                // nothing more. A mode without owner read stays 0600 until
                // landing: the host still has to read the file (hash, diff).
                let create_mode = if mode & 0o400 != 0 { mode } else { 0o600 };
                let dst = nix::fcntl::openat(
                    self.staging,
                    cname.as_c_str(),
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(create_mode),
                )
                .map_err(|e| e.to_string())?;
                let (src, dst) = (std::fs::File::from(src), std::fs::File::from(dst));
                copy_sparse(&src, &dst, st.st_size as u64, st.st_blocks as u64)
                    .map_err(|e| e.to_string())?;
                let omit = nix::sys::time::TimeSpec::UTIME_OMIT;
                let mtime = nix::sys::time::TimeSpec::new(st.st_mtime, st.st_mtime_nsec);
                nix::sys::stat::futimens(&dst, &omit, &mtime).map_err(|e| e.to_string())?;
                self.write(&Staged::File {
                    path: rel,
                    mode,
                    size: st.st_size as u64,
                    mtime: st.st_mtime,
                    mtime_nsec: st.st_mtime_nsec,
                    staged,
                })
            }
            SFlag::S_IFLNK => {
                let target = nix::fcntl::readlinkat(upper, name).map_err(|e| e.to_string())?;
                let Some(target) = target.to_str().map(str::to_owned) else {
                    return Err("the symlink target is not UTF-8 and cannot be captured".into());
                };
                self.write(&Staged::Symlink { path: rel, target })
            }
            _ => {
                self.report.skipped.push(shown(path));
                Ok(())
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Caller side: classifying the staged layer against the workspace.
// ---------------------------------------------------------------------------

/// Reads the manifest in `staging` and compares it with `workspace` (the
/// real one, as it is now). Unchanged files' staged copies are removed.
pub fn classify(workspace: &Path, staging: &Path) -> Result<ChangeSet, String> {
    let manifest = std::fs::File::open(staging.join(MANIFEST))
        .map_err(|e| format!("{}: {e}", staging.join(MANIFEST).display()))?;
    let mut entries = Vec::new();
    for line in std::io::BufReader::new(manifest).lines() {
        let line = line.map_err(|e| format!("reading the change manifest: {e}"))?;
        let entry: Staged = serde_json::from_str(&line)
            .map_err(|e| format!("unreadable change manifest line {line:?}: {e}"))?;
        check_relative(entry.path())?;
        entries.push(entry);
    }
    let upper: HashMap<&str, &Staged> = entries.iter().map(|e| (e.path(), e)).collect();
    let mut changes = Vec::new();
    let mut ops = Vec::new();
    // Directories that replace the old tree below them.
    let mut opaque_dirs: Vec<&str> = Vec::new();
    let under_opaque = |p: &str, opaque: &[&str]| {
        opaque
            .iter()
            .any(|d| p.len() > d.len() && p.starts_with(d) && p.as_bytes()[d.len()] == b'/')
    };
    let mut checked = None;
    for entry in &entries {
        let rel = entry.path();
        let abs = workspace.join(rel);
        let old = lstat_below(workspace, rel, &mut checked);
        let old_side = old.as_ref().and_then(|m| side(&abs, m));
        let kept_by_opaque = under_opaque(rel, &opaque_dirs);
        match entry {
            Staged::Whiteout { .. } => {
                if old.is_some() {
                    deleted_tree(workspace, rel, &mut changes);
                }
                ops.push(entry.clone());
            }
            Staged::Dir { mode, opaque, .. } => {
                let new = Side {
                    entry: EntryType::Dir,
                    mode: *mode,
                    size: 0,
                    target: None,
                };
                match &old_side {
                    Some(o) if o.entry == EntryType::Dir => {
                        if *opaque {
                            deleted_not_in_upper(workspace, rel, &upper, &mut changes);
                        }
                        if o.mode != *mode {
                            changes.push(change(rel, ChangeKind::ModeChanged, old_side, Some(new)));
                        }
                    }
                    Some(_) => {
                        deleted_tree(workspace, rel, &mut changes);
                        changes.push(change(rel, ChangeKind::Created, None, Some(new)));
                    }
                    None => changes.push(change(rel, ChangeKind::Created, None, Some(new))),
                }
                if *opaque {
                    opaque_dirs.push(rel);
                }
                ops.push(entry.clone());
            }
            Staged::File {
                mode, size, staged, ..
            } => {
                let new = Side {
                    entry: EntryType::File,
                    mode: *mode,
                    size: *size,
                    target: None,
                };
                let staged_path = staging.join(staged);
                let mut c = match &old_side {
                    Some(o) if o.entry == EntryType::File => {
                        if o.size == *size && same_bytes(&abs, &staged_path) {
                            if o.mode == *mode {
                                None
                            } else {
                                Some(change(rel, ChangeKind::ModeChanged, old_side, Some(new)))
                            }
                        } else {
                            Some(change(rel, ChangeKind::Modified, old_side, Some(new)))
                        }
                    }
                    Some(o) => {
                        if o.entry == EntryType::Dir {
                            deleted_tree(workspace, rel, &mut changes);
                            Some(change(rel, ChangeKind::Created, None, Some(new)))
                        } else {
                            Some(change(rel, ChangeKind::Modified, old_side, Some(new)))
                        }
                    }
                    None => Some(change(rel, ChangeKind::Created, None, Some(new))),
                };
                if let Some(c) = c.as_mut() {
                    c.staged = Some(staged.clone());
                }
                match c {
                    Some(c) => {
                        changes.push(c);
                        ops.push(entry.clone());
                    }
                    // Copied up without a change: nothing to land, unless an
                    // opaque directory above removes the old copy first.
                    None if kept_by_opaque => ops.push(entry.clone()),
                    None => {
                        let _ = std::fs::remove_file(&staged_path);
                    }
                }
            }
            Staged::Symlink { target, .. } => {
                let new = Side {
                    entry: EntryType::Symlink,
                    mode: 0o777,
                    size: 0,
                    target: Some(target.clone()),
                };
                match &old_side {
                    Some(o) if o.target.as_deref() == Some(target.as_str()) => {}
                    Some(o) if o.entry == EntryType::Dir => {
                        deleted_tree(workspace, rel, &mut changes);
                        changes.push(change(rel, ChangeKind::Created, None, Some(new)));
                    }
                    Some(_) => changes.push(change(rel, ChangeKind::Modified, old_side, Some(new))),
                    None => changes.push(change(rel, ChangeKind::Created, None, Some(new))),
                }
                ops.push(entry.clone());
            }
        }
    }
    fold_renames(workspace, staging, &mut changes);
    Ok(ChangeSet {
        staging: staging.to_path_buf(),
        workspace: workspace.to_path_buf(),
        ops,
        changes,
    })
}

/// Refuses a manifest path that could leave the workspace.
fn check_relative(p: &str) -> Result<(), String> {
    if p.is_empty()
        || p.starts_with('/')
        || p.split('/')
            .any(|c| c.is_empty() || c == "." || c == ".." || c.contains('\0'))
    {
        return Err(format!(
            "change manifest path {p:?} is not a workspace path"
        ));
    }
    Ok(())
}

fn change(path: &str, kind: ChangeKind, old: Option<Side>, new: Option<Side>) -> Change {
    Change {
        path: path.to_owned(),
        kind,
        from: None,
        old,
        new,
        staged: None,
    }
}

/// `lstat` of `rel` inside `workspace`, or `None` when it does not exist or
/// a parent on the way is not a real directory (a symlink there could point
/// out of the workspace: nothing is read through it).
pub fn lstat_in(workspace: &Path, rel: &str) -> Option<std::fs::Metadata> {
    lstat_below(workspace, rel, &mut None)
}

/// [`lstat_in`], remembering the last parent directory found real
/// (`checked`): the entries of a manifest come directory by directory, so
/// classifying 10,000 files in one directory checks it once, not 10,000
/// times. Only for reading: what lands is checked again when it is written.
fn lstat_below(
    workspace: &Path,
    rel: &str,
    checked: &mut Option<String>,
) -> Option<std::fs::Metadata> {
    let (dir, _) = rel.rsplit_once('/').unwrap_or(("", rel));
    if checked.as_deref() != Some(dir) {
        let mut at = workspace.to_path_buf();
        for part in dir.split('/').filter(|p| !p.is_empty()) {
            at.push(part);
            if !std::fs::symlink_metadata(&at).ok()?.is_dir() {
                return None;
            }
        }
        *checked = Some(dir.to_owned());
    }
    std::fs::symlink_metadata(workspace.join(rel)).ok()
}

/// What an existing entry is, for a change's `old` side.
pub fn side(abs: &Path, m: &std::fs::Metadata) -> Option<Side> {
    let ft = m.file_type();
    let (entry, target) = if ft.is_symlink() {
        (
            EntryType::Symlink,
            std::fs::read_link(abs)
                .ok()
                .and_then(|t| t.to_str().map(str::to_owned)),
        )
    } else if ft.is_dir() {
        (EntryType::Dir, None)
    } else if ft.is_file() {
        (EntryType::File, None)
    } else {
        return None;
    };
    Some(Side {
        entry,
        mode: if entry == EntryType::Symlink {
            0o777
        } else {
            m.mode() & 0o777
        },
        size: if entry == EntryType::File { m.len() } else { 0 },
        target,
    })
}

/// Lists `rel` and everything below it as deleted (children first).
fn deleted_tree(workspace: &Path, rel: &str, changes: &mut Vec<Change>) {
    let abs = workspace.join(rel);
    let Some(m) = lstat_in(workspace, rel) else {
        return;
    };
    if m.is_dir()
        && let Ok(rd) = std::fs::read_dir(&abs)
    {
        let mut names: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
        names.sort();
        for n in names {
            if let Some(n) = n.to_str() {
                deleted_tree(workspace, &format!("{rel}/{n}"), changes);
            }
        }
    }
    if let Some(old) = side(&abs, &m) {
        changes.push(change(rel, ChangeKind::Deleted, Some(old), None));
    }
}

/// Below an opaque directory: every old entry the upper layer does not list
/// (with the same directory-ness) is deleted.
fn deleted_not_in_upper(
    workspace: &Path,
    rel: &str,
    upper: &HashMap<&str, &Staged>,
    changes: &mut Vec<Change>,
) {
    if !lstat_in(workspace, rel).is_some_and(|m| m.is_dir()) {
        return;
    }
    let Ok(rd) = std::fs::read_dir(workspace.join(rel)) else {
        return;
    };
    let mut names: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
    names.sort();
    for n in names {
        let Some(n) = n.to_str() else { continue };
        let child = format!("{rel}/{n}");
        let old_dir = std::fs::symlink_metadata(workspace.join(&child)).is_ok_and(|m| m.is_dir());
        match upper.get(child.as_str()) {
            Some(Staged::Dir { .. }) if old_dir => {
                deleted_not_in_upper(workspace, &child, upper, changes)
            }
            // Listed: the entry's own classification covers it.
            Some(_) if !old_dir => {}
            _ => deleted_tree(workspace, &child, changes),
        }
    }
}

/// A deleted file whose exact bytes were created elsewhere was renamed.
fn fold_renames(workspace: &Path, staging: &Path, changes: &mut Vec<Change>) {
    let mut created: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        if c.kind == ChangeKind::Created
            && let Some(n) = &c.new
            && n.entry == EntryType::File
        {
            created.entry(n.size).or_default().push(i);
        }
    }
    if created.is_empty() {
        return;
    }
    let mut taken: HashSet<usize> = HashSet::new();
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (i, c) in changes.iter().enumerate() {
        let (ChangeKind::Deleted, Some(old)) = (c.kind, &c.old) else {
            continue;
        };
        if old.entry != EntryType::File {
            continue;
        }
        let Some(cands) = created.get(&old.size) else {
            continue;
        };
        // Bounded work: a few byte comparisons per deleted file.
        for &j in cands.iter().filter(|j| !taken.contains(*j)).take(4) {
            let Some(staged) = &changes[j].staged else {
                continue;
            };
            if same_bytes(&workspace.join(&c.path), &staging.join(staged)) {
                taken.insert(j);
                pairs.push((i, j));
                break;
            }
        }
    }
    for (i, j) in &pairs {
        let from = changes[*i].path.clone();
        let old = changes[*i].old.clone();
        let c = &mut changes[*j];
        c.kind = ChangeKind::Renamed;
        c.from = Some(from);
        c.old = old;
    }
    let paired: HashSet<usize> = pairs.iter().map(|(i, _)| *i).collect();
    let mut i = 0;
    changes.retain(|_| {
        let keep = !paired.contains(&i);
        i += 1;
        keep
    });
}

/// Whether two files have the same bytes.
pub fn same_bytes(a: &Path, b: &Path) -> bool {
    let (Ok(fa), Ok(fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    let (mut fa, mut fb) = (std::io::BufReader::new(fa), std::io::BufReader::new(fb));
    let (mut ba, mut bb) = (vec![0u8; 64 << 10], vec![0u8; 64 << 10]);
    loop {
        let na = match read_full(&mut fa, &mut ba) {
            Ok(n) => n,
            Err(_) => return false,
        };
        let nb = match read_full(&mut fb, &mut bb) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}
