//! What this machine supports (`capstan sandbox check`).
//!
//! Namespace support is probed for real: a forked child tries `unshare` and
//! exits. The child makes only async-signal-safe calls, so probing is safe from a
//! multi-threaded caller.

use std::fmt;

use serde::Serialize;

/// The sandbox mechanisms available on this machine and what [`crate::run`] will
/// use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SupportReport {
    /// Landlock ABI version of the kernel; `None`: no Landlock.
    pub landlock_abi: Option<i32>,
    /// seccomp filters (`SECCOMP_RET_ERRNO`) are available.
    pub seccomp: bool,
    /// An unprivileged process can create a user namespace.
    pub user_namespaces: bool,
    /// A PID namespace can be created (through a user namespace, or as root).
    pub pid_namespaces: bool,
    /// A network namespace can be created (same).
    pub net_namespaces: bool,
    /// A mount namespace (for the allowlist filesystem view) can be created
    /// (same).
    pub mount_namespaces: bool,
    /// This process runs as root.
    pub root: bool,
    /// As root: the workspace can be attached as an id-mapped mount (checked on
    /// the temp dir's filesystem), so commands can run as `nobody` and still
    /// write it. `None` when not root (not needed).
    pub idmapped_mounts: Option<bool>,
    /// A pids cgroup can be created (enforces the process limit for root, whom
    /// `RLIMIT_NPROC` does not bind).
    pub cgroup_pids: bool,
    /// A memory cgroup can be created (bounds a task's memory as a whole;
    /// otherwise `RLIMIT_AS` per process).
    pub cgroup_memory: bool,
}

impl SupportReport {
    /// `SandboxMode::Required` can run here (Landlock and seccomp both work).
    pub fn sandbox_available(&self) -> bool {
        self.landlock_abi.is_some()
            && self.seccomp
            && self.pid_namespaces
            && self.mount_namespaces
            && (self.root || self.user_namespaces)
            && self.idmapped_mounts != Some(false)
    }

    /// Who the command runs as.
    pub fn identity(&self) -> String {
        if self.root {
            format!(
                "uid {} / gid {} (nobody; Capstan runs as root), workspace id-mapped",
                crate::SANDBOX_UID,
                crate::SANDBOX_GID
            )
        } else {
            "your own uid, alone in a user namespace, with no capabilities".into()
        }
    }

    /// How cancellation reaches every descendant.
    pub fn lifecycle(&self) -> &'static str {
        match (self.pid_namespaces, self.user_namespaces) {
            (true, true) => "PID namespace (unprivileged, via a user namespace)",
            (true, false) => "PID namespace (privileged: running as root)",
            (false, _) => "child subreaper + /proc walk (fallback: no PID namespace)",
        }
    }

    /// Human-readable remarks about gaps on this machine.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        match self.landlock_abi {
            None => notes.push(format!(
                "Landlock is unavailable: SandboxMode::Required fails; {}",
                crate::UNSUPPORTED_HINT
            )),
            Some(abi) => {
                if abi < 4 {
                    notes.push("Landlock ABI < 4: TCP is blocked by seccomp and the network namespace only".into());
                }
                if abi < 6 {
                    notes.push("Landlock ABI < 6: no signal/abstract-socket scoping".into());
                }
            }
        }
        if !self.seccomp {
            notes.push(format!(
                "seccomp is unavailable: SandboxMode::Required fails; {}",
                crate::UNSUPPORTED_HINT
            ));
        }
        if !self.net_namespaces {
            notes.push(
                "no network namespace: network off relies on the seccomp socket filter".into(),
            );
        }
        if !self.mount_namespaces || !self.pid_namespaces {
            notes.push(format!(
                "no mount or PID namespace: SandboxMode::Required fails (the filesystem view \
                 and the lifecycle need them); {}",
                crate::UNSUPPORTED_HINT
            ));
        }
        if !self.root && !self.user_namespaces {
            notes.push(format!(
                "unprivileged user namespaces are disabled: SandboxMode::Required fails; enable \
                 them (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone) or {}",
                crate::UNSUPPORTED_HINT
            ));
        }
        if self.idmapped_mounts == Some(false) {
            notes.push(format!(
                "as root, the workspace cannot be id-mapped here: SandboxMode::Required fails; \
                 run Capstan as a regular user or {}",
                crate::UNSUPPORTED_HINT
            ));
        }
        if !self.cgroup_pids && self.root {
            notes.push(
                "no pids cgroup: the process limit is RLIMIT_NPROC of the sandbox uid only".into(),
            );
        }
        if !self.cgroup_memory {
            notes.push(
                "no memory cgroup: [sandbox] memory_mb is applied per process as RLIMIT_AS".into(),
            );
        }
        notes
    }
}

impl fmt::Display for SupportReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yes = |b: bool| if b { "yes" } else { "no" };
        let landlock = match self.landlock_abi {
            Some(v) => format!("yes (ABI {v})"),
            None => "no".into(),
        };
        let rows: [(&str, String, &str); 10] = [
            ("Landlock", landlock, "filesystem confinement (required)"),
            (
                "seccomp",
                yes(self.seccomp).into(),
                "syscall filter (required)",
            ),
            (
                "user namespaces",
                yes(self.user_namespaces).into(),
                "unprivileged namespaces",
            ),
            (
                "PID namespaces",
                yes(self.pid_namespaces).into(),
                "kill every descendant",
            ),
            (
                "network namespaces",
                yes(self.net_namespaces).into(),
                "network off",
            ),
            (
                "mount namespaces",
                yes(self.mount_namespaces).into(),
                "allowlist filesystem view",
            ),
            ("root", yes(self.root).into(), "-"),
            (
                "id-mapped mounts",
                self.idmapped_mounts.map_or("not needed", |b| yes(b)).into(),
                "workspace writable as nobody",
            ),
            ("pids cgroup", yes(self.cgroup_pids).into(), "process limit"),
            (
                "memory cgroup",
                yes(self.cgroup_memory).into(),
                "memory limit per task",
            ),
        ];
        writeln!(f, "{:<20} {:<14} used for", "mechanism", "available")?;
        writeln!(f, "{:-<20} {:-<14} {:-<34}", "", "", "")?;
        for (name, value, why) in rows {
            writeln!(f, "{name:<20} {value:<14} {why}")?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "sandbox = \"required\": {}",
            if self.sandbox_available() {
                "available"
            } else {
                "UNAVAILABLE"
            }
        )?;
        writeln!(f, "lifecycle: {}", self.lifecycle())?;
        writeln!(f, "identity: {}", self.identity())?;
        writeln!(
            f,
            "filesystem: new root with read-only {}, /etc secrets masked, the workspace, \
             a private /tmp, a minimal /dev and /proc; nothing else of the host",
            crate::view::SYSTEM.join(" ")
        )?;
        for n in self.notes() {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

/// Probes this machine. Takes a few milliseconds (it forks a few times).
pub fn check() -> SupportReport {
    let root = nix::unistd::geteuid().is_root();
    let user = probe_unshare(libc::CLONE_NEWUSER);
    let via = |flag| probe_unshare(libc::CLONE_NEWUSER | flag) || (root && probe_unshare(flag));
    let cg = crate::cgroup::TaskCgroup::create(Some(1), Some(64 << 20));
    let (cgroup_pids, cgroup_memory) = (
        cg.has(crate::cgroup::Controller::Pids),
        cg.has(crate::cgroup::Controller::Memory),
    );
    cg.remove_blocking();
    let unavailable = crate::unavailable_mechanisms();
    let idmapped_mounts = root.then(|| {
        let dir = std::env::temp_dir();
        crate::identity::idmapped_workspace(&dir, (0, 0)).is_ok()
    });
    SupportReport {
        landlock_abi: crate::landlock::kernel_abi()
            .filter(|_| !unavailable.contains(&crate::Mechanism::Landlock)),
        seccomp: seccomp_available() && !unavailable.contains(&crate::Mechanism::Seccomp),
        user_namespaces: user,
        pid_namespaces: via(libc::CLONE_NEWPID),
        net_namespaces: via(libc::CLONE_NEWNET),
        mount_namespaces: via(libc::CLONE_NEWNS),
        root,
        idmapped_mounts,
        cgroup_pids,
        cgroup_memory,
    }
}

pub(crate) fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP only queries; EINVAL means no CONFIG_SECCOMP.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    mode >= 0
        && std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
            .is_ok_and(|a| a.split_whitespace().any(|x| x == "errno"))
}

/// Whether a child process can `unshare(flags)`.
fn probe_unshare(flags: libc::c_int) -> bool {
    // SAFETY: the child only calls unshare and _exit (async-signal-safe).
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let r = libc::unshare(flags);
            libc::_exit(if r == 0 { 0 } else { 1 });
        }
        if pid < 0 {
            return false;
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn report_prints_a_table() {
        let r = super::check();
        let text = r.to_string();
        assert!(text.contains("Landlock"), "{text}");
        assert!(text.contains("lifecycle:"), "{text}");
    }
}
