//! The command's filesystem: a new root built from an allowlist.
//!
//! Invariant: after [`build`] returns `Ok`, the calling process (the namespace
//! init, alone in a fresh mount namespace) has a root that is a small tmpfs
//! holding only:
//!
//! * read-only binds of [`SYSTEM`] (the directories programs need to run) and of
//!   the caller's extra read paths, at their host paths;
//! * `/etc` with every entry of [`ETC_SECRETS`] masked (an empty, mode-0 file or
//!   directory in its place);
//! * the workspace, read-write, at its host path;
//! * a private, size-limited tmpfs at `/tmp` (the command's `HOME` is
//!   `/tmp/home`);
//! * a minimal `/dev` ([`DEVICES`] and the `fd`/`std*` links);
//! * a fresh `/proc` of the task's PID namespace.
//!
//! Nothing else of the host is reachable: no `/home`, `/root`, `/run`,
//! `/var`, `/srv`, `/mnt`, host `/tmp` or `/sys`, so no host Unix socket can be
//! named. Every mount but the workspace, `/tmp` and `/proc` is read-only.
//!
//! Failure mode: any step that fails returns `Err` and the launcher refuses to
//! start the command (fail closed); nothing is skipped silently except system
//! directories this machine does not have.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// System directories bound read-only (missing ones are skipped; symlinks such
/// as a merged-/usr `/bin -> usr/bin` are recreated as symlinks). `/opt` is in
/// because third-party toolchains install there; data directories (`/var`,
/// `/srv`, `/home`, `/root`, `/mnt`, `/media`) and runtime state (`/run`) are
/// not.
pub(crate) const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Entries of `/etc` that hold secrets or credentials, masked even though the
/// unprivileged identity of the command already cannot read most of them: the
/// second layer for files a distribution ships world-readable by mistake.
pub(crate) const ETC_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/security/opasswd",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/krb5.keytab",
    "/etc/NetworkManager/system-connections",
    "/etc/wireguard",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/docker",
    "/etc/letsencrypt",
    "/etc/libvirt/secrets",
];

/// Device nodes bound into the private `/dev`.
pub(crate) const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// `HOME` of the command inside the view.
pub(crate) const HOME: &str = "/tmp/home";
/// `TMPDIR` of the command inside the view.
pub(crate) const TMP: &str = "/tmp";

/// What the view is built from.
pub(crate) struct ViewSpec<'a> {
    /// The task's host directory (outside the new root): the new root is
    /// assembled in its `root`, the quota's tmpfs mounted on its `quota` and,
    /// as root, the id-mapped lower layer on its `lower`.
    pub task_dir: &'a Path,
    pub workspace: &'a Path,
    /// Extra read-only paths (absolute, canonical, existing).
    pub read: &'a [PathBuf],
    /// Directories covered wherever the view shows them (canonical).
    pub hide: &'a [PathBuf],
    /// Size of the private `/tmp`, in bytes.
    pub tmp_bytes: u64,
    /// Network on: `/etc/resolv.conf`'s target is bound too when it lives
    /// outside the allowlist (systemd-resolved keeps it under `/run`).
    pub network: bool,
    /// The workspace as a detached, id-mapped mount (see
    /// [`crate::identity`]); `None`: bind the host directory as it is.
    pub workspace_mount: Option<&'a OwnedFd>,
    /// Owner of `/tmp/home` (the command's uid and gid).
    pub owner: (u32, u32),
    /// Write quota of the workspace in bytes (see [`crate::quota`]); `None`:
    /// the workspace is bound directly.
    pub write_quota: Option<u64>,
    /// Building inside a user namespace (Capstan not run as root).
    pub user_ns: bool,
    /// Capture directory: the upper layer is staged there, not copied back.
    pub capture: Option<&'a Path>,
    /// The workspace is read-only like the rest of the view (`write_quota`
    /// and `capture` are then unset).
    pub workspace_read_only: bool,
}

/// Builds the view and makes it this process's root. See the module docs.
/// Returns the quota overlay to copy back when the task is over, if any.
pub(crate) fn build(spec: &ViewSpec) -> Result<Option<crate::quota::Quota>, String> {
    // Keep every change below from propagating back to the host's namespace.
    mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        .map_err(|e| format!("making the mount namespace private: {e}"))?;
    let new_root = spec.task_dir.join("root");
    let root = new_root.as_path();
    mount(
        Some("tmpfs"),
        root,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0755,size=1m,nr_inodes=4096"),
    )
    .map_err(|e| format!("mounting the new root: {e}"))?;
    let inside = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));

    // The private /tmp first: read paths and the workspace may lie under the
    // host's /tmp, and their mount points then go on top of it.
    let tmp = inside(Path::new(TMP));
    mkdir_p(&tmp)?;
    mount(
        Some("tmpfs"),
        &tmp,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&format!(
            "mode=1777,size={},nr_inodes={}",
            spec.tmp_bytes.max(4096),
            (spec.tmp_bytes / 1024).max(64)
        )),
    )
    .map_err(|e| format!("mounting the private /tmp: {e}"))?;

    for dir in SYSTEM {
        let host = Path::new(dir);
        match std::fs::symlink_metadata(host) {
            Err(_) => continue, // this machine has no such directory
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(host).map_err(|e| io(host, e))?;
                std::os::unix::fs::symlink(target, inside(host)).map_err(|e| io(host, e))?;
            }
            Ok(_) => bind(host, &inside(host), true)?,
        }
    }
    // Before the read paths: one the host passes from inside a hidden
    // directory (the workspace CA's certificate in the data dir) is bound
    // into the cover, and is then all the cover holds.
    hide(root, spec.hide)?;
    for p in spec.read {
        // Already visible (a system directory or the workspace): binding again
        // would only unmask what is masked there.
        let hidden = spec.hide.iter().any(|h| p.starts_with(h));
        let covered = !hidden
            && (SYSTEM.iter().any(|d| {
                p.starts_with(d) && std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir())
            }) || p.starts_with(spec.workspace));
        if !covered {
            bind(p, &inside(p), true)?;
        }
    }
    if spec.network
        && let Ok(target) = std::fs::canonicalize("/etc/resolv.conf")
        && !SYSTEM.iter().any(|d| target.starts_with(d))
    {
        bind(&target, &inside(&target), true)?;
    }
    mask_secrets(root)?;
    make_dev(&inside(Path::new("/dev")))?;

    let home = inside(Path::new(HOME));
    std::fs::create_dir(&home).map_err(|e| io(&home, e))?;
    std::os::unix::fs::chown(&home, Some(spec.owner.0), Some(spec.owner.1))
        .map_err(|e| io(&home, e))?;
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| io(&home, e))?;

    let proc_dir = inside(Path::new("/proc"));
    mkdir_p(&proc_dir)?;
    mount(
        Some("proc"),
        &proc_dir,
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .map_err(|e| format!("mounting a private /proc: {e}"))?;

    let ws = inside(spec.workspace);
    let quota = match (spec.write_quota, spec.workspace_mount) {
        (None, Some(fd)) => {
            mkdir_p(&ws)?;
            crate::identity::attach(fd, &ws)?;
            if spec.workspace_read_only {
                remount_read_only(&ws).map_err(|e| format!("{}: {e}", ws.display()))?;
            }
            None
        }
        (None, None) => {
            // Read-only here, not only by `read_only_except` below: a
            // workspace under the host's /tmp lies beneath the writable /tmp.
            bind(spec.workspace, &ws, spec.workspace_read_only)?;
            None
        }
        (Some(bytes), fd) => {
            // The lower layer: the id-mapped workspace (root) or the
            // workspace itself.
            let lower = match fd {
                Some(fd) => {
                    let lower = spec.task_dir.join("lower");
                    mkdir_p(&lower)?;
                    crate::identity::attach(fd, &lower)?;
                    lower
                }
                None => spec.workspace.to_path_buf(),
            };
            mkdir_p(&ws)?;
            Some(crate::quota::mount(
                spec.workspace,
                &lower,
                &spec.task_dir.join("quota"),
                &ws,
                bytes,
                spec.user_ns,
                spec.capture,
            )?)
        }
    };

    let writable: &[&Path] = if spec.workspace_read_only {
        &[tmp.as_path(), proc_dir.as_path()]
    } else {
        &[ws.as_path(), tmp.as_path(), proc_dir.as_path()]
    };
    read_only_except(root, writable)?;
    enter(root)?;
    Ok(quota)
}

/// Bench only (feature `bench-whole-host`): the filesystem before the
/// allowlist, to measure what the allowlist costs. The whole host read-only,
/// the workspace read-write, a private /proc. Never used by Capstan.
#[cfg(feature = "bench-whole-host")]
pub(crate) fn build_whole_host(spec: &ViewSpec) -> Result<(), String> {
    mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        .map_err(|e| format!("making the mount namespace private: {e}"))?;
    match spec.workspace_mount {
        Some(fd) => crate::identity::attach(fd, spec.workspace)?,
        None => bind(spec.workspace, spec.workspace, false)?,
    }
    read_only_except(Path::new("/"), &[spec.workspace])?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .map_err(|e| format!("mounting a private /proc: {e}"))
}

/// Bind-mounts `host` (a directory or a file) at `target`, creating the mount
/// point; `read_only` also makes the bind read-only. Submounts come along
/// (`MS_REC`); [`read_only_except`] makes them read-only too.
fn bind(host: &Path, target: &Path, read_only: bool) -> Result<(), String> {
    let meta = std::fs::metadata(host).map_err(|e| io(host, e))?;
    if meta.is_dir() {
        mkdir_p(target)?;
    } else {
        if let Some(parent) = target.parent() {
            mkdir_p(parent)?;
        }
        std::fs::File::create(target).map_err(|e| io(target, e))?;
    }
    mount(
        Some(&host.to_string_lossy()),
        target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
    .map_err(|e| format!("binding {}: {e}", host.display()))?;
    if read_only {
        remount_read_only(target).map_err(|e| format!("{}: {e}", host.display()))?;
    }
    Ok(())
}

/// Hides each existing entry of [`ETC_SECRETS`] behind an empty, mode-0 file or
/// directory (a read-only tmpfs).
fn mask_secrets(root: &Path) -> Result<(), String> {
    let empty_file = root.join(".capstan-masked");
    std::fs::File::create(&empty_file).map_err(|e| io(&empty_file, e))?;
    std::fs::set_permissions(&empty_file, std::fs::Permissions::from_mode(0o0))
        .map_err(|e| io(&empty_file, e))?;
    for secret in ETC_SECRETS {
        let target = root.join(secret.trim_start_matches('/'));
        let Ok(meta) = std::fs::symlink_metadata(&target) else {
            continue;
        };
        if meta.is_dir() {
            mount(
                Some("tmpfs"),
                &target,
                Some("tmpfs"),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                Some("mode=000,size=4k,nr_inodes=1"),
            )
        } else if meta.file_type().is_symlink() {
            // A link's target is either in the view (and masked there if it is
            // a secret) or not in the view at all.
            continue;
        } else {
            mount(
                Some(&empty_file.to_string_lossy()),
                &target,
                None,
                libc::MS_BIND,
                None,
            )
        }
        .map_err(|e| format!("masking {secret}: {e}"))?;
    }
    Ok(())
}

/// Covers each of `dirs` the view shows (Capstan's own state under a bound
/// system directory) with an empty tmpfs that others may cross but not list
/// (0711: a read path bound into it later is reachable by its name, nothing
/// else is there). Made read-only with the rest of the view at the end.
fn hide(root: &Path, dirs: &[PathBuf]) -> Result<(), String> {
    for dir in dirs {
        let target = root.join(dir.strip_prefix("/").unwrap_or(dir));
        if !std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        mount(
            Some("tmpfs"),
            &target,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("mode=0711,size=64k,nr_inodes=256"),
        )
        .map_err(|e| format!("hiding {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// A tmpfs `/dev` with only [`DEVICES`] (bound from the host) and the usual
/// links; `/dev/shm` points at the private `/tmp`, so shared memory counts
/// against its size.
fn make_dev(dev: &Path) -> Result<(), String> {
    mkdir_p(dev)?;
    mount(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755,size=64k,nr_inodes=64"),
    )
    .map_err(|e| format!("mounting /dev: {e}"))?;
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        if std::fs::metadata(&host).is_err() {
            continue;
        }
        bind(&host, &dev.join(name), false)?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("shm", TMP),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link)).map_err(|e| io(&dev.join(link), e))?;
    }
    Ok(())
}

/// Remounts every mount under `root` read-only, except `writable` and what lies
/// beneath them. Flags the kernel locks for a user namespace (nosuid, nodev,
/// noexec, atime) are kept, or the remount would be refused.
fn read_only_except(root: &Path, writable: &[&Path]) -> Result<(), String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    for line in mounts.lines() {
        let Some(mount_point) = line.split(' ').nth(4).map(unescape_mountinfo) else {
            continue;
        };
        let mp = Path::new(&mount_point);
        if !mp.starts_with(root) || writable.iter().any(|w| mp.starts_with(w)) {
            continue;
        }
        remount_read_only(mp).map_err(|e| format!("{}: {e}", mp.display()))?;
    }
    Ok(())
}

fn remount_read_only(target: &Path) -> Result<(), String> {
    let c = cstr(target)?;
    // SAFETY: zeroed statvfs is a valid out-parameter; `c` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!("statvfs: {}", std::io::Error::last_os_error()));
    }
    let keep = st.f_flag
        & (libc::ST_NOSUID
            | libc::ST_NODEV
            | libc::ST_NOEXEC
            | libc::ST_NOATIME
            | libc::ST_NODIRATIME
            | libc::ST_RELATIME);
    let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | keep as libc::c_ulong;
    mount(None, target, None, flags, None).map_err(|e| format!("making it read-only: {e}"))
}

/// Makes `root` the root of this mount namespace and drops the old one
/// (`pivot_root(".", ".")` then a lazy unmount of the old root stacked below).
fn enter(root: &Path) -> Result<(), String> {
    let c = cstr(root)?;
    let fail = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: plain syscalls with NUL-terminated strings that outlive them.
    unsafe {
        if libc::chdir(c.as_ptr()) != 0 {
            return Err(fail("entering the new root"));
        }
        if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0 {
            return Err(fail("pivot_root"));
        }
        if libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0 {
            return Err(fail("detaching the host's root"));
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            return Err(fail("chdir /"));
        }
    }
    Ok(())
}

pub(crate) fn mount(
    source: Option<&str>,
    target: impl AsRef<Path>,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> std::io::Result<()> {
    let to_c = |s: &str| CString::new(s).map_err(|_| std::io::ErrorKind::InvalidInput);
    let source = source.map(to_c).transpose()?;
    let target = CString::new(target.as_ref().as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let fstype = fstype.map(to_c).transpose()?;
    let data = data.map(to_c).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is null or a NUL-terminated string that outlives the
    // call.
    let r = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn mkdir_p(p: &Path) -> Result<(), String> {
    std::fs::create_dir_all(p).map_err(|e| io(p, e))
}

fn cstr(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{} contains a NUL byte", p.display()))
}

fn io(p: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", p.display())
}

/// Decodes the octal escapes (`\040` for a space, ...) of a mountinfo field.
pub(crate) fn unescape_mountinfo(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(super::unescape_mountinfo("/a\\040b\\134c"), "/a b\\c");
        assert_eq!(super::unescape_mountinfo("/plain"), "/plain");
        assert_eq!(super::unescape_mountinfo("/end\\04"), "/end\\04");
    }
}
