//! A pids cgroup per task, used only when running as root.
//!
//! Why: the kernel exempts root from `RLIMIT_NPROC` (the check skips `INIT_USER`
//! even inside a user namespace that maps uid 0 to root), so for root a fork bomb
//! is bounded only by a cgroup's `pids.max`. Unprivileged users cannot create
//! cgroups without a delegated subtree, but for them `RLIMIT_NPROC` inside the
//! private user namespace does the job. Everything here is best effort: if no
//! cgroup can be made, [`PidsCgroup::create`] returns `None`.
//!
//! The caller creates the cgroup and removes it after the launcher has exited;
//! the launcher joins it (writes its pid to `cgroup.procs`) before forking, so
//! every process of the task is inside.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Processes the launcher itself adds to the task (launcher, namespace init).
const OVERHEAD: u64 = 2;

pub(crate) struct PidsCgroup {
    path: PathBuf,
}

impl PidsCgroup {
    pub(crate) fn create(max_processes: Option<u64>) -> Option<PidsCgroup> {
        let max = max_processes?;
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        let parent = pids_cgroup_dir()?;
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "capstan-sandbox-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = parent.join(name);
        std::fs::create_dir(&path).ok()?;
        let cg = PidsCgroup { path };
        // Without a pids.max file the pids controller is not enabled here (cgroup
        // v2 without it in the parent's subtree_control): useless, remove it.
        if std::fs::write(cg.path.join("pids.max"), (max + OVERHEAD).to_string()).is_err() {
            cg.remove();
            return None;
        }
        Some(cg)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// One attempt at removing the cgroup, for the fast path.
    pub(crate) fn try_remove(&self) -> bool {
        match std::fs::remove_dir(&self.path) {
            Ok(()) => true,
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        }
    }

    /// Removes the (by now empty) cgroup. Tasks leave a cgroup when they exit, but
    /// the removal can race with the last exit, hence the short retry.
    pub(crate) fn remove(&self) {
        for _ in 0..50 {
            match std::fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
        tracing::warn!(path = %self.path.display(), "cannot remove the task's pids cgroup");
    }
}

/// The directory of our own cgroup in the hierarchy that has the pids
/// controller: cgroup v1 `.../pids/<path>` or cgroup v2 `<mount>/<path>`.
fn pids_cgroup_dir() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut v1 = None;
    let mut v2 = None;
    for line in mountinfo.lines() {
        // "<id> <parent> <maj:min> <root> <mount point> <opts> ... - <fstype> <source> <super opts>"
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        let fstype = r.next()?;
        let super_opts = r.nth(1).unwrap_or("");
        if fstype == "cgroup" && super_opts.split(',').any(|o| o == "pids") {
            v1 = Some(PathBuf::from(mount_point));
        } else if fstype == "cgroup2" {
            v2 = Some(PathBuf::from(mount_point));
        }
    }
    let entries: Vec<(&str, &str)> = own
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            parts.next()?;
            Some((parts.next()?, parts.next()?.trim_start_matches('/')))
        })
        .collect();
    if let Some(m) = &v1
        && let Some((_, rel)) = entries
            .iter()
            .find(|(controllers, _)| controllers.split(',').any(|c| c == "pids"))
    {
        return Some(m.join(rel));
    }
    if let Some(m) = &v2
        && std::fs::read_to_string(m.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"))
        && let Some((_, rel)) = entries
            .iter()
            .find(|(controllers, _)| controllers.is_empty())
    {
        return Some(m.join(rel));
    }
    None
}
