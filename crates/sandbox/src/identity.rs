//! The command's identity: never the host's root.
//!
//! * Capstan run by a regular user (uid `U`): the command runs in a user
//!   namespace that maps `U` to itself and nothing else, so on the host it is
//!   `U` without any capability; files only root can read stay unreadable.
//! * Capstan run as root: the command drops to [`SANDBOX_UID`]/[`SANDBOX_GID`]
//!   (`nobody`/`nogroup`) with no supplementary groups, which clears every
//!   capability. So that it can still write the workspace (owned by root), the
//!   workspace is attached as an *id-mapped mount* ([`idmapped_workspace`]) on
//!   which files owned by root appear owned by the sandbox uid and files it
//!   creates are stored as root's. The rest of the host sees it as `nobody`:
//!   `/etc/shadow` (root, mode 0640) is unreadable through permissions alone,
//!   before the view even masks it.
//!
//! Failure mode: if the id-mapped mount cannot be made (a filesystem without
//! id-mapping support) or the uid change fails, the launcher refuses to run the
//! command.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::unistd::{ForkResult, Gid, Uid};

/// The uid a command runs as when Capstan runs as root (`nobody`).
pub const SANDBOX_UID: u32 = 65534;
/// The gid a command runs as when Capstan runs as root (`nogroup`).
pub const SANDBOX_GID: u32 = 65534;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// The id map of the workspace mount: `owner` and the sandbox id trade places,
/// every other id maps to itself. Lines are `inside outside count`.
pub(crate) fn swap_map(owner: u32, sandbox: u32) -> String {
    let (lo, hi) = (owner.min(sandbox), owner.max(sandbox));
    let mut map = format!("{owner} {sandbox} 1\n{sandbox} {owner} 1\n");
    if lo > 0 {
        map.push_str(&format!("0 0 {lo}\n"));
    }
    if hi > lo + 1 {
        map.push_str(&format!("{} {} {}\n", lo + 1, lo + 1, hi - lo - 1));
    }
    // Up to 4294967294: u32::MAX is the invalid id.
    let rest = u32::MAX - 1 - hi;
    if rest > 0 {
        map.push_str(&format!("{} {} {rest}\n", hi + 1, hi + 1));
    }
    map
}

/// A detached clone of `workspace` whose ids are mapped by [`swap_map`] of
/// `owner` and the sandbox ids. Needs real root (CAP_SYS_ADMIN in the initial
/// user namespace); call it before entering any namespace.
pub(crate) fn idmapped_workspace(workspace: &Path, owner: (u32, u32)) -> Result<OwnedFd, String> {
    let userns = mapping_namespace(
        &swap_map(owner.0, SANDBOX_UID),
        &swap_map(owner.1, SANDBOX_GID),
    )?;
    let path = CString::new(workspace.as_os_str().as_encoded_bytes())
        .map_err(|_| "the workspace path contains a NUL byte".to_owned())?;
    // SAFETY: open_tree with a NUL-terminated path; returns a new fd or -1.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(format!(
            "cannot clone the workspace mount: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: open_tree returned a fresh fd that we now own.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: mount_setattr on our detached tree with a valid attribute struct.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        return Err(format!(
            "cannot id-map the workspace mount ({}): its filesystem may not support \
             id-mapped mounts; run Capstan as a regular user to sandbox this workspace",
            std::io::Error::last_os_error()
        ));
    }
    Ok(tree)
}

/// Attaches a detached mount (from [`idmapped_workspace`]) at `target`.
pub(crate) fn attach(tree: &OwnedFd, target: &Path) -> Result<(), String> {
    let t = CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| "the workspace path contains a NUL byte".to_owned())?;
    // SAFETY: move_mount with an fd we own and a NUL-terminated target.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r != 0 {
        return Err(format!(
            "cannot attach the workspace: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// A user namespace with the given maps, held open by fd. A child process
/// creates it and waits while we write its maps; the namespace outlives the
/// child through the fd.
fn mapping_namespace(uid_map: &str, gid_map: &str) -> Result<OwnedFd, String> {
    let (ready_r, ready_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let (done_r, done_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the launcher is single-threaded; the child only makes raw syscalls.
    match unsafe { nix::unistd::fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Child => {
            drop(ready_r);
            drop(done_w);
            let ok = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).is_ok();
            let _ = nix::unistd::write(&ready_w, &[u8::from(ok)]);
            let mut b = [0u8; 1];
            let _ = nix::unistd::read(&done_r, &mut b);
            // SAFETY: _exit is always safe.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => {
            drop(ready_w);
            drop(done_r);
            let mut b = [0u8; 1];
            let got = nix::unistd::read(&ready_r, &mut b);
            let result = if got != Ok(1) || b[0] != 1 {
                Err("cannot create the user namespace of the workspace id map".to_owned())
            } else {
                let proc_dir = format!("/proc/{child}");
                std::fs::write(format!("{proc_dir}/uid_map"), uid_map)
                    .and_then(|()| std::fs::write(format!("{proc_dir}/setgroups"), "deny"))
                    .and_then(|()| std::fs::write(format!("{proc_dir}/gid_map"), gid_map))
                    .and_then(|()| std::fs::File::open(format!("{proc_dir}/ns/user")))
                    .map(OwnedFd::from)
                    .map_err(|e| format!("writing the workspace id map: {e}"))
            };
            drop(done_w);
            while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(child, None) {}
            result
        }
    }
}

/// Drops from root to the sandbox ids, with no supplementary groups. A uid
/// change away from 0 clears every capability (no `SECBIT_NO_SETUID_FIXUP`
/// is set before this); the check afterwards makes sure.
pub(crate) fn drop_root() -> Result<(), String> {
    nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    let gid = Gid::from_raw(SANDBOX_GID);
    let uid = Uid::from_raw(SANDBOX_UID);
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("setresgid: {e}"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("setresuid: {e}"))?;
    if nix::unistd::geteuid() != uid || nix::unistd::getegid() != gid {
        return Err("the uid change did not take effect".into());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(str::trim);
    if effective.is_some_and(|caps| caps.chars().any(|c| c != '0')) {
        return Err(format!(
            "capabilities survived the uid change: {}",
            effective.unwrap_or("?")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::swap_map;

    #[test]
    fn swap_map_trades_owner_and_sandbox_and_keeps_the_rest() {
        assert_eq!(
            swap_map(0, 65534),
            "0 65534 1\n65534 0 1\n1 1 65533\n65535 65535 4294901760\n"
        );
        assert_eq!(
            swap_map(1000, 65534),
            "1000 65534 1\n65534 1000 1\n0 0 1000\n1001 1001 64533\n65535 65535 4294901760\n"
        );
    }
}
