//! The workspace write quota: an overlay whose upper layer is a size-limited
//! tmpfs, copied back when the task is over.
//!
//! Why this mechanism: Linux has no per-directory byte quota that an
//! unprivileged process can set (project quotas need XFS/ext4 prjquota and
//! root; `RLIMIT_FSIZE` bounds single files only). A tmpfs of the quota's size
//! is a bound the kernel enforces on every write path (write, mmap, copy_file_range,
//! fallocate...): when it is full, writes fail with `ENOSPC`, whatever the
//! program. The command sees the workspace through an overlay (lower: the real
//! workspace, read-only to the overlay; upper: the quota tmpfs), so every byte
//! it creates or changes lands in the tmpfs first. What it counts: the full
//! size of every file the command creates or modifies (a modified file is
//! copied up whole; holes of sparse files stay holes), and every file,
//! directory or link at least 1 KiB (the tmpfs has one inode per KiB).
//!
//! Copy-back: once every process of the task is gone, init (outside Landlock
//! and seccomp, still holding descriptors of the upper layer and of the real
//! workspace) replays the upper layer onto the workspace: whiteouts delete,
//! opaque directories replace, files and symlinks are written to a temporary
//! name and renamed over the old entry. Every operation is relative to a
//! directory descriptor opened with `O_NOFOLLOW`, and names are single
//! components read from the upper layer, so no symlink in the workspace can
//! redirect a write outside it. Modes keep only the permission bits (no
//! setuid/setgid: files are recreated by the user running Capstan), and
//! modification times are kept. Fifos, sockets and device nodes are not
//! copied back.
//!
//! Consequences to know: other processes see the command's writes only when
//! it ends (cancelled and timed-out tasks are copied back too), and pending
//! writes are memory (tmpfs) counted against the task's memory limit.
//! Failure mode: if the overlay cannot be mounted the command does not start;
//! a copy-back error is reported as a warning naming the entry.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::UnlinkatFlags;

/// An overlay-backed workspace, as seen by init.
pub(crate) struct Quota {
    /// Root of the upper layer.
    upper: OwnedFd,
    /// The real workspace directory (not the overlay).
    workspace: OwnedFd,
    /// `trusted.` for a root mount, `user.` inside a user namespace.
    xattr_prefix: &'static str,
    /// Capture on: the host directory the upper layer is staged into
    /// (see [`crate::changes`]) instead of being copied back.
    staging: Option<OwnedFd>,
}

/// What a copy-back did.
#[derive(Debug, Default)]
pub(crate) struct CopyBack {
    /// Entries that could not be copied back, with why.
    pub errors: Vec<String>,
    /// Fifos, sockets and device nodes left out.
    pub skipped: Vec<String>,
}

/// Mounts the workspace at `target` as an overlay over `lower` (the workspace,
/// or its id-mapped mount) with a `bytes`-sized tmpfs upper layer mounted at
/// `scratch` (a host directory outside the new root). `user_ns`: mounting
/// inside a user namespace (user xattrs).
pub(crate) fn mount(
    workspace: &Path,
    lower: &Path,
    scratch: &Path,
    target: &Path,
    bytes: u64,
    user_ns: bool,
    capture: Option<&Path>,
) -> Result<Quota, String> {
    let real = open_dir_path(workspace)?;
    let staging = capture.map(open_dir_path).transpose()?;
    std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    crate::view::mount(
        Some("tmpfs"),
        scratch,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        // Every file or directory costs an inode: at least 1 KiB of the quota
        // each, so a flood of empty files is bounded too.
        Some(&format!(
            "mode=0700,size={},nr_inodes={}",
            bytes.max(4096),
            (bytes / 1024).max(64)
        )),
    )
    .map_err(|e| format!("mounting the write quota tmpfs: {e}"))?;
    let (upper, work) = (scratch.join("upper"), scratch.join("work"));
    for d in [&upper, &work] {
        std::fs::create_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    // The overlay's root takes the upper directory's owner and mode: make
    // them the workspace's, as the lower layer shows it.
    let st = nix::sys::stat::stat(lower).map_err(|e| format!("{}: {e}", lower.display()))?;
    std::os::unix::fs::chown(&upper, Some(st.st_uid), Some(st.st_gid))
        .map_err(|e| format!("{}: {e}", upper.display()))?;
    nix::sys::stat::fchmodat(
        nix::fcntl::AT_FDCWD,
        &upper,
        Mode::from_bits_truncate(st.st_mode & 0o7777),
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
    .map_err(|e| format!("{}: {e}", upper.display()))?;
    // No redirects (created or followed) and no metacopy: every change is in
    // the upper layer as a
    // whole file or directory, which is what the copy-back replays (renaming
    // a directory of the lower layer fails with EXDEV, and `mv` copies).
    let mut options = format!(
        "lowerdir={},upperdir={},workdir={},redirect_dir=nofollow,metacopy=off,index=off,xino=off",
        escape(lower),
        escape(&upper),
        escape(&work)
    );
    if user_ns {
        options.push_str(",userxattr");
    }
    crate::view::mount(
        Some("overlay"),
        target,
        Some("overlay"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&options),
    )
    .map_err(|e| format!("mounting the workspace overlay: {e}"))?;
    Ok(Quota {
        upper: open_dir_path(&upper)?,
        workspace: real,
        xattr_prefix: if user_ns { "user." } else { "trusted." },
        staging,
    })
}

/// Escapes a path for an overlay option list (`,`, `:` and `\`).
fn escape(p: &Path) -> String {
    let mut out = String::new();
    for c in p.to_string_lossy().chars() {
        if matches!(c, ',' | ':' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Quota {
    /// The upper layer has no block or no inode left: the command met its
    /// quota.
    pub(crate) fn full(&self) -> bool {
        nix::sys::statvfs::fstatvfs(&self.upper)
            .is_ok_and(|st| st.blocks_available() == 0 || st.files_available() == 0)
    }

    /// Replays the upper layer onto the real workspace. Call only when no
    /// process of the task is left.
    pub(crate) fn copy_back(&self) -> CopyBack {
        if let Some(staging) = &self.staging {
            return crate::changes::stage(self.upper.as_fd(), staging.as_fd(), self.xattr_prefix);
        }
        let mut report = CopyBack::default();
        self.copy_dir(
            self.upper.as_fd(),
            self.workspace.as_fd(),
            Path::new(""),
            &mut report,
        );
        report
    }

    fn copy_dir(&self, upper: BorrowedFd, ws: BorrowedFd, at: &Path, report: &mut CopyBack) {
        let names = match list(upper) {
            Ok(n) => n,
            Err(e) => {
                report.errors.push(format!("{}: {e}", shown(at)));
                return;
            }
        };
        for name in names {
            let path = at.join(OsStr::from_bytes(name.to_bytes()));
            if let Err(e) = self.copy_entry(upper, ws, &name, &path, report) {
                report.errors.push(format!("{}: {e}", shown(&path)));
            }
        }
    }

    fn copy_entry(
        &self,
        upper: BorrowedFd,
        ws: BorrowedFd,
        name: &CStr,
        path: &Path,
        report: &mut CopyBack,
    ) -> nix::Result<()> {
        let st = nix::sys::stat::fstatat(upper, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
        let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
        let mode = Mode::from_bits_truncate(st.st_mode & 0o777);
        match kind {
            // A whiteout: the command deleted this entry.
            SFlag::S_IFCHR if st.st_rdev == 0 => remove_entry(ws, name),
            SFlag::S_IFDIR => {
                let sub_upper = open_dir_at(upper, name)?;
                let existing = nix::sys::stat::fstatat(ws, name, AtFlags::AT_SYMLINK_NOFOLLOW);
                let is_dir = existing.as_ref().is_ok_and(|s| {
                    SFlag::from_bits_truncate(s.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
                });
                // Opaque: the command replaced the directory; nothing of the old
                // one survives. A non-directory in the way goes too.
                if existing.is_ok() && (!is_dir || self.opaque(&sub_upper)) {
                    remove_entry(ws, name)?;
                }
                match nix::sys::stat::mkdirat(ws, name, mode) {
                    Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                let sub_ws = open_dir_at(ws, name)?;
                nix::sys::stat::fchmod(&sub_ws, mode)?;
                self.copy_dir(sub_upper.as_fd(), sub_ws.as_fd(), path, report);
                Ok(())
            }
            SFlag::S_IFREG => {
                let tmp = temp_name();
                let src = nix::fcntl::openat(
                    upper,
                    name,
                    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )?;
                let dst = nix::fcntl::openat(
                    ws,
                    tmp.as_c_str(),
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    mode,
                )?;
                let (src, dst) = (std::fs::File::from(src), std::fs::File::from(dst));
                let copied = copy_sparse(&src, &dst, st.st_size as u64, st.st_blocks as u64)
                    .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
                    .and_then(|()| nix::sys::stat::fchmod(&dst, mode))
                    .and_then(|()| {
                        let times = [
                            nix::sys::time::TimeSpec::new(st.st_atime, st.st_atime_nsec),
                            nix::sys::time::TimeSpec::new(st.st_mtime, st.st_mtime_nsec),
                        ];
                        nix::sys::stat::futimens(&dst, &times[0], &times[1])
                    });
                drop(dst);
                self.put(ws, &tmp, name, copied)
            }
            SFlag::S_IFLNK => {
                let tmp = temp_name();
                let target = nix::fcntl::readlinkat(upper, name)?;
                let made = nix::unistd::symlinkat(target.as_os_str(), ws, tmp.as_c_str());
                self.put(ws, &tmp, name, made)
            }
            _ => {
                report.skipped.push(shown(path));
                Ok(())
            }
        }
    }

    /// Renames the prepared `tmp` over `name` (removing a directory in the way),
    /// or removes `tmp` if preparing it failed.
    fn put(
        &self,
        ws: BorrowedFd,
        tmp: &CStr,
        name: &CStr,
        prepared: nix::Result<()>,
    ) -> nix::Result<()> {
        if let Err(e) = prepared {
            let _ = nix::unistd::unlinkat(ws, tmp, UnlinkatFlags::NoRemoveDir);
            return Err(e);
        }
        if let Ok(s) = nix::sys::stat::fstatat(ws, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            && SFlag::from_bits_truncate(s.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
        {
            remove_entry(ws, name)?;
        }
        nix::fcntl::renameat(ws, tmp, ws, name).inspect_err(|_| {
            let _ = nix::unistd::unlinkat(ws, tmp, UnlinkatFlags::NoRemoveDir);
        })
    }

    fn opaque(&self, dir: &OwnedFd) -> bool {
        opaque(dir, self.xattr_prefix)
    }
}

/// Whether an upper-layer directory is opaque (it replaced the lower one).
pub(crate) fn opaque(dir: &OwnedFd, xattr_prefix: &str) -> bool {
    let Ok(attr) = CString::new(format!("{xattr_prefix}overlay.opaque")) else {
        return false;
    };
    let mut buf = [0u8; 4];
    // SAFETY: fgetxattr into a buffer of the given size on an fd we own.
    let n = unsafe {
        libc::fgetxattr(
            dir.as_raw_fd(),
            attr.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    n > 0 && buf[0] == b'y'
}

/// Files up to this size whose blocks cover their length are copied with one
/// read and one write.
const SMALL_FILE: u64 = 64 << 10;

/// Copies the data of `src` (`len` bytes, `blocks` 512-byte blocks allocated,
/// as `stat` said) into `dst` and leaves the holes as holes: a sparse file
/// takes almost nothing of the quota's tmpfs, and must not turn into its full
/// apparent size on the host's disk.
pub(crate) fn copy_sparse(
    src: &std::fs::File,
    dst: &std::fs::File,
    len: u64,
    blocks: u64,
) -> std::io::Result<()> {
    // One buffer for every file of a copy-back: a fresh 1 MiB per file (zeroed,
    // faulted in, unmapped) made staging 10,000 small files take 11 s.
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with_borrow_mut(|buf| {
        if buf.is_empty() {
            // Zeroed by the allocator (fresh pages from `mmap`), not by
            // writing: a one-file command touches a page of it, not 256.
            *buf = vec![0u8; 1 << 20];
        }
        // A small file with a block for every byte has no hole to keep: the
        // three `lseek`s and the `ftruncate` of the sparse copy were a third
        // of the system calls per file when staging 10,000 small ones. (On a
        // tmpfs forced to huge pages a hole could hide in the blocks; it costs
        // at most SMALL_FILE bytes of disk.)
        if len <= SMALL_FILE && blocks.saturating_mul(512) >= len {
            return copy_small(src, dst, len as usize, buf);
        }
        copy_data(src, dst, buf)?;
        dst.set_len(len)
    })
}

/// The whole of a small file, read and written in one go each.
fn copy_small(
    src: &std::fs::File,
    dst: &std::fs::File,
    len: usize,
    buf: &mut [u8],
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < len {
        match src.read_at(&mut buf[n..len], n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    dst.write_all_at(&buf[..n], 0)?;
    if n < len {
        // The length `stat` gave, as the sparse copy keeps it.
        dst.set_len(len as u64)?;
    }
    Ok(())
}

/// The data extents of `src` copied to the same offsets of `dst`.
fn copy_data(src: &std::fs::File, dst: &std::fs::File, buf: &mut [u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut offset = 0i64;
    loop {
        // SAFETY: lseek on an fd we own.
        let data = unsafe { libc::lseek(src.as_raw_fd(), offset, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break; // no data past `offset`
            }
            return Err(e);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(src.as_raw_fd(), data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut at = data as u64;
        while at < hole as u64 {
            let want = buf.len().min((hole as u64 - at) as usize);
            let n = src.read_at(&mut buf[..want], at)?;
            if n == 0 {
                break;
            }
            dst.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
        offset = hole;
    }
    Ok(())
}

/// Removes a file, symlink or whole directory tree named `name` in `dir`,
/// never following a symlink.
fn remove_entry(dir: BorrowedFd, name: &CStr) -> nix::Result<()> {
    let st = match nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(nix::errno::Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR {
        let sub = open_dir_at(dir, name)?;
        for child in list(sub.as_fd())? {
            remove_entry(sub.as_fd(), &child)?;
        }
        nix::unistd::unlinkat(dir, name, UnlinkatFlags::RemoveDir)
    } else {
        nix::unistd::unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)
    }
}

/// The entry names of a directory, without `.` and `..`.
pub(crate) fn list(dir: BorrowedFd) -> nix::Result<Vec<CString>> {
    let dup = dir
        .try_clone_to_owned()
        .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EMFILE)))?;
    // A duplicated descriptor shares the offset: start from the beginning.
    nix::unistd::lseek(&dup, 0, nix::unistd::Whence::SeekSet)?;
    let mut d = nix::dir::Dir::from_fd(dup)?;
    let mut names = Vec::new();
    for entry in d.iter() {
        let entry = entry?;
        let n = entry.file_name();
        if n != c"." && n != c".." {
            names.push(n.to_owned());
        }
    }
    Ok(names)
}

pub(crate) fn open_dir_at(dir: BorrowedFd, name: &CStr) -> nix::Result<OwnedFd> {
    nix::fcntl::openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

fn open_dir_path(p: &Path) -> Result<OwnedFd, String> {
    nix::fcntl::open(
        p,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{}: {e}", p.display()))
}

fn temp_name() -> CString {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        ".capstan-copy-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    CString::new(name).unwrap_or_default()
}

pub(crate) fn shown(p: &Path) -> String {
    if p.as_os_str().is_empty() {
        ".".into()
    } else {
        p.display().to_string()
    }
}
