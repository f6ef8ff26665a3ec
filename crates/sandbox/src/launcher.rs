//! The launcher: a fresh, single-threaded process that confines and supervises the
//! command.
//!
//! Process tree (sandbox required):
//!
//! ```text
//! run() ── launcher (own process group; joins the task cgroups; new PID
//!          [+ user] [+ network] namespaces)
//!            └─ init (PID 1 of the new PID namespace; own mount namespace in
//!               which it builds the allowlist root (`view`) and pivots into
//!               it; supervises)
//!                 ├─ bridge (network through the egress proxy only: relays
//!                 │  127.0.0.1:PROXY_PORT to the proxy's Unix socket)
//!                 └─ command (setsid; unprivileged ids, rlimits, Landlock,
//!                    no_new_privs, seccomp; exec)
//! ```
//!
//! Invariants:
//! * The command starts only if every step of its confinement succeeded:
//!   namespaces, the filesystem view, the identity change, Landlock and
//!   seccomp. Any failure is reported as `Unsupported` or `Failed` and nothing
//!   runs (fail closed).
//! * When the command exits, or the caller cancels (EOF on the control socket),
//!   or the launcher dies, init kills every process in the PID namespace and exits;
//!   the kernel guarantees nothing in the namespace outlives its init. Init dies
//!   with the launcher (`PR_SET_PDEATHSIG` plus a lifeline pipe).
//! * With `SandboxMode::Off` there are no namespaces: the launcher is itself the
//!   supervisor and a child subreaper, so orphans are reparented to it and it can
//!   find and kill every descendant by walking `/proc`.
//! * Exactly one final report (`Exited` or `Signaled`) is sent for a command that
//!   started, then any `LimitHit`; the launcher removes the task cgroups before
//!   it exits.
//!
//! Everything here runs in processes with a single thread, so allocating after
//! `fork` is fine.

use std::ffi::CString;
use std::io::Read as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::{ForkResult, Pid};
use serde::{Deserialize, Serialize};

use crate::cgroup::{Controller, TaskCgroup};
use crate::{LimitHit, Limits, Mechanism};

pub(crate) const LAUNCH_FLAG: &str = "__capstan_sandbox_launch";
/// Second argument of a launcher whose command reads its standard input from
/// a pipe of the caller's (`--stdin-fd=N`: the launcher's fd N; see
/// `spawn_stdio`) instead of `/dev/null`.
pub(crate) const STDIN_FD_FLAG: &str = "--stdin-fd=";

/// Everything the launcher needs, sent by `run` over the control socket.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct LaunchConfig {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub workspace: PathBuf,
    /// Host directory of the task: the mount point of the view (`root`) when
    /// confined, the command's `home` and `tmp` otherwise.
    pub task_dir: PathBuf,
    /// Extra read-only paths (canonical).
    pub read: Vec<PathBuf>,
    /// Directories hidden from the view (canonical, existing).
    #[serde(default)]
    pub hide: Vec<PathBuf>,
    pub network: bool,
    /// The network goes through the egress proxy (`network` is then false).
    #[serde(default)]
    pub proxy: Option<ProxyBridge>,
    /// `SandboxMode::Required`: namespaces, view, identity, Landlock, seccomp.
    pub confine: bool,
    pub limits: Limits,
    pub grace_ms: u64,
    pub cgroup: TaskCgroup,
    /// Mechanisms to treat as missing (a test hook that can only refuse runs).
    pub unavailable: Vec<Mechanism>,
    /// Capture directory (canonical): stage the upper layer there instead of
    /// copying it back.
    #[serde(default)]
    pub capture: Option<PathBuf>,
    /// The workspace is bound read-only (no quota layer, no capture).
    #[serde(default)]
    pub workspace_read_only: bool,
    /// Bench only: the whole host read-only instead of the allowlist view.
    #[cfg(feature = "bench-whole-host")]
    #[serde(default)]
    pub whole_host_view: bool,
}

/// Where the forwarder listens and what it relays to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ProxyBridge {
    /// The proxy's Unix socket on the host.
    pub socket: PathBuf,
    /// The TCP port on the namespace's loopback.
    pub port: u16,
}

/// One line (JSON) sent back to `run` over the control socket.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "report", rename_all = "snake_case")]
pub(crate) enum Report {
    Warning { message: String },
    Unsupported { what: String },
    Failed { message: String },
    Exited { code: i32 },
    Signaled { signal: i32 },
    LimitHit { limit: LimitHit },
}

/// The control socket: configuration in, reports out, EOF means "terminate".
#[derive(Clone, Copy)]
struct Ctrl(RawFd);

impl Ctrl {
    fn send(self, report: &Report) {
        let mut line = serde_json::to_vec(report).unwrap_or_default();
        line.push(b'\n');
        let mut buf = &line[..];
        while !buf.is_empty() {
            // MSG_NOSIGNAL: if `run` is gone, fail quietly instead of SIGPIPE.
            // SAFETY: valid buffer; the fd is ours.
            let n =
                unsafe { libc::send(self.0, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
            if n <= 0 {
                if n < 0 && errno() == libc::EINTR {
                    continue;
                }
                return;
            }
            buf = &buf[n as usize..];
        }
    }

    fn warn(self, message: impl Into<String>) {
        self.send(&Report::Warning {
            message: message.into(),
        });
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Entry point of the launcher process; see the crate docs for how it is started.
/// Never returns.
pub fn launcher_main() -> ! {
    let stdin_fd: Option<i32> = std::env::args()
        .nth(2)
        .and_then(|a| a.strip_prefix(STDIN_FD_FLAG)?.parse().ok());
    run_launcher(stdin_fd)
}

/// The launcher, in a process whose fd 0 is the control socket and fds 1 and 2
/// the caller's output pipes: executed as `<exe> __capstan_sandbox_launch`, or
/// forked by the zygote (`zygote.rs`). `stdin_fd` is the caller's pipe for the
/// command's stdin, if any.
pub(crate) fn run_launcher(stdin_fd: Option<i32>) -> ! {
    // The control socket arrives as stdin. Move it out of the way (close-on-exec,
    // so no command inherits it) and give fd 0 to /dev/null, which the command
    // inherits as its stdin.
    // SAFETY: plain fd syscalls on fds this fresh process owns.
    let ctrl = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3) };
    if ctrl < 0 {
        eprintln!("capstan-sandbox launcher: no control socket on stdin");
        std::process::exit(2);
    }
    let ctrl = Ctrl(ctrl);
    let stdin_fd = stdin_fd.filter(|fd| *fd > 2 && *fd != ctrl.0);
    // SAFETY: as above.
    unsafe {
        if let Some(fd) = stdin_fd.filter(|fd| libc::fcntl(*fd, libc::F_GETFD) >= 0) {
            // The caller's pipe becomes the command's stdin (its own fd is
            // closed: nothing else inherits it).
            libc::dup2(fd, 0);
            libc::close(fd);
        } else {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if null >= 0 {
                libc::dup2(null, 0);
                libc::close(null);
            }
        }
    }
    match launch(ctrl) {
        Ok(code) => std::process::exit(code),
        Err(report) => {
            ctrl.send(&report);
            std::process::exit(1)
        }
    }
}

fn failed(message: impl Into<String>) -> Report {
    Report::Failed {
        message: message.into(),
    }
}

fn unsupported(what: impl Into<String>) -> Report {
    Report::Unsupported { what: what.into() }
}

fn launch(ctrl: Ctrl) -> Result<i32, Report> {
    let threads = thread_count();
    if threads > 1 {
        return Err(failed(format!(
            "the launcher process has {threads} threads: call capstan_sandbox::maybe_run_launcher() \
             first thing in main, before any thread or async runtime starts"
        )));
    }
    let config = read_config(ctrl).map_err(failed)?;

    // Before forking, so that every process of the task is counted.
    if let Err(e) = config.cgroup.join() {
        ctrl.warn(format!(
            "{e}; the task's process and memory limits fall back to rlimits"
        ));
    }
    let code = if config.confine {
        confined(&config, ctrl)
    } else {
        // We supervise ourselves; orphans of the task are reparented to us.
        nix::sys::prctl::set_child_subreaper(true)
            .map_err(|e| failed(format!("subreaper: {e}")))
            .map(|()| supervise(&config, ctrl, &Namespaces::default(), None, None))
    };
    // Every process of the task is gone: report what the kernel counted, then
    // leave no cgroup behind, even if the caller died meanwhile.
    if config.cgroup.has(Controller::Memory) && config.cgroup.oom_kills() > 0 {
        ctrl.send(&Report::LimitHit {
            limit: LimitHit::Memory {
                limit_bytes: config.limits.max_memory.unwrap_or(0),
            },
        });
    }
    config.cgroup.leave_and_remove();
    code
}

/// The required sandbox: checks the mechanisms, prepares the identity, enters
/// the namespaces and forks init, which builds the view and supervises.
fn confined(config: &LaunchConfig, ctrl: Ctrl) -> Result<i32, Report> {
    // Checked before anything is built, so a missing mechanism is refused fast
    // and without side effects.
    if config.unavailable.contains(&Mechanism::Landlock) || crate::landlock::kernel_abi().is_none()
    {
        return Err(unsupported(crate::landlock::MISSING));
    }
    if config.unavailable.contains(&Mechanism::Seccomp) || !crate::check::seccomp_available() {
        return Err(unsupported(crate::seccomp::MISSING));
    }
    let root = nix::unistd::geteuid().is_root();
    let owner = (nix::unistd::getuid(), nix::unistd::getgid());
    let (workspace_mount, command_ids) = if root {
        let fd = crate::identity::idmapped_workspace(
            &config.workspace,
            (owner.0.as_raw(), owner.1.as_raw()),
        )
        .map_err(unsupported)?;
        (
            Some(fd),
            (crate::identity::SANDBOX_UID, crate::identity::SANDBOX_GID),
        )
    } else {
        (None, (owner.0.as_raw(), owner.1.as_raw()))
    };
    let ns = enter_namespaces(config, root, owner).map_err(unsupported)?;

    // The next child is PID 1 of the new PID namespace.
    let (life_r, life_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| failed(format!("pipe: {e}")))?;
    // SAFETY: single-threaded process.
    match unsafe { nix::unistd::fork() }.map_err(|e| failed(format!("fork: {e}")))? {
        ForkResult::Child => {
            drop(life_w);
            // If the launcher dies (the caller's last-resort SIGKILL), so does init,
            // and with it the whole namespace.
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            // The bridge's ends are made while the host's filesystem is still
            // in view: the proxy's socket is opened here and reached later
            // through this descriptor only.
            let bridge = match &config.proxy {
                Some(p) => match crate::bridge::Bridge::prepare(p) {
                    Ok(b) => Some(b),
                    Err(e) => {
                        ctrl.send(&failed(format!(
                            "cannot set up the egress proxy bridge: {e}"
                        )));
                        std::process::exit(1);
                    }
                },
                None => None,
            };
            let view = nix::sched::unshare(CloneFlags::CLONE_NEWNS)
                .map_err(|e| format!("no mount namespace: {e}"))
                .and_then(|()| {
                    #[cfg(feature = "bench-whole-host")]
                    if config.whole_host_view {
                        return crate::view::build_whole_host(&view_spec(
                            config,
                            workspace_mount.as_ref(),
                            command_ids,
                            ns.user,
                        ))
                        .map(|()| None);
                    }
                    crate::view::build(&view_spec(
                        config,
                        workspace_mount.as_ref(),
                        command_ids,
                        ns.user,
                    ))
                });
            drop(workspace_mount);
            let quota = match view {
                Ok(q) => q,
                Err(e) => {
                    ctrl.send(&failed(format!(
                        "cannot build the command's filesystem view: {e}"
                    )));
                    std::process::exit(1);
                }
            };
            if let Some(b) = bridge
                && let Err(e) = b.start(ns.drop_root)
            {
                ctrl.send(&failed(format!(
                    "cannot start the egress proxy bridge: {e}"
                )));
                std::process::exit(1);
            }
            let code = supervise(config, ctrl, &ns, Some(life_r), quota.as_ref());
            std::process::exit(code)
        }
        ForkResult::Parent { child } => {
            drop(life_r);
            drop(workspace_mount);
            // Signals sent to our process group are for init; the launcher only
            // waits (and keeps the lifeline open while it lives).
            ignore_termination_signals();
            while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(child, None) {}
            drop(life_w);
            Ok(0)
        }
    }
}

fn view_spec<'a>(
    config: &'a LaunchConfig,
    workspace_mount: Option<&'a OwnedFd>,
    owner: (u32, u32),
    user_ns: bool,
) -> crate::view::ViewSpec<'a> {
    crate::view::ViewSpec {
        task_dir: &config.task_dir,
        workspace: &config.workspace,
        read: &config.read,
        hide: &config.hide,
        tmp_bytes: config.limits.tmp_size,
        network: config.network,
        workspace_mount,
        owner,
        write_quota: config.limits.workspace_write_quota,
        user_ns,
        capture: config.capture.as_deref(),
        workspace_read_only: config.workspace_read_only,
    }
}

pub(crate) fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1)
}

fn read_config(ctrl: Ctrl) -> Result<LaunchConfig, String> {
    // SAFETY: the fd is ours; ManuallyDrop keeps it open.
    let mut sock = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(ctrl.0) });
    let mut len = [0u8; 4];
    sock.read_exact(&mut len)
        .map_err(|e| format!("reading the configuration: {e}"))?;
    let len = u32::from_le_bytes(len) as usize;
    if len > 64 << 20 {
        return Err(format!("configuration too large ({len} bytes)"));
    }
    let mut buf = vec![0u8; len];
    sock.read_exact(&mut buf)
        .map_err(|e| format!("reading the configuration: {e}"))?;
    serde_json::from_slice(&buf).map_err(|e| format!("bad configuration: {e}"))
}

/// Which namespaces the task runs in.
#[derive(Default)]
struct Namespaces {
    /// A private user namespace (Capstan not run as root).
    user: bool,
    /// A private PID namespace whose init is the supervisor.
    pid: bool,
    /// The command drops from root to the sandbox ids.
    drop_root: bool,
}

/// Enters new PID (and, with the network off, network) namespaces; a regular
/// user gets them through a new user namespace that maps only their own ids.
/// Root needs no user namespace: its command drops to unprivileged ids instead.
fn enter_namespaces(
    config: &LaunchConfig,
    root: bool,
    (uid, gid): (nix::unistd::Uid, nix::unistd::Gid),
) -> Result<Namespaces, String> {
    let mut flags = CloneFlags::CLONE_NEWPID;
    if !config.network || config.proxy.is_some() {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    if !root {
        flags |= CloneFlags::CLONE_NEWUSER;
    }
    nix::sched::unshare(flags).map_err(|e| {
        format!(
            "cannot create the task's namespaces ({flags:?}: {e}); unprivileged user \
             namespaces may be disabled (kernel.unprivileged_userns_clone, \
             user.max_user_namespaces or an AppArmor restriction)"
        )
    })?;
    if !root {
        // Our own ids map to themselves, nothing else: files keep their owners,
        // and an unprivileged user may write exactly this single-line mapping.
        std::fs::write("/proc/self/setgroups", "deny")
            .and_then(|()| std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n")))
            .and_then(|()| std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n")))
            .map_err(|e| format!("cannot write the user namespace id maps: {e}"))?;
    }
    Ok(Namespaces {
        user: !root,
        pid: true,
        drop_root: root,
    })
}

fn ignore_termination_signals() {
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: SIG_IGN has no handler code.
        let _ = unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigIgn) };
    }
}

/// Forks the command and supervises it until it and all its descendants are
/// gone. Returns the supervisor's own exit code.
fn supervise(
    config: &LaunchConfig,
    ctrl: Ctrl,
    ns: &Namespaces,
    lifeline: Option<OwnedFd>,
    quota: Option<&crate::quota::Quota>,
) -> i32 {
    let pid1 = ns.pid;
    // Signals are read from a signalfd in the poll loop, not by handlers.
    let mut mask = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        mask.add(s);
    }
    if let Err(e) = mask.thread_block() {
        ctrl.send(&Report::Failed {
            message: format!("sigprocmask: {e}"),
        });
        return 1;
    }
    let sigfd = match nix::sys::signalfd::SignalFd::with_flags(
        &mask,
        nix::sys::signalfd::SfdFlags::SFD_NONBLOCK | nix::sys::signalfd::SfdFlags::SFD_CLOEXEC,
    ) {
        Ok(fd) => fd,
        Err(e) => {
            ctrl.send(&Report::Failed {
                message: format!("signalfd: {e}"),
            });
            return 1;
        }
    };

    // SAFETY: single-threaded process.
    let main = match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Child) => exec_command(config, ctrl, ns),
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => {
            ctrl.send(&Report::Failed {
                message: format!("fork: {e}"),
            });
            return 1;
        }
    };

    let grace = Duration::from_millis(config.grace_ms);
    let mut kill_at: Option<Instant> = None;
    let mut ctrl_open = true;
    let mut main_status: Option<Report> = None;
    let kill_all = |sig: Signal| {
        if pid1 {
            // From PID 1, kill(-1) reaches every other process in the namespace.
            let _ = nix::sys::signal::kill(Pid::from_raw(-1), sig);
        } else {
            kill_descendants(sig);
        }
    };
    let terminate = |kill_at: &mut Option<Instant>| {
        if kill_at.is_none() {
            kill_all(Signal::SIGTERM);
            kill_all(Signal::SIGCONT);
            *kill_at = Some(Instant::now() + grace);
        }
    };

    while main_status.is_none() {
        let timeout_ms: i32 = match kill_at {
            Some(t) => t
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(i32::MAX as u128) as i32,
            None => -1,
        };
        let mut fds = vec![libc::pollfd {
            fd: sigfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if ctrl_open {
            fds.push(libc::pollfd {
                fd: ctrl.0,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if let Some(l) = &lifeline {
            fds.push(libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // SAFETY: fds is a valid array of pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n < 0 && errno() != libc::EINTR {
            break;
        }
        for p in &fds[1..] {
            if p.revents == 0 {
                continue;
            }
            if p.fd == ctrl.0 {
                // EOF (the caller cancelled, timed out or died) or any byte.
                let mut b = [0u8; 64];
                // SAFETY: valid buffer.
                let r = unsafe { libc::recv(ctrl.0, b.as_mut_ptr().cast(), b.len(), 0) };
                if r == 0 || p.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                    ctrl_open = false;
                }
                if r >= 0 {
                    terminate(&mut kill_at);
                }
            } else {
                // The launcher died: nobody is left to wait for a grace period.
                kill_all(Signal::SIGKILL);
                kill_at = Some(Instant::now());
            }
        }
        while let Ok(Some(info)) = sigfd.read_signal() {
            if info.ssi_signo != libc::SIGCHLD as u32 {
                terminate(&mut kill_at);
            }
        }
        // Reap whatever ended (orphans come to us as init or as subreaper).
        loop {
            match nix::sys::wait::waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == main => {
                    main_status = Some(Report::Exited { code });
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == main => {
                    main_status = Some(Report::Signaled { signal: sig as i32 });
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            kill_all(Signal::SIGKILL);
            // Look again shortly, without spinning, until the command is reaped.
            kill_at = Some(Instant::now() + Duration::from_millis(50));
        }
    }

    // The command is done: nothing it started may outlive it.
    if pid1 {
        kill_all(Signal::SIGKILL);
    } else {
        reap_all_descendants();
    }
    let tmp_full = config.confine && filesystem_full(Path::new(crate::view::TMP));
    let quota_full = quota.is_some_and(|q| {
        // Nothing may write the upper layer while it is replayed.
        reap_all_children();
        let full = q.full();
        let done = q.copy_back();
        if !done.errors.is_empty() {
            ctrl.warn(format!(
                "some of the command's writes could not be copied back to the workspace: {}",
                done.errors.join("; ")
            ));
        }
        if !done.skipped.is_empty() {
            ctrl.warn(format!(
                "fifos, sockets and device nodes are not copied back to the workspace: {}",
                done.skipped.join(", ")
            ));
        }
        full
    });
    // As PID 1, exiting makes the kernel kill and reap the rest of the namespace;
    // the launcher's waitpid returns only after that.
    if let Some(status) = main_status {
        ctrl.send(&status);
    }
    if tmp_full {
        ctrl.send(&Report::LimitHit {
            limit: LimitHit::Tmp {
                limit_bytes: config.limits.tmp_size,
            },
        });
    }
    if quota_full {
        ctrl.send(&Report::LimitHit {
            limit: LimitHit::WorkspaceQuota {
                limit_bytes: config.limits.workspace_write_quota.unwrap_or(0),
            },
        });
    }
    0
}

/// As PID 1 after `kill(-1, SIGKILL)`: waits until every other process of the
/// namespace has been reaped.
fn reap_all_children() {
    loop {
        match nix::sys::wait::waitpid(Pid::from_raw(-1), None) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return, // ECHILD
        }
    }
}

/// Whether the filesystem at `path` has no block or inode left: a
/// size-limited tmpfs the command filled (and so met its limit).
fn filesystem_full(path: &Path) -> bool {
    nix::sys::statvfs::statvfs(path)
        .is_ok_and(|st| st.blocks_available() == 0 || st.files_available() == 0)
}

/// Subreaper mode: kills and reaps until we have no children. Because we are a
/// subreaper, having no children means having no descendants, so the common
/// case (nothing left behind) costs one `waitpid` and no `/proc` walk.
fn reap_all_descendants() {
    loop {
        match nix::sys::wait::waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return, // ECHILD: none left
            Ok(WaitStatus::StillAlive) => {
                kill_descendants(Signal::SIGKILL);
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(_) => {}
        }
    }
}

/// Signals every descendant of this process, found by walking `/proc`.
fn kill_descendants(sig: Signal) {
    let me = std::process::id() as i32;
    let mut parent_of: Vec<(i32, i32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // "pid (comm) state ppid ...": comm may contain spaces and parentheses.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = vec![me];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        for &(pid, ppid) in &parent_of {
            if ppid == p && !found.contains(&pid) {
                found.push(pid);
            }
        }
        i += 1;
    }
    for &pid in &found[1..] {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
    }
}

/// In the command's process: confine, then exec. Never returns.
fn exec_command(config: &LaunchConfig, ctrl: Ctrl, ns: &Namespaces) -> ! {
    // New session: no controlling terminal (no TIOCSTI into the user's shell, no
    // /dev/tty), and its own process group.
    let _ = nix::unistd::setsid();
    reset_signals();
    close_inherited_fds();

    let fail = |report: Report| -> ! {
        ctrl.send(&report);
        // SAFETY: _exit is always safe.
        unsafe { libc::_exit(126) }
    };

    if let Err(e) = nix::unistd::chdir(&config.cwd) {
        fail(Report::Failed {
            message: format!("cannot enter {}: {e}", config.cwd.display()),
        });
    }
    // Root gives up its ids before the limits are set: RLIMIT_NPROC counts the
    // processes of the real uid, and root is exempt from it.
    if ns.drop_root
        && let Err(e) = crate::identity::drop_root()
    {
        fail(Report::Failed {
            message: format!("cannot drop to the sandbox's unprivileged ids: {e}"),
        });
    }
    apply_limits(&config.limits, ns, &config.cgroup, ctrl);

    if config.confine {
        drop_capabilities();
        let writable: Vec<PathBuf> = if config.workspace_read_only {
            vec![PathBuf::from(crate::view::TMP)]
        } else {
            vec![config.workspace.clone(), PathBuf::from(crate::view::TMP)]
        };
        let connect_port = config.proxy.as_ref().map(|p| p.port);
        let mut read = config.read.clone();
        if config.workspace_read_only {
            read.push(config.workspace.clone());
        }
        match crate::landlock::restrict(&writable, &read, config.network, connect_port) {
            Ok(crate::landlock::Enforced::Fully) => {}
            Ok(crate::landlock::Enforced::Partially(msg)) => ctrl.warn(msg),
            Err(what) => fail(Report::Unsupported { what }),
        }
        let sockets = match (config.network, &config.proxy) {
            (_, Some(_)) => crate::seccomp::Sockets::Inet,
            (true, None) => crate::seccomp::Sockets::Any,
            (false, None) => crate::seccomp::Sockets::UnixOnly,
        };
        if let Err(what) = crate::seccomp::install(sockets) {
            fail(Report::Unsupported { what });
        }
    }

    let env: Vec<CString> = config
        .env
        .iter()
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect();
    let argv: Vec<CString> = config
        .argv
        .iter()
        .filter_map(|a| CString::new(a.as_str()).ok())
        .collect();
    let program = &config.argv[0];
    let path_var = config
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or(crate::SANDBOX_PATH);

    let candidates: Vec<PathBuf> = if program.contains('/') {
        vec![PathBuf::from(program)]
    } else {
        path_var
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| Path::new(d).join(program))
            .collect()
    };
    let mut last = libc::ENOENT;
    for c in &candidates {
        let Ok(cpath) = CString::new(c.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        let e = nix::unistd::execve(&cpath, &argv, &env).unwrap_err();
        // Like a shell: keep looking after "not found", remember "not allowed".
        if e == nix::errno::Errno::EACCES || last != libc::EACCES {
            last = e as i32;
        }
    }
    let (code, why) = if last == libc::ENOENT && !program.contains('/') {
        (127, "command not found".to_owned())
    } else {
        (
            if last == libc::ENOENT { 127 } else { 126 },
            std::io::Error::from_raw_os_error(last).to_string(),
        )
    };
    let msg = format!("capstan-sandbox: {program}: {why}\n");
    // SAFETY: writing a valid buffer to stderr.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(code)
    }
}

/// Default dispositions and an empty mask: ignored signals and the blocked mask
/// survive exec, and the Rust runtime ignores SIGPIPE (which would turn
/// `yes | head` into an endless stream of EPIPE errors).
fn reset_signals() {
    for sig in 1..libc::SIGRTMAX() {
        // SAFETY: SIG_DFL has no handler code; invalid signals just fail.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
}

/// Marks every fd above stderr close-on-exec: a descriptor inherited from the
/// caller would bypass Landlock, which only checks opening.
fn close_inherited_fds() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return;
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        let fds: Vec<i32> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|&fd| fd > 2)
            .collect();
        for fd in fds {
            // SAFETY: only sets FD_CLOEXEC.
            unsafe {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
    }
}

fn apply_limits(limits: &Limits, ns: &Namespaces, cgroup: &TaskCgroup, ctrl: Ctrl) {
    use nix::sys::resource::{Resource, setrlimit};
    let set = |res: Resource, name: &str, value: u64| {
        if let Err(e) = setrlimit(res, value, value) {
            ctrl.warn(format!("cannot set {name} to {value}: {e}"));
        }
    };
    set(Resource::RLIMIT_CORE, "RLIMIT_CORE", 0);
    if let Some(v) = limits.max_file_size {
        set(Resource::RLIMIT_FSIZE, "RLIMIT_FSIZE", v);
    }
    // Without a memory cgroup, the memory limit falls back to the address
    // space of each process (looser: per process, and reservations count).
    let memory_fallback = limits
        .max_memory
        .filter(|_| !cgroup.has(Controller::Memory));
    if let Some(v) = memory_fallback {
        ctrl.warn(format!(
            "no memory cgroup here: memory is limited per process with RLIMIT_AS ({v} bytes)"
        ));
    }
    if let Some(v) = limits
        .max_address_space
        .into_iter()
        .chain(memory_fallback)
        .min()
    {
        set(Resource::RLIMIT_AS, "RLIMIT_AS", v);
    }
    if let Some(v) = limits.max_cpu_seconds {
        set(Resource::RLIMIT_CPU, "RLIMIT_CPU", v);
    }
    if let Some(v) = limits.max_processes {
        // In our own user namespace the count starts at zero; outside one it is
        // per user across the machine, so leave room for what already runs.
        // Root is exempt from RLIMIT_NPROC (the pids cgroup covers it): skip the
        // /proc walk.
        let v = if ns.user || nix::unistd::getuid().is_root() {
            v
        } else {
            v + user_process_count()
        };
        set(Resource::RLIMIT_NPROC, "RLIMIT_NPROC", v);
    }
}

/// Tasks (threads count for RLIMIT_NPROC) of our real uid.
fn user_process_count() -> u64 {
    let uid = nix::unistd::getuid().as_raw();
    let mut n = 0u64;
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if !e
                .file_name()
                .to_str()
                .is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))
            {
                continue;
            }
            let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
                continue;
            };
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            };
            if field("Uid:") == Some(u64::from(uid)) {
                n += field("Threads:").unwrap_or(1);
            }
        }
    }
    n
}

/// Makes sure the command holds no capabilities, even as (namespace) root:
/// `SECBIT_NOROOT` stops exec from granting root the full set, the bounding set
/// is emptied, and no_new_privs (set with seccomp) blocks file capabilities.
/// Best effort: an unprivileged process has nothing to drop and may fail here.
fn drop_capabilities() {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0
                && errno() == libc::EINVAL
            {
                break; // past the last capability
            }
        }
        libc::prctl(
            libc::PR_SET_SECUREBITS,
            SECBIT_NOROOT
                | SECBIT_NOROOT_LOCKED
                | SECBIT_NO_SETUID_FIXUP
                | SECBIT_NO_SETUID_FIXUP_LOCKED
                | SECBIT_NO_CAP_AMBIENT_RAISE
                | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
            0,
            0,
            0,
        );
    }
}
