//! Runs one command confined to a workspace (Linux).
//!
//! This crate has one job: [`run`] executes a shell command or an argv inside a
//! sandbox and returns what it printed and how it ended. Everything else here exists
//! to make that one call safe:
//!
//! * **Filesystem view** (`view`): the command's root is a new tmpfs built from
//!   an allowlist: the system directories programs need (`/usr`, `/bin`, `/lib*`,
//!   `/etc` with its secrets masked, `/opt`) and the caller's extra read paths,
//!   all read-only; the workspace read-write; a private size-limited `/tmp` (its
//!   `HOME` is `/tmp/home`); a minimal `/dev`; a fresh `/proc`. Other users'
//!   homes, `/root`, `/run`, `/var`, `/sys` and the host's `/tmp` do not exist
//!   in it, so no host Unix socket can be reached by path.
//! * **Identity** (`identity`): never the host's root. A regular user's command
//!   runs as that user in a user namespace that maps only their ids; when
//!   Capstan runs as root the command drops to `nobody`, and the workspace is an
//!   id-mapped mount so that it can still write there.
//! * **Filesystem, inner layer** ([Landlock](https://docs.kernel.org/userspace-api/landlock.html)):
//!   even inside the view, the command may write only the workspace and `/tmp`.
//!   Read-only mounts also cover what Landlock does not govern (chmod, chown,
//!   utimes, xattrs), and /proc shows only the task's processes.
//! * **System calls** (seccomp): no `ptrace`, no `io_uring`, no keyrings, no mounts,
//!   no new namespaces, no BPF or perf, no module loading; with the network off, no
//!   socket other than `AF_UNIX`. Denied calls fail with `EPERM`, so programs print
//!   a clear error instead of dying.
//! * **Network off**: a fresh network namespace (only a down loopback) in addition
//!   to the seccomp socket filter. **Network through the egress proxy**
//!   ([`Network::Proxy`]): the same fresh namespace with loopback up and a
//!   forwarder (`bridge`) on `127.0.0.1:`[`PROXY_PORT`] relaying to the
//!   proxy's Unix socket on the host; Landlock lets the command connect to
//!   that port only.
//! * **Lifetime**: the command runs as the second process of a fresh PID namespace
//!   whose init is our own supervisor; when the command ends, is cancelled or times
//!   out, the supervisor exits and the kernel kills every process left in the
//!   namespace, including double-forked and `setsid` ones.
//! * **Environment**: scrubbed to a short allowlist (`PATH`, `LANG`, `LC_ALL`,
//!   `TERM`, `HOME`, `TMPDIR`) plus what the caller passes in [`ExecSpec::env`]. The
//!   host's environment (API keys, `SSH_AUTH_SOCK`, ...) never reaches the command.
//! * **Resources**: a memory cgroup (`RLIMIT_AS` where none can be made), a pids
//!   cgroup for root, rlimits ([`Limits`]), the size of `/tmp`, a per-stream
//!   output cap that keeps the head and the tail ([`ExecSpec::output_limit`]), a
//!   wall-clock timeout. A limit the command ran into is reported in
//!   [`ExecOutcome::limit_hit`].
//!
//! # The launcher
//!
//! Namespaces, Landlock and seccomp are applied by a small single-threaded launcher
//! process, not in a `pre_exec` hook of the (multi-threaded) caller: after `fork` in
//! a multi-threaded process only async-signal-safe calls are allowed, and building
//! a Landlock ruleset or a BPF program allocates. The launcher is the caller's own
//! executable started as `<exe> __capstan_sandbox_launch`, so the binary that uses
//! this crate must call [`maybe_run_launcher`] first thing in `main`, before it
//! starts any thread (in particular before building a tokio runtime):
//!
//! ```no_run
//! fn main() {
//!     capstan_sandbox::maybe_run_launcher(); // never returns in the launcher
//!     // ... build the tokio runtime, parse arguments, etc.
//! }
//! ```
//!
//! Another executable can be named with [`set_launcher`]. A process that runs
//! commands can call [`prefork_launcher`] right after it: a single-threaded copy
//! of the process then forks each launcher, so the binary is not started again
//! for every command (`zygote.rs`).
//!
//! The launcher receives its configuration and reports the outcome over a Unix
//! socket that is its standard input; that socket also carries cancellation (the
//! caller shuts down its write half) and tells the launcher to kill everything if
//! the caller itself dies.

#![warn(missing_docs)]
#![cfg(target_os = "linux")]
// The crate docs show the exact `main` a binary needs.
#![allow(clippy::needless_doctest_main)]

mod bridge;
mod cgroup;
pub mod changes;
mod check;
mod identity;
mod landlock;
mod launcher;
mod output;
mod quota;
mod seccomp;
mod stdio;
mod view;
mod zygote;

use std::io::Write as _;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

pub use check::{SupportReport, check};
pub use identity::{SANDBOX_GID, SANDBOX_UID};
pub use launcher::launcher_main;
pub use stdio::{StdioTask, spawn_stdio};
pub use zygote::prefork_launcher;

/// The first argument that turns the capstan binary into the sandbox launcher.
pub const LAUNCH_FLAG: &str = launcher::LAUNCH_FLAG;

/// How long the command's processes get between `SIGTERM` and `SIGKILL` when the
/// task is cancelled or times out.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// `PATH` inside the sandbox. Fixed, so that a caller's `PATH` (which may point
/// into a home directory the command cannot read anyway) never leaks in.
pub const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A shell command line, run as `bash --noprofile --norc -c <line>`: bash
    /// because the risk classifier parses bash (dash would read `((x))`
    /// differently), and without start-up files so no user alias or function
    /// changes what the classified words mean.
    Shell(String),
    /// A program and its arguments; `argv[0]` is looked up in [`SANDBOX_PATH`]
    /// (or the `PATH` given in [`ExecSpec::env`]) unless it contains a `/`.
    Argv(Vec<String>),
}

/// Whether the sandbox is required: [`SandboxMode::Required`] fails closed
/// ([`run`] returns [`SandboxError::Unsupported`] when Landlock or seccomp
/// cannot be enforced); [`SandboxMode::Off`] runs unconfined but still scrubbed,
/// limited and killable. Defined once in `capstan-protocol`.
pub use capstan_protocol::SandboxMode;

/// Resource limits applied to the command (rlimits, plus pids and memory cgroups
/// when the caller may create them). `None` leaves the inherited limit in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Maximum number of processes/threads. Enforced as `RLIMIT_NPROC`, which the
    /// kernel counts per user *within the user namespace*, so inside our private
    /// user namespace it counts only this task's processes. Without a user
    /// namespace it counts all of the user's processes, so the launcher adds the
    /// user's current count. Root is exempt from `RLIMIT_NPROC`, so for root the
    /// limit is enforced with a pids cgroup instead, when one can be created.
    pub max_processes: Option<u64>,
    /// Largest file the command may write (`RLIMIT_FSIZE`), in bytes.
    pub max_file_size: Option<u64>,
    /// Address space per process (`RLIMIT_AS`), in bytes. Off by default: V8, the
    /// JVM and wasm runtimes reserve far more virtual memory than they use.
    pub max_address_space: Option<u64>,
    /// CPU seconds per process (`RLIMIT_CPU`). Off by default: the wall-clock
    /// timeout already bounds the task.
    pub max_cpu_seconds: Option<u64>,
    /// Memory of the whole task, in bytes: the memory cgroup's `memory.max`
    /// (v2) or `memory.limit_in_bytes` (v1), swap included; the kernel kills
    /// the task's largest process past it, and the outcome says
    /// [`LimitHit::Memory`]. Where no memory cgroup can be created, each
    /// process gets it as `RLIMIT_AS` instead (with a warning). Files in the
    /// private `/tmp` are memory too and count against it.
    pub max_memory: Option<u64>,
    /// Size of the private `/tmp` (a tmpfs), in bytes. Sandbox required only.
    pub tmp_size: u64,
    /// Bytes the command may write to the workspace in total (sandbox
    /// required only): the full size of every file it creates or changes. The
    /// workspace is an overlay whose upper layer is a tmpfs of this size,
    /// copied back when the task ends; past it writes fail with `ENOSPC` and
    /// the outcome says [`LimitHit::WorkspaceQuota`]. `None`: the workspace is
    /// bound directly and writes reach it at once.
    pub workspace_write_quota: Option<u64>,
}

/// Default of [`Limits::max_memory`]: 2 GiB.
pub const DEFAULT_MEMORY: u64 = 2 << 30;
/// Default of [`Limits::tmp_size`]: 512 MiB.
pub const DEFAULT_TMP_SIZE: u64 = 512 << 20;
/// Default of [`Limits::workspace_write_quota`]: 1 GiB.
pub const DEFAULT_WRITE_QUOTA: u64 = 1 << 30;

/// A limit the command ran into. Closed set: the host maps every one to the
/// `resource-limit` failure reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "limit", rename_all = "snake_case")]
pub enum LimitHit {
    /// The kernel killed a process of the task for exceeding
    /// [`Limits::max_memory`].
    Memory {
        /// The limit, in bytes.
        limit_bytes: u64,
    },
    /// The private `/tmp` was full ([`Limits::tmp_size`]).
    Tmp {
        /// The limit, in bytes.
        limit_bytes: u64,
    },
    /// The command wrote its whole workspace quota
    /// ([`Limits::workspace_write_quota`]).
    WorkspaceQuota {
        /// The limit, in bytes.
        limit_bytes: u64,
    },
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b >> 20;
        match self {
            LimitHit::Memory { limit_bytes } => write!(
                f,
                "the command ran out of its {} MiB memory limit and was killed \
                 (raise [sandbox] memory_mb in capstan.toml)",
                mib(*limit_bytes)
            ),
            LimitHit::Tmp { limit_bytes } => write!(
                f,
                "the command filled its private /tmp ({} MiB; raise [sandbox] tmp_mb in capstan.toml)",
                mib(*limit_bytes)
            ),
            LimitHit::WorkspaceQuota { limit_bytes } => write!(
                f,
                "the command wrote its whole {} MiB workspace write quota; further writes failed \
                 (raise [sandbox] write_quota_mb in capstan.toml)",
                mib(*limit_bytes)
            ),
        }
    }
}

/// A sandbox mechanism that [`run`] can be told to treat as missing (see
/// [`UNAVAILABLE_ENV`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Landlock filesystem rules (`landlock`).
    Landlock,
    /// The seccomp system-call filter (`seccomp`).
    Seccomp,
}

/// Environment variable of the *calling* process naming mechanisms to treat as
/// missing, comma-separated (`landlock`, `seccomp`). A hook for tests of the
/// fail-closed path: it can only make [`run`] refuse a required sandbox (and
/// [`check`] report it unavailable), never weaken one.
pub const UNAVAILABLE_ENV: &str = "CAPSTAN_SANDBOX_UNAVAILABLE";

/// The mechanisms [`UNAVAILABLE_ENV`] names (unknown names are ignored: the
/// hook cannot widen anything, so a typo only fails to narrow).
pub(crate) fn unavailable_mechanisms() -> Vec<Mechanism> {
    std::env::var(UNAVAILABLE_ENV)
        .unwrap_or_default()
        .split(',')
        .filter_map(|name| match name.trim() {
            "landlock" => Some(Mechanism::Landlock),
            "seccomp" => Some(Mechanism::Seccomp),
            _ => None,
        })
        .collect()
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_processes: Some(512),
            max_file_size: Some(4 << 30),
            max_address_space: None,
            max_cpu_seconds: None,
            max_memory: Some(DEFAULT_MEMORY),
            tmp_size: DEFAULT_TMP_SIZE,
            workspace_write_quota: Some(DEFAULT_WRITE_QUOTA),
        }
    }
}

/// One command to run in the sandbox.
#[derive(Debug, Clone)]
pub struct ExecSpec {
    /// What to run.
    pub command: Command,
    /// Workspace root: the only host directory the command may write. Must exist;
    /// it is canonicalized again before use.
    pub workspace: PathBuf,
    /// Working directory: the workspace root or a directory inside it (relative
    /// paths are taken from the workspace root). Canonicalized and checked, so a
    /// symlink inside the workspace that points out is refused.
    pub cwd: PathBuf,
    /// Extra environment variables the caller allowed (the profile's env
    /// allowlist), set after the scrubbed defaults; a name given here replaces the
    /// default of the same name.
    pub env: Vec<(String, String)>,
    /// Wall-clock limit. When it passes, every process of the task gets `SIGTERM`,
    /// then `SIGKILL` [`KILL_GRACE`] later.
    pub timeout: Duration,
    /// Per-stream cap in bytes on captured output. Past it the first half and the
    /// last half are kept and the bytes in between are counted and dropped; the
    /// pipes are always drained, so the command never blocks on a full pipe.
    pub output_limit: usize,
    /// `false`: no network at all (network namespace + seccomp socket filter);
    /// `true`: the host's network. Overridden by [`ExecSpec::proxy`]; see
    /// [`Network`] and [`ExecSpec::set_network`].
    pub network: bool,
    /// The egress proxy's Unix socket on the host: when set, the network is
    /// [`Network::Proxy`] whatever [`ExecSpec::network`] says.
    pub proxy: Option<PathBuf>,
    /// Whether the sandbox is required.
    pub mode: SandboxMode,
    /// Resource limits.
    pub limits: Limits,
    /// Extra host paths the command may read (and execute), bound read-only into
    /// its view at the same path. Each must exist; `/` is refused. Secrets of
    /// `/etc` stay masked even when listed.
    pub read: Vec<PathBuf>,
    /// Capture (sandbox required only): an existing, empty directory the
    /// command's writes are staged into instead of reaching the workspace
    /// (see [`changes`]). The workspace is then always the quota overlay
    /// ([`Limits::workspace_write_quota`], or [`DEFAULT_WRITE_QUOTA`] when
    /// unset) and [`ExecOutcome::changes`] says what the command changed;
    /// nothing lands until the caller lands it.
    pub capture: Option<PathBuf>,
    /// The workspace is mounted read-only (sandbox required only): no write
    /// reaches it, by any path or program (`EROFS`), so there is no layer to
    /// mount and nothing to capture ([`ExecSpec::capture`] and the write
    /// quota are ignored). For commands judged read-only, so that the
    /// judgement is enforced rather than trusted. Default `false`.
    pub workspace_read_only: bool,
    /// Bench only: the whole host read-only instead of the allowlist view.
    #[cfg(feature = "bench-whole-host")]
    pub whole_host_view: bool,
}

impl ExecSpec {
    /// A spec with the defaults: cwd = workspace, 10 minute timeout, 1 MiB of
    /// output per stream, no network, sandbox required, default limits.
    pub fn new(command: Command, workspace: impl Into<PathBuf>) -> Self {
        let workspace = workspace.into();
        ExecSpec {
            command,
            cwd: workspace.clone(),
            workspace,
            env: Vec::new(),
            timeout: Duration::from_secs(600),
            output_limit: 1 << 20,
            network: false,
            proxy: None,
            mode: SandboxMode::Required,
            limits: Limits::default(),
            read: Vec::new(),
            capture: None,
            workspace_read_only: false,
            #[cfg(feature = "bench-whole-host")]
            whole_host_view: false,
        }
    }
}

impl ExecSpec {
    /// The command's network, from [`ExecSpec::network`] and
    /// [`ExecSpec::proxy`].
    pub fn network_mode(&self) -> Network {
        match (&self.proxy, self.network) {
            (Some(socket), _) => Network::Proxy {
                socket: socket.clone(),
            },
            (None, true) => Network::Full,
            (None, false) => Network::Off,
        }
    }

    /// Sets the command's network.
    pub fn set_network(&mut self, network: Network) {
        (self.network, self.proxy) = match network {
            Network::Off => (false, None),
            Network::Full => (true, None),
            Network::Proxy { socket } => (false, Some(socket)),
        };
    }
}

/// The command's network.
///
/// `Proxy`: the command keeps its own network namespace (no route out, only
/// loopback up), in which a forwarder started by the sandbox listens on
/// `127.0.0.1:`[`PROXY_PORT`] and relays every connection to the egress
/// proxy's Unix socket on the host; the command gets the proxy variables
/// ([`proxy_env`]). seccomp allows it `AF_INET`/`AF_INET6` sockets (no raw
/// ones) and Landlock (ABI 4+) lets it connect to that one TCP port only, so
/// `--noproxy`, DNS and raw sockets reach nothing. Needs
/// [`SandboxMode::Required`]: with the sandbox off the proxy cannot be
/// enforced and [`run`] refuses the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Network {
    /// No network at all.
    Off,
    /// Only through the egress proxy listening on `socket` (a Unix socket on
    /// the host).
    Proxy {
        /// Path of the proxy's Unix socket on the host.
        socket: PathBuf,
    },
    /// The host's network.
    Full,
}

impl From<bool> for Network {
    fn from(on: bool) -> Network {
        if on { Network::Full } else { Network::Off }
    }
}

/// The port the forwarder listens on inside the command's network namespace
/// (`127.0.0.1` there is not the host's).
pub const PROXY_PORT: u16 = 3128;

/// The variables that point a command's tools at the proxy bridge: the
/// generic ones (curl, wget, git, pip, Go, apt read the lowercase ones; many
/// others the uppercase), `ALL_PROXY` as `socks5h://` so that clients that
/// speak only SOCKS let the proxy resolve names, an empty `NO_PROXY` (nothing
/// bypasses it, and a bypass would reach nothing anyway), and the tool-specific
/// ones: npm and pnpm (`npm_config_proxy`, `npm_config_https_proxy`), yarn 2+
/// (`YARN_HTTP_PROXY`, `YARN_HTTPS_PROXY`), pip (`PIP_PROXY`), cargo
/// (`CARGO_HTTP_PROXY`) and Node 24+'s own fetch (`NODE_USE_ENV_PROXY`).
pub fn proxy_env() -> Vec<(String, String)> {
    let http = format!("http://127.0.0.1:{PROXY_PORT}");
    let socks = format!("socks5h://127.0.0.1:{PROXY_PORT}");
    [
        ("HTTP_PROXY", &http),
        ("HTTPS_PROXY", &http),
        ("http_proxy", &http),
        ("https_proxy", &http),
        ("ALL_PROXY", &socks),
        ("all_proxy", &socks),
        ("NO_PROXY", &String::new()),
        ("no_proxy", &String::new()),
        ("npm_config_proxy", &http),
        ("npm_config_https_proxy", &http),
        ("YARN_HTTP_PROXY", &http),
        ("YARN_HTTPS_PROXY", &http),
        ("PIP_PROXY", &http),
        ("CARGO_HTTP_PROXY", &http),
        ("NODE_USE_ENV_PROXY", &"1".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.clone()))
    .collect()
}

/// How the command ended and what it printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecOutcome {
    /// Exit code, when the command exited normally.
    pub exit_code: Option<i32>,
    /// Signal number, when the command was killed by a signal.
    pub signal: Option<i32>,
    /// Captured standard output (lossy UTF-8); when over the limit, head and tail
    /// separated by a `[... N bytes dropped ...]` line.
    pub stdout: String,
    /// Captured standard error, same format as `stdout`.
    pub stderr: String,
    /// Bytes dropped from both streams together.
    pub truncated_bytes: u64,
    /// Wall-clock time from start to the end of the last process.
    pub duration: Duration,
    /// The timeout passed and the task was killed.
    pub timed_out: bool,
    /// The cancellation token fired and the task was killed.
    pub cancelled: bool,
    /// Degradations the sandbox accepted (e.g. Landlock only partially enforced,
    /// no memory cgroup); also logged with `tracing::warn!`.
    pub warnings: Vec<String>,
    /// A resource limit the command ran into, if any.
    pub limit_hit: Option<LimitHit>,
    /// Capture on: what the command changed (staged, not landed).
    pub changes: Option<changes::ChangeSet>,
}

impl ExecOutcome {
    /// True when the command exited with code 0 and was neither killed, timed out
    /// nor cancelled.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled
    }
}

/// Why a command could not be run. Each message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A mechanism the required sandbox depends on is missing on this machine.
    #[error("sandbox unavailable: {what}; {hint}")]
    Unsupported {
        /// What is missing.
        what: String,
        /// What the user can do.
        hint: String,
    },
    /// The working directory is not inside the workspace.
    #[error(
        "working directory {cwd} is outside the workspace {workspace}; use a directory inside the workspace"
    )]
    CwdOutsideWorkspace {
        /// The requested working directory (resolved).
        cwd: PathBuf,
        /// The workspace root.
        workspace: PathBuf,
    },
    /// The workspace is not an existing directory.
    #[error("workspace {path} is not an existing directory: {source}")]
    Workspace {
        /// The workspace given.
        path: PathBuf,
        /// Why it was refused.
        source: std::io::Error,
    },
    /// The command or environment cannot be passed to `execve`.
    #[error("invalid command: {0}")]
    InvalidCommand(String),
    /// The per-task directory could not be created.
    #[error("cannot create the per-task directory: {0}")]
    TaskDir(std::io::Error),
    /// An extra read path cannot be used.
    #[error("sandbox read path {path}: {why}; fix [sandbox] read in capstan.toml")]
    ReadPath {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The launcher could not be started.
    #[error(
        "cannot start the sandbox launcher {path}: {source}; check the path given to capstan_sandbox::set_launcher"
    )]
    Spawn {
        /// The launcher executable.
        path: PathBuf,
        /// The error from `spawn`.
        source: std::io::Error,
    },
    /// The launcher failed before the command started.
    #[error("sandbox launcher failed: {0}")]
    Launcher(String),
    /// Talking to the launcher failed.
    #[error("i/o error while supervising the command: {0}")]
    Io(#[from] std::io::Error),
}

/// The hint given with every [`SandboxError::Unsupported`].
pub const UNSUPPORTED_HINT: &str =
    "set sandbox = \"off\" in the workspace profile to run unsandboxed";

/// The launcher executable, held open from the moment it is named: the file
/// may be replaced or deleted later (a package upgrade, a rebuild) and the
/// launcher still starts, from this descriptor (`/proc/self/fd/N`), as the same
/// binary as the running process.
struct LauncherExe {
    /// The path it was named by, for messages.
    shown: PathBuf,
    file: std::io::Result<std::fs::File>,
}

static LAUNCHER: RwLock<Option<Arc<LauncherExe>>> = RwLock::new(None);

/// See [`hide_from_every_view`].
static HIDDEN: RwLock<Vec<PathBuf>> = RwLock::new(Vec::new());

/// Hides these host directories from the view of every command this process
/// runs confined, whoever starts it ([`run`], [`spawn_stdio`]): each one the
/// view would show (it lies under a system directory the view binds, such as
/// `/opt` or `/etc`) is covered by an empty, unreadable, read-only tmpfs.
/// The host passes its own config, data and cache directories, so no command
/// reads another workspace's kept versions, the store or the user's grants
/// wherever Capstan's home is. Directories that do not exist when a command
/// starts are skipped; replaces what an earlier call set.
pub fn hide_from_every_view(dirs: Vec<PathBuf>) {
    *HIDDEN.write().unwrap_or_else(|e| e.into_inner()) = dirs;
}

fn hold(shown: PathBuf, open: &Path) -> Arc<LauncherExe> {
    Arc::new(LauncherExe {
        shown,
        file: std::fs::File::open(open),
    })
}

/// Names the executable that [`run`] starts as the launcher, and opens it now.
/// It must call [`maybe_run_launcher`] (or [`launcher_main`]) first thing.
/// Defaults to the running executable, opened by [`maybe_run_launcher`].
pub fn set_launcher(path: impl Into<PathBuf>) {
    // A named launcher is executed; a zygote would fork this binary's.
    zygote::forget();
    let path = path.into();
    let exe = hold(path.clone(), &path);
    *LAUNCHER.write().unwrap_or_else(|e| e.into_inner()) = Some(exe);
}

/// The running executable, held open (through `/proc/self/exe`, which still
/// names the right file after it was replaced on disk).
fn hold_current_exe() -> Arc<LauncherExe> {
    let shown = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    hold(shown, Path::new("/proc/self/exe"))
}

fn launcher_exe() -> Arc<LauncherExe> {
    if let Some(exe) = LAUNCHER.read().unwrap_or_else(|e| e.into_inner()).clone() {
        return exe;
    }
    let mut slot = LAUNCHER.write().unwrap_or_else(|e| e.into_inner());
    slot.get_or_insert_with(hold_current_exe).clone()
}

/// Turns this process into the sandbox launcher when it was started as one
/// (`argv[1] == "__capstan_sandbox_launch"`), and returns otherwise, after
/// opening its own executable (so that replacing the binary on disk later does
/// not break the sandbox of a running server).
///
/// Call it first thing in `main`, before any thread exists: the launcher forks,
/// and refuses to run if the process already has more than one thread.
pub fn maybe_run_launcher() {
    if std::env::args_os().nth(1).is_some_and(|a| a == LAUNCH_FLAG) {
        launcher_main();
    }
    let mut slot = LAUNCHER.write().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        *slot = Some(hold_current_exe());
    }
}

/// Runs `spec` in the sandbox and waits for it (and all its descendants) to end.
///
/// Returns `Ok` for any way the command ends (non-zero exit, signal, timeout,
/// cancellation); `Err` only when it could not be started as asked. If the
/// returned future is dropped early, the launcher notices that its control socket
/// closed and kills the whole task.
pub async fn run(spec: ExecSpec, cancel: CancellationToken) -> Result<ExecOutcome, SandboxError> {
    let prepared = prepare(&spec)?;
    let exe = launcher_exe();
    let file = exe.file.as_ref().map_err(|e| SandboxError::Spawn {
        path: exe.shown.clone(),
        source: std::io::Error::new(e.kind(), e.to_string()),
    })?;
    let launcher = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let mut result = supervise(&spec, &prepared, &launcher, &exe.shown, cancel).await;
    if let (Ok(outcome), Some(staging)) = (&mut result, &prepared.config.capture) {
        let (ws, staging) = (prepared.config.workspace.clone(), staging.clone());
        match tokio::task::spawn_blocking(move || changes::classify(&ws, &staging)).await {
            Ok(Ok(set)) => outcome.changes = Some(set),
            Ok(Err(e)) => outcome
                .warnings
                .push(format!("the command's changes could not be read: {e}")),
            Err(e) => outcome
                .warnings
                .push(format!("the command's changes could not be read: {e}")),
        }
    }
    // Only now, with every process of the task gone, remove what it could write
    // (off the async threads: the per-task directory may be large).
    let mut leftovers = prepared.leftovers;
    if !leftovers.clean_if_empty() {
        let _ = tokio::task::spawn_blocking(move || leftovers.clean()).await;
    }
    result
}

struct Prepared {
    config: launcher::LaunchConfig,
    leftovers: Leftovers,
}

/// What a task leaves on the host: its private directory and its cgroups (which
/// the launcher normally removes itself). Removed by [`Leftovers::clean`] once the task has ended; if the
/// `run` future is dropped before that, `Drop` removes them from a thread after
/// the launcher has had time to kill the task (it notices the closed control
/// socket), so nothing is removed under a live process and nothing leaks.
struct Leftovers {
    task_dir: Option<tempfile::TempDir>,
    cgroup: Option<cgroup::TaskCgroup>,
}

impl Leftovers {
    fn clean(mut self) {
        self.clean_now();
    }

    /// The common case, cheap enough for an async thread: the command left its
    /// private directories empty, so a few `rmdir`s remove everything.
    fn clean_if_empty(&mut self) -> bool {
        let Some(dir) = &self.task_dir else {
            return true;
        };
        let base = dir.path();
        // `root` (the view's mount point, empty once the namespace is gone) or
        // `home` and `tmp` (sandbox off).
        let empty = TASK_SUBDIRS.iter().all(|d| {
            std::fs::remove_dir(base.join(d))
                .map_or_else(|e| e.kind() == std::io::ErrorKind::NotFound, |()| true)
        }) && std::fs::remove_dir(base).is_ok();
        if !empty {
            return false;
        }
        // Already gone: keep TempDir's drop from trying again.
        let _ = self.task_dir.take().map(tempfile::TempDir::keep);
        match &self.cgroup {
            Some(cg) if !cg.try_remove() => false,
            _ => {
                self.cgroup = None;
                true
            }
        }
    }

    fn clean_now(&mut self) {
        if let Some(cg) = self.cgroup.take() {
            cg.remove_blocking();
        }
        if let Some(dir) = self.task_dir.take() {
            remove_task_dir(dir);
        }
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        if self.task_dir.is_none() && self.cgroup.is_none() {
            return;
        }
        let mut rest = Leftovers {
            task_dir: self.task_dir.take(),
            cgroup: self.cgroup.take(),
        };
        let _ = std::thread::Builder::new()
            .name("capstan-sandbox-cleanup".into())
            .spawn(move || {
                std::thread::sleep(KILL_GRACE + Duration::from_secs(3));
                rest.clean_now();
            });
    }
}

/// Checks the spec and builds the launcher configuration. Nothing is started.
fn prepare(spec: &ExecSpec) -> Result<Prepared, SandboxError> {
    let workspace =
        std::fs::canonicalize(&spec.workspace).map_err(|source| SandboxError::Workspace {
            path: spec.workspace.clone(),
            source,
        })?;
    if !workspace.is_dir() {
        return Err(SandboxError::Workspace {
            path: spec.workspace.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
        });
    }
    let cwd = resolve_cwd(&workspace, &spec.cwd)?;

    let argv = match &spec.command {
        Command::Shell(line) => vec![
            "/bin/bash".to_owned(),
            "--noprofile".to_owned(),
            "--norc".to_owned(),
            "-c".to_owned(),
            line.clone(),
        ],
        Command::Argv(argv) if argv.is_empty() => {
            return Err(SandboxError::InvalidCommand("empty argv".into()));
        }
        Command::Argv(argv) => argv.clone(),
    };
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(SandboxError::InvalidCommand(
            "an argument contains a NUL byte".into(),
        ));
    }
    for (k, v) in &spec.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(SandboxError::InvalidCommand(format!(
                "invalid environment variable name or value: {k:?}"
            )));
        }
    }

    let confine = spec.mode == SandboxMode::Required;
    let proxy = match spec.network_mode() {
        Network::Proxy { socket } => {
            if !confine {
                return Err(SandboxError::Unsupported {
                    what: "the network policy (egress proxy) cannot be enforced without the sandbox"
                        .into(),
                    hint: "remove sandbox = \"off\" from the workspace profile, or the [network] policy to \
                           run unsandboxed with the host's network"
                        .into(),
                });
            }
            use std::os::unix::fs::FileTypeExt;
            match std::fs::metadata(&socket) {
                Ok(m) if m.file_type().is_socket() => {}
                _ => {
                    return Err(SandboxError::Unsupported {
                        what: format!(
                            "the egress proxy socket {} does not exist or is not a socket",
                            socket.display()
                        ),
                        hint: "start the egress proxy before the command (capstan does this \
                               when [network] has a policy)"
                            .into(),
                    });
                }
            }
            Some(launcher::ProxyBridge {
                socket,
                port: PROXY_PORT,
            })
        }
        _ => None,
    };
    let read = if confine {
        spec.read
            .iter()
            .map(|p| resolve_read_path(p))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };

    let hide = if confine {
        HIDDEN
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect()
    } else {
        Vec::new()
    };

    let task_dir = tempfile::Builder::new()
        .prefix("capstan-task-")
        .tempdir_in(task_parent(confine))
        .map_err(SandboxError::TaskDir)?;
    // Confined: HOME and TMPDIR live in the view's private /tmp; the host
    // directory is only the view's mount point. Off: they are host directories.
    let (home, tmp) = if confine {
        std::fs::create_dir(task_dir.path().join("root")).map_err(SandboxError::TaskDir)?;
        (PathBuf::from(view::HOME), PathBuf::from(view::TMP))
    } else {
        let (home, tmp) = (task_dir.path().join("home"), task_dir.path().join("tmp"));
        for d in [&home, &tmp] {
            std::fs::create_dir(d).map_err(SandboxError::TaskDir)?;
        }
        (home, tmp)
    };

    let mut env = scrubbed_env(&home, &tmp, &spec.env);
    if proxy.is_some() {
        // After the caller's variables: the bridge is the only way out, and
        // a variable pointing elsewhere would only break the command.
        for (k, v) in proxy_env() {
            env.retain(|(name, _)| *name != k);
            env.push((k, v));
        }
    }
    let cgroup = cgroup::TaskCgroup::create(spec.limits.max_processes, spec.limits.max_memory);
    let read_only = confine && spec.workspace_read_only;
    let capture = match (&spec.capture, confine && !read_only) {
        (Some(dir), true) => Some(std::fs::canonicalize(dir).map_err(SandboxError::TaskDir)?),
        _ => None,
    };
    let mut limits = spec.limits.clone();
    if read_only {
        limits.workspace_write_quota = None;
    } else if capture.is_some() {
        limits.workspace_write_quota =
            Some(limits.workspace_write_quota.unwrap_or(DEFAULT_WRITE_QUOTA));
    }
    let config = launcher::LaunchConfig {
        argv,
        env,
        cwd,
        workspace,
        task_dir: task_dir.path().to_path_buf(),
        network: spec.network && proxy.is_none(),
        proxy,
        confine,
        limits,
        capture,
        workspace_read_only: read_only,
        grace_ms: KILL_GRACE.as_millis() as u64,
        cgroup: cgroup.clone(),
        read,
        hide,
        unavailable: unavailable_mechanisms(),
        #[cfg(feature = "bench-whole-host")]
        whole_host_view: spec.whole_host_view,
    };
    Ok(Prepared {
        config,
        leftovers: Leftovers {
            task_dir: Some(task_dir),
            cgroup: (!cgroup.dirs.is_empty()).then_some(cgroup),
        },
    })
}

/// Where the per-task directory goes. Confined, it holds mount points only
/// (the view's root and, with the write quota, the quota's tmpfs and the
/// id-mapped lower layer): on a tmpfs (`/dev/shm`) they cost nothing to
/// create and remove, where on a disk each removed directory can cost a
/// synchronous discard (ext4 mounted with `discard` and no journal: 0.6 to
/// 1 ms per `rmdir` measured on the bench VM, more while the disk is busy;
/// a captured command removes four: the task directory, `root`, `quota` and
/// `lower`). With the sandbox off it holds the command's home and TMPDIR,
/// real files: the system's temporary directory.
fn task_parent(confine: bool) -> PathBuf {
    const SHM: &str = "/dev/shm";
    let shm_usable = || {
        nix::sys::statfs::statfs(SHM)
            .is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
            && nix::unistd::access(
                SHM,
                nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
            )
            .is_ok()
    };
    if confine && shm_usable() {
        PathBuf::from(SHM)
    } else {
        std::env::temp_dir()
    }
}

/// Subdirectories [`prepare`] may create in the per-task directory.
const TASK_SUBDIRS: &[&str] = &["root", "quota", "lower", "home", "tmp"];

/// An extra read path: absolute, existing, canonical, and not `/` (which would
/// hand the whole host back).
fn resolve_read_path(p: &Path) -> Result<PathBuf, SandboxError> {
    let err = |why: String| SandboxError::ReadPath {
        path: p.to_path_buf(),
        why,
    };
    if !p.is_absolute() {
        return Err(err("it must be an absolute path".into()));
    }
    let real = std::fs::canonicalize(p).map_err(|e| err(e.to_string()))?;
    if real == Path::new("/") {
        return Err(err("the whole filesystem cannot be a read path".into()));
    }
    Ok(real)
}

/// Resolves `cwd` (relative to the workspace when relative) and refuses anything
/// that does not end up inside the workspace after following symlinks.
fn resolve_cwd(workspace: &Path, cwd: &Path) -> Result<PathBuf, SandboxError> {
    let joined = if cwd.is_absolute() {
        cwd.to_path_buf()
    } else {
        workspace.join(cwd)
    };
    let resolved =
        std::fs::canonicalize(&joined).map_err(|_| SandboxError::CwdOutsideWorkspace {
            cwd: joined.clone(),
            workspace: workspace.to_path_buf(),
        })?;
    if !resolved.starts_with(workspace) || !resolved.is_dir() {
        return Err(SandboxError::CwdOutsideWorkspace {
            cwd: resolved,
            workspace: workspace.to_path_buf(),
        });
    }
    Ok(resolved)
}

/// The whole environment of the command: fixed defaults, then the caller's
/// allowed variables (replacing defaults of the same name). Nothing is inherited.
fn scrubbed_env(home: &Path, tmp: &Path, extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), SANDBOX_PATH.into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("LC_ALL".into(), "C.UTF-8".into()),
        ("TERM".into(), "dumb".into()),
        ("HOME".into(), home.to_string_lossy().into_owned()),
        ("TMPDIR".into(), tmp.to_string_lossy().into_owned()),
    ];
    for (k, v) in extra {
        env.retain(|(name, _)| name != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

/// Removes the per-task directory even if the command left read-only
/// directories in it.
fn remove_task_dir(dir: tempfile::TempDir) {
    let path = dir.path().to_path_buf();
    if dir.close().is_ok() {
        return;
    }
    fn make_writable(p: &Path) {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::symlink_metadata(p)
            && meta.is_dir()
        {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    make_writable(&e.path());
                }
            }
        }
    }
    make_writable(&path);
    if let Err(e) = std::fs::remove_dir_all(&path) {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove the per-task directory");
    }
}

/// Why the supervision loop stopped waiting for a natural end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    Finished,
    TimedOut,
    Cancelled,
}

async fn supervise(
    spec: &ExecSpec,
    prepared: &Prepared,
    launcher: &Path,
    shown: &Path,
    cancel: CancellationToken,
) -> Result<ExecOutcome, SandboxError> {
    let (ours, theirs) = StdUnixStream::pair()?;
    // The configuration fits in the socket buffer, so it can be written before
    // the launcher exists: no round trip on the start-up path.
    let payload = serde_json::to_vec(&prepared.config)
        .map_err(|e| SandboxError::Launcher(format!("cannot encode configuration: {e}")))?;
    let mut framed = Vec::with_capacity(payload.len() + 4);
    framed.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    framed.extend_from_slice(&payload);
    (&ours).write_all(&framed)?;
    ours.set_nonblocking(true)?;

    let started = Instant::now();
    let theirs = OwnedFd::from(theirs);
    let (out_read, out_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    let (err_read, err_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    let mut child = match zygote::spawn(&theirs, &out_write, &err_write) {
        Ok(forked) => {
            drop((theirs, out_write, err_write));
            Launcher::Forked {
                pid: forked.pid,
                // SAFETY: an OwnedFd's fd is open, and stays the same fd, for as
                // long as the AsyncFd owns it.
                exited: unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        forked.pidfd,
                        tokio::io::Interest::READABLE,
                    )
                }
                .map_err(std::io::Error::from)?,
            }
        }
        Err(zygote::NotForked::Failed(message)) => return Err(SandboxError::Launcher(message)),
        Err(zygote::NotForked::Absent) => Launcher::Executed(
            tokio::process::Command::new(launcher)
                .arg(LAUNCH_FLAG)
                .env_clear()
                .stdin(Stdio::from(theirs))
                .stdout(Stdio::from(out_write))
                .stderr(Stdio::from(err_write))
                // Our own process group: the last-resort SIGKILL reaches the
                // launcher and the namespace init at once.
                .process_group(0)
                .spawn()
                .map_err(|source| SandboxError::Spawn {
                    path: shown.to_path_buf(),
                    source,
                })?,
        ),
    };
    // Our copies of the launcher's ends are closed by now (moved into the spawn,
    // or dropped with the zygote's request), so the pipes end when it does.
    let pgid = child.pgid();

    let limit = spec.output_limit;
    let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(out_read)?;
    let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(err_read)?;
    let out_task = tokio::spawn(output::capture(stdout, limit));
    let err_task = tokio::spawn(output::capture(stderr, limit));

    let (read_half, mut write_half) = tokio::net::UnixStream::from_std(ours)?.into_split();
    let report_task = tokio::spawn(async move {
        let mut reports = Vec::new();
        let mut lines = BufReader::new(read_half).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<launcher::Report>(&line) {
                Ok(r) => reports.push(r),
                Err(e) => reports.push(launcher::Report::Failed {
                    message: format!("unreadable report {line:?}: {e}"),
                }),
            }
        }
        reports
    });

    // A timeout too large to represent means no timeout.
    let deadline = started
        .checked_add(spec.timeout)
        .unwrap_or_else(|| started + Duration::from_secs(100 * 365 * 24 * 3600));
    let deadline = tokio::time::Instant::from_std(deadline);
    let stop = tokio::select! {
        ended = child.wait() => { ended?; Stop::Finished }
        _ = tokio::time::sleep_until(deadline) => Stop::TimedOut,
        _ = cancel.cancelled() => Stop::Cancelled,
    };
    let mut hard_killed = false;
    if stop != Stop::Finished {
        // Ask the supervisor in the launcher to terminate the task: SIGTERM to
        // every process, SIGKILL after the grace period. It notices EOF on its
        // control socket.
        let _ = write_half.shutdown().await;
        // Beyond the grace period, init copies the workspace quota's upper
        // layer back (up to the quota's size), hence the generous bound.
        let hard = tokio::time::sleep(KILL_GRACE + Duration::from_secs(20));
        tokio::select! {
            ended = child.wait() => { ended?; }
            _ = hard => {
                // The launcher did not finish in time: kill its process group (the
                // launcher and the namespace init); the kernel then kills the rest
                // of the PID namespace.
                hard_killed = true;
                if let Some(pgid) = pgid {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pgid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                child.wait().await?;
            }
        }
    }
    let launcher_status = child.wait().await?;
    drop(write_half);

    // Every writer of the pipes is gone once the launcher has exited (the PID
    // namespace or the subreaper took its descendants with it); the bound only
    // guards against a process that escaped both, which would be a bug.
    let bound = Duration::from_secs(5);
    let (out, err) = (
        join_capture(out_task, bound).await,
        join_capture(err_task, bound).await,
    );
    let reports = tokio::time::timeout(bound, report_task)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let duration = started.elapsed();

    let mut outcome = ExecOutcome {
        exit_code: None,
        signal: None,
        truncated_bytes: out.dropped + err.dropped,
        stdout: out.render(),
        stderr: err.render(),
        duration,
        timed_out: stop == Stop::TimedOut,
        cancelled: stop == Stop::Cancelled,
        warnings: Vec::new(),
        limit_hit: None,
        changes: None,
    };
    let mut failure = None;
    for report in reports {
        match report {
            launcher::Report::Warning { message } => {
                tracing::warn!(target: "capstan_sandbox", "{message}");
                outcome.warnings.push(message);
            }
            launcher::Report::Unsupported { what } => {
                failure.get_or_insert(SandboxError::Unsupported {
                    what,
                    hint: UNSUPPORTED_HINT.into(),
                });
            }
            launcher::Report::Failed { message } => {
                failure.get_or_insert(SandboxError::Launcher(message));
            }
            launcher::Report::Exited { code } => outcome.exit_code = Some(code),
            launcher::Report::Signaled { signal } => outcome.signal = Some(signal),
            launcher::Report::LimitHit { limit } => {
                outcome.limit_hit.get_or_insert(limit);
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    if outcome.exit_code.is_none() && outcome.signal.is_none() {
        if hard_killed || stop != Stop::Finished {
            outcome.signal = Some(libc::SIGKILL);
        } else {
            let stderr_tail: String = outcome.stderr.chars().take(500).collect();
            return Err(SandboxError::Launcher(format!(
                "the launcher {} ended ({launcher_status}) without reporting how the command ended; \
                 does that binary call capstan_sandbox::maybe_run_launcher() first thing in main? {stderr_tail}",
                shown.display()
            )));
        }
    }
    Ok(outcome)
}

/// The launcher process of one command: executed by us, or forked by the zygote.
enum Launcher {
    Executed(tokio::process::Child),
    Forked {
        pid: i32,
        /// The launcher's pidfd: readable once it has exited.
        exited: tokio::io::unix::AsyncFd<OwnedFd>,
    },
}

impl Launcher {
    /// Its process group (it leads one of its own).
    fn pgid(&self) -> Option<i32> {
        match self {
            Launcher::Executed(child) => child.id().map(|p| p as i32),
            Launcher::Forked { pid, .. } => Some(*pid),
        }
    }

    /// Waits for it to exit (cancel-safe); says how it ended, for messages. A
    /// forked launcher is the zygote's child, reaped there: its status is not ours
    /// to read.
    async fn wait(&mut self) -> std::io::Result<String> {
        match self {
            Launcher::Executed(child) => child.wait().await.map(|status| status.to_string()),
            Launcher::Forked { exited, .. } => {
                let _ready = exited.readable().await?;
                Ok("exited".into())
            }
        }
    }
}

async fn join_capture(
    task: tokio::task::JoinHandle<output::Captured>,
    bound: Duration,
) -> output::Captured {
    let abort = task.abort_handle();
    match tokio::time::timeout(bound, task).await {
        Ok(Ok(c)) => c,
        _ => {
            abort.abort();
            output::Captured::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_is_scrubbed_and_extra_overrides() {
        let env = scrubbed_env(
            Path::new("/h"),
            Path::new("/t"),
            &[
                ("LANG".into(), "en_US.UTF-8".into()),
                ("X".into(), "1".into()),
            ],
        );
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some(SANDBOX_PATH));
        assert_eq!(get("HOME"), Some("/h"));
        assert_eq!(get("TMPDIR"), Some("/t"));
        assert_eq!(get("LANG"), Some("en_US.UTF-8"));
        assert_eq!(get("X"), Some("1"));
        assert_eq!(env.iter().filter(|(n, _)| n == "LANG").count(), 1);
    }

    #[test]
    fn unsupported_error_says_what_to_do() {
        let e = SandboxError::Unsupported {
            what: "Landlock is not available".into(),
            hint: UNSUPPORTED_HINT.into(),
        };
        assert_eq!(
            e.to_string(),
            "sandbox unavailable: Landlock is not available; set sandbox = \"off\" in the \
             workspace profile to run unsandboxed"
        );
    }

    #[test]
    fn cwd_must_stay_inside_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let ws_path = std::fs::canonicalize(ws.path()).unwrap();
        std::fs::create_dir(ws_path.join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc", ws_path.join("out")).unwrap();
        assert_eq!(
            resolve_cwd(&ws_path, Path::new("sub")).unwrap(),
            ws_path.join("sub")
        );
        assert!(resolve_cwd(&ws_path, Path::new("..")).is_err());
        assert!(resolve_cwd(&ws_path, Path::new("out")).is_err());
        assert!(resolve_cwd(&ws_path, Path::new("/etc")).is_err());
        assert!(resolve_cwd(&ws_path, Path::new("missing")).is_err());
    }
}
