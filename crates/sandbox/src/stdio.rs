//! A long-lived sandboxed command that talks over its standard input and
//! output (an MCP server): the same launcher, view, identity, limits,
//! Landlock, seccomp and network as [`crate::run`], with no timeout and
//! nothing captured. The caller writes the command's stdin and reads its
//! stdout and stderr; dropping the [`StdioTask`] ends the whole task (the
//! launcher sees its control socket close and kills every process of it).
//!
//! The launcher is started as `<exe> __capstan_sandbox_launch --stdin-fd=N`
//! with the read end of a pipe on its fd N, which becomes the command's
//! stdin (instead of `/dev/null`); the control socket is its stdin as for
//! [`crate::run`].

use std::io::Write as _;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncBufReadExt as _;

use crate::{ExecSpec, LAUNCH_FLAG, Leftovers, SandboxError, launcher};

/// A running sandboxed command with its standard streams.
pub struct StdioTask {
    /// The command's standard input.
    pub stdin: Option<tokio::net::unix::pipe::Sender>,
    /// The command's standard output.
    pub stdout: Option<tokio::process::ChildStdout>,
    /// The command's standard error.
    pub stderr: Option<tokio::process::ChildStderr>,
    child: tokio::process::Child,
    /// Dropping it (EOF on the control socket) makes the launcher end the task.
    control: Option<tokio::net::unix::OwnedWriteHalf>,
    reports: Option<tokio::task::JoinHandle<Vec<launcher::Report>>>,
    _leftovers: Leftovers,
    /// Degradations the sandbox accepted, once [`StdioTask::failure`] read them.
    pub warnings: Vec<String>,
}

/// Starts `spec` in the sandbox with piped standard streams; `spec.timeout`
/// and `spec.output_limit` do not apply. Returns as soon as the launcher
/// runs: a sandbox that cannot be set up ends the task, and
/// [`StdioTask::failure`] then says why.
pub async fn spawn_stdio(spec: ExecSpec) -> Result<StdioTask, SandboxError> {
    let prepared = crate::prepare(&spec)?;
    let exe = crate::launcher_exe();
    let file = exe.file.as_ref().map_err(|e| SandboxError::Spawn {
        path: exe.shown.clone(),
        source: std::io::Error::new(e.kind(), e.to_string()),
    })?;
    let launcher_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));

    let (ours, theirs) = StdUnixStream::pair()?;
    let payload = serde_json::to_vec(&prepared.config)
        .map_err(|e| SandboxError::Launcher(format!("cannot encode configuration: {e}")))?;
    let mut framed = Vec::with_capacity(payload.len() + 4);
    framed.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    framed.extend_from_slice(&payload);
    (&ours).write_all(&framed)?;
    ours.set_nonblocking(true)?;

    let (stdin_r, stdin_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SandboxError::Io(e.into()))?;
    let stdin_fd = stdin_r.as_raw_fd();
    let mut cmd = tokio::process::Command::new(&launcher_path);
    cmd.arg(LAUNCH_FLAG)
        .arg(format!("{}{stdin_fd}", launcher::STDIN_FD_FLAG))
        .env_clear()
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // The pipe keeps its number (no dup2 onto a fixed one, which could be the
    // launcher executable's own descriptor) and only loses close-on-exec.
    // SAFETY: only an async-signal-safe call (fcntl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(stdin_fd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| SandboxError::Spawn {
        path: exe.shown.clone(),
        source,
    })?;
    drop(stdin_r);
    let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin_w)?;

    let (read_half, write_half) = tokio::net::UnixStream::from_std(ours)?.into_split();
    let reports = tokio::spawn(async move {
        let mut reports = Vec::new();
        let mut lines = tokio::io::BufReader::new(read_half).lines();
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
    Ok(StdioTask {
        stdin: Some(stdin),
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        child,
        control: Some(write_half),
        reports: Some(reports),
        _leftovers: prepared.leftovers,
        warnings: Vec::new(),
    })
}

impl StdioTask {
    /// Why the task could not start or ended early: waits up to `bound` for
    /// the launcher to exit, then reads its reports. `None` when it is still
    /// running or the command itself ran and exited.
    pub async fn failure(&mut self, bound: Duration) -> Option<SandboxError> {
        if tokio::time::timeout(bound, self.child.wait())
            .await
            .is_err()
        {
            return None;
        }
        let reports = match self.reports.take() {
            Some(task) => tokio::time::timeout(bound, task)
                .await
                .ok()
                .and_then(|r| r.ok())
                .unwrap_or_default(),
            None => return None,
        };
        let mut failure = None;
        for report in reports {
            match report {
                launcher::Report::Warning { message } => self.warnings.push(message),
                launcher::Report::Unsupported { what } => {
                    failure.get_or_insert(SandboxError::Unsupported {
                        what,
                        hint: crate::UNSUPPORTED_HINT.into(),
                    });
                }
                launcher::Report::Failed { message } => {
                    failure.get_or_insert(SandboxError::Launcher(message));
                }
                _ => {}
            }
        }
        failure
    }

    /// The launcher's process id (its process group leads the task).
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }
}

impl Drop for StdioTask {
    fn drop(&mut self) {
        // EOF on the control socket: the launcher terminates every process
        // of the task (SIGTERM, SIGKILL after the grace period); the
        // leftovers are removed after that, from a thread.
        self.control.take();
        self.stdin.take();
    }
}
