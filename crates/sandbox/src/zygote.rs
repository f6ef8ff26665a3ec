//! The pre-forked launcher (the "zygote"): a copy of the process, made by
//! [`prefork_launcher`] while it still has one thread, that forks a launcher for
//! each command, so the caller does not execute its own binary again.
//!
//! Why: `<exe> __capstan_sandbox_launch` maps and relocates the whole executable
//! a second time and re-runs libc's start-up (its CPU probing by `cpuid`, which
//! traps to the hypervisor in a VM): about 2.5 ms of every command with the
//! capstan binary. A fork of the small single-threaded zygote is a fraction of
//! that.
//!
//! Invariants:
//! * The zygote is forked while its parent has exactly one thread (checked) and
//!   never starts one, so a launcher forked from it is single-threaded, as an
//!   executed one is. It wipes its environment (the strings, not only the
//!   pointers) and points its standard streams at `/dev/null`: it keeps none of
//!   the caller's environment (keys, tokens) and none of its pipes (a reader
//!   waiting for the caller's EOF is not kept waiting by it). It overwrites its
//!   argument block too, so no process of a task shows the caller's command
//!   line (`--token`, a `--store` URL): in `ps` and `/proc/PID/cmdline` it is
//!   `capstan-zygote`, its launchers `capstan-launch`; a zygote that cannot do
//!   so exits, and commands execute the launcher instead.
//! * It dies with its parent (`PR_SET_PDEATHSIG`, and a check for a parent that
//!   died before that was set), and it leaves the parent's process group, so a
//!   terminal's Ctrl-C reaches the caller (which cancels its commands), not it.
//! * A launcher it forks starts as an executed one does: the control socket as
//!   fd 0, the caller's output pipes as fds 1 and 2, its own process group, an
//!   empty signal mask; the caller gets its pid (the group to kill) and a pidfd
//!   that becomes readable when it exits.
//! * It is a speed-up, never a requirement: without one (not started, a
//!   launcher named by [`crate::set_launcher`], a zygote that died or whose
//!   kernel has no pidfds), [`crate::run`] executes the launcher as before. A
//!   request the zygote did not fork for leaves the control socket unread, so
//!   the executed launcher still finds its configuration there.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, setsockopt, socketpair, sockopt,
};
use nix::sys::time::{TimeVal, TimeValLike as _};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

/// The caller's end of the zygote's socket (`SOCK_SEQPACKET`: one request, one
/// reply); `None` before [`prefork_launcher`], after [`forget`], and once the
/// zygote was found gone.
static ZYGOTE: Mutex<Option<OwnedFd>> = Mutex::new(None);

/// How long the caller waits for the zygote's reply: a fork takes well under a
/// millisecond, so only a stopped or wedged zygote takes this long.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A launcher the zygote forked for [`spawn`].
pub(crate) struct Forked {
    /// Its pid, which is also its process group's id.
    pub pid: i32,
    /// A pidfd: readable once the launcher has exited.
    pub pidfd: OwnedFd,
}

/// Why [`spawn`] did not fork a launcher.
pub(crate) enum NotForked {
    /// No zygote, or it was gone before the request was sent: execute the
    /// launcher instead; the control socket is untouched.
    Absent,
    /// The request was sent but no launcher came back (the zygote failed to fork,
    /// died, or did not answer in time). Whether a launcher already read the
    /// control socket cannot be known, so this command fails; the zygote is
    /// dropped and later commands execute the launcher.
    Failed(String),
}

/// Forks the launcher zygote, so that [`crate::run`] forks each command's
/// launcher from it instead of executing this binary again. Call it from the
/// main thread, right after [`crate::maybe_run_launcher`], in a process that may
/// run commands (a one-shot command that never does should not pay for the
/// fork). Returns whether a zygote now runs; with more than one thread in the
/// process it starts none (a fork would copy one thread of many).
pub fn prefork_launcher() -> bool {
    // Without pidfds the caller could not wait for a launcher it did not start.
    if crate::launcher::thread_count() != 1 || pidfd_open(std::process::id() as i32).is_err() {
        return false;
    }
    let Ok((ours, theirs)) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    ) else {
        return false;
    };
    if setsockopt(
        &ours,
        sockopt::ReceiveTimeout,
        &TimeVal::seconds(REPLY_TIMEOUT.as_secs() as i64),
    )
    .is_err()
    {
        return false;
    }
    let parent = nix::unistd::getpid();
    // SAFETY: the process has one thread (checked above), so the child may
    // allocate and call anything.
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Child) => {
            drop(ours);
            zygote_main(theirs, parent)
        }
        Ok(ForkResult::Parent { .. }) => {
            drop(theirs);
            *ZYGOTE.lock().unwrap_or_else(PoisonError::into_inner) = Some(ours);
            true
        }
        Err(_) => false,
    }
}

/// Stops using the zygote (it exits when it sees its socket closed).
pub(crate) fn forget() {
    ZYGOTE.lock().unwrap_or_else(PoisonError::into_inner).take();
}

/// Asks the zygote for a launcher with `ctrl` as its fd 0 and `stdout`,
/// `stderr` as its fds 1 and 2. Blocks for the round trip (a fork).
pub(crate) fn spawn(
    ctrl: &OwnedFd,
    stdout: &OwnedFd,
    stderr: &OwnedFd,
) -> Result<Forked, NotForked> {
    let mut slot = ZYGOTE.lock().unwrap_or_else(PoisonError::into_inner);
    let sock = slot.as_ref().ok_or(NotForked::Absent)?;
    let fds = [ctrl.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd()];
    let sent = loop {
        match sendmsg::<()>(
            sock.as_raw_fd(),
            &[IoSlice::new(b"L")],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other,
        }
    };
    if let Err(e) = sent {
        tracing::debug!(target: "capstan_sandbox", "launcher zygote gone ({e}); executing the launcher");
        *slot = None;
        return Err(NotForked::Absent);
    }
    let answer = receive_reply(sock);
    if answer.is_err() {
        *slot = None;
    }
    answer.map_err(NotForked::Failed)
}

/// The reply: `[pid, errno]` (little-endian i32s) and, when `pid > 0`, the
/// launcher's pidfd.
fn receive_reply(sock: &OwnedFd) -> Result<Forked, String> {
    let mut reply = [0u8; 8];
    let (bytes, fds) = recv_with_fds::<1>(sock, &mut reply).map_err(|e| match e {
        nix::errno::Errno::EAGAIN => {
            format!("the launcher zygote did not answer in {REPLY_TIMEOUT:?}")
        }
        e => format!("cannot read the launcher zygote's answer: {e}"),
    })?;
    let pidfd = fds.into_iter().next();
    if bytes != reply.len() {
        return Err("the launcher zygote ended without answering".into());
    }
    let pid = i32::from_le_bytes([reply[0], reply[1], reply[2], reply[3]]);
    let errno = i32::from_le_bytes([reply[4], reply[5], reply[6], reply[7]]);
    match pidfd {
        Some(pidfd) if pid > 0 => Ok(Forked { pid, pidfd }),
        _ => Err(format!(
            "the launcher zygote could not fork a launcher: {}",
            nix::errno::Errno::from_raw(errno)
        )),
    }
}

fn zygote_main(sock: OwnedFd, parent: Pid) -> ! {
    // SAFETY: plain syscalls in a single-threaded process, so nothing else reads
    // the environment while it is wiped.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != parent.as_raw() {
            libc::_exit(0);
        }
        libc::setpgid(0, 0);
        libc::prctl(libc::PR_SET_NAME, c"capstan-zygote".as_ptr());
        wipe_environment();
        // A zygote that cannot hide the caller's command line does not serve:
        // the caller then executes the launcher, whose arguments are its own.
        if !overwrite_command_line(b"capstan-zygote") {
            libc::_exit(0);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            libc::close(null);
        }
    }
    // Exited launchers are reaped as SIGCHLD arrives (a signalfd), not left as
    // zombies until the next request.
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    let sigfd = chld
        .thread_block()
        .and_then(|()| SignalFd::with_flags(&chld, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK));
    let Ok(sigfd) = sigfd else {
        // SAFETY: ends this process.
        unsafe { libc::_exit(0) }
    };
    loop {
        let mut fds = [
            PollFd::new(sock.as_fd(), PollFlags::POLLIN),
            PollFd::new(sigfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            // SAFETY: ends this process.
            Err(_) => unsafe { libc::_exit(1) },
        }
        let request_ready = fds[0].any().unwrap_or(true);
        if fds[1].any().unwrap_or(false) {
            while let Ok(Some(_)) = sigfd.read_signal() {}
            reap_exited();
        }
        if request_ready {
            match receive(&sock) {
                // The caller closed its end (it exited or forgot us).
                // SAFETY: ends this process.
                Ok(Request::Closed) => unsafe { libc::_exit(0) },
                Ok(Request::Launch(fds)) => fork_launcher(&sock, &sigfd, fds),
                Ok(Request::Malformed) => reply(&sock, 0, libc::EINVAL, None),
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
                // SAFETY: ends this process.
                Err(_) => unsafe { libc::_exit(1) },
            }
        }
    }
}

/// Zeroes the environment's strings, then empties it: `clearenv` alone only
/// drops the pointers, and the strings the process started with stay in its
/// memory (and in `/proc/PID/environ`), in this copy and every launcher forked
/// from it.
///
/// # Safety
/// Single-threaded: nothing else may read or change the environment meanwhile.
unsafe fn wipe_environment() {
    unsafe extern "C" {
        static mut environ: *mut *mut libc::c_char;
    }
    // SAFETY: `environ` is a NULL-terminated array of NUL-terminated, writable
    // strings (the start-up block, or setenv's heap copies); the caller
    // guarantees no concurrent use.
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let s = *entry;
            std::ptr::write_bytes(s, 0, libc::strlen(s));
            entry = entry.add(1);
        }
        libc::clearenv();
    }
}

/// Overwrites the process's argument block (what `/proc/PID/cmdline` and `ps`
/// show) with `name` and NULs. The zygote is a fork of the caller, so its block
/// holds the caller's command line (`serve --token T`, a `--store` URL with a
/// password); every launcher and the init of every task are forks of the zygote
/// and would show it to the command inside. The block's bounds come from
/// `/proc/self/stat` (fields 48 and 49); returns false when they cannot be
/// read, and the block is then untouched.
///
/// # Safety
/// Single-threaded: nothing else may read the arguments meanwhile.
unsafe fn overwrite_command_line(name: &[u8]) -> bool {
    let Some((start, end)) = argument_block() else {
        return false;
    };
    let len = end - start;
    // SAFETY: [start, end) is this process's own argument block, writable stack
    // memory the kernel set up at exec; the caller guarantees no concurrent use.
    unsafe {
        let block = start as *mut u8;
        std::ptr::write_bytes(block, 0, len);
        // Keep the final NUL: the kernel then reads the block as is.
        let keep = name.len().min(len - 1);
        std::ptr::copy_nonoverlapping(name.as_ptr(), block, keep);
    }
    true
}

/// The bounds of this process's argument block (`arg_start`, `arg_end`).
fn argument_block() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // `rest` starts at field 3 (state); arg_start is field 48, arg_end 49.
    let start = fields.get(45)?.parse().ok()?;
    let end = fields.get(46)?.parse().ok()?;
    (start > 0 && end > start).then_some((start, end))
}

fn reap_exited() {
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// What arrived on the zygote's socket.
enum Request {
    /// The caller closed its end.
    Closed,
    /// A launcher is wanted with these fds as its 0, 1 and 2.
    Launch([OwnedFd; 3]),
    /// Not three fds: answered with `EINVAL`, dropped.
    Malformed,
}

fn receive(sock: &OwnedFd) -> nix::Result<Request> {
    let (bytes, received) = recv_with_fds::<3>(sock, &mut [0u8; 1])?;
    if bytes == 0 && received.is_empty() {
        return Ok(Request::Closed);
    }
    Ok(<[OwnedFd; 3]>::try_from(received).map_or(Request::Malformed, Request::Launch))
}

/// One message: its bytes into `buf`, and the fds it carried (up to `N`),
/// owned and close-on-exec.
fn recv_with_fds<const N: usize>(
    sock: &OwnedFd,
    buf: &mut [u8],
) -> nix::Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([RawFd; N]);
    let mut iov = [IoSliceMut::new(buf)];
    // A signal handled on this thread interrupts a wait on a socket with a
    // receive timeout even under SA_RESTART (signal(7)); the message is still
    // queued, so wait again.
    let msg = loop {
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(received) = cmsg {
            // SAFETY: the kernel just gave us these fds; nothing else owns them.
            fds.extend(
                received
                    .into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    Ok((msg.bytes, fds))
}

fn reply(sock: &OwnedFd, pid: i32, errno: i32, pidfd: Option<&OwnedFd>) {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&pid.to_le_bytes());
    bytes[4..].copy_from_slice(&errno.to_le_bytes());
    let fds = pidfd.map(|fd| [fd.as_raw_fd()]);
    let cmsgs: Vec<ControlMessage> = fds.iter().map(|f| ControlMessage::ScmRights(f)).collect();
    // A caller that is gone cannot be answered; its launcher notices the closed
    // control socket and ends.
    let _ = sendmsg::<()>(
        sock.as_raw_fd(),
        &[IoSlice::new(&bytes)],
        &cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    );
}

fn fork_launcher(sock: &OwnedFd, sigfd: &SignalFd, fds: [OwnedFd; 3]) {
    // SAFETY: the zygote has one thread.
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Child) => {
            // SAFETY: plain fd and signal syscalls in the new single-threaded
            // process. dup2 clears close-on-exec on the copies at 0, 1 and 2.
            unsafe {
                libc::close(sock.as_raw_fd());
                libc::close(sigfd.as_raw_fd());
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_NAME, c"capstan-launch".as_ptr());
                // Already blank (the zygote's); this only renames it.
                overwrite_command_line(b"capstan-launch");
                for (target, fd) in fds.iter().enumerate() {
                    libc::dup2(fd.as_raw_fd(), target as i32);
                }
            }
            for fd in fds {
                if fd.as_raw_fd() > 2 {
                    drop(fd);
                } else {
                    std::mem::forget(fd);
                }
            }
            let _ = SigSet::empty().thread_set_mask();
            crate::launcher::run_launcher(None)
        }
        Ok(ForkResult::Parent { child }) => {
            // Also here: whichever of the two runs first, the group exists before
            // the caller may signal it.
            let _ = nix::unistd::setpgid(child, child);
            drop(fds);
            // The child cannot have been reaped yet (only `reap_exited` does,
            // later), so this pidfd is the launcher's, not a reused pid's.
            match pidfd_open(child.as_raw()) {
                Ok(pidfd) => reply(sock, child.as_raw(), 0, Some(&pidfd)),
                Err(e) => {
                    // Cannot happen after the start-up check short of running out
                    // of fds; the caller then fails this command.
                    let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                    let _ = waitpid(child, None);
                    reply(sock, 0, e as i32, None);
                }
            }
        }
        Err(e) => reply(sock, 0, e as i32, None),
    }
}

fn pidfd_open(pid: i32) -> nix::Result<OwnedFd> {
    // SAFETY: a plain syscall; on success the returned fd is new and ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(nix::errno::Errno::last());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}
