//! A cgroup per task (pids and memory), when Capstan may create one (as root,
//! or in a delegated cgroup v2 subtree).
//!
//! Why: the kernel exempts root from `RLIMIT_NPROC`, so for root a fork bomb is
//! bounded only by `pids.max`; and only a memory cgroup bounds the memory of a
//! task as a whole (`RLIMIT_AS` is per process and counts reservations, not
//! use). Both cgroup v1 (one hierarchy per controller) and v2 (one hierarchy)
//! are handled. If no memory cgroup can be made, the launcher falls back to
//! `RLIMIT_AS` per process and says so in a warning.
//!
//! Lifetime: the caller creates the cgroups; the launcher joins them before it
//! forks, so every process of the task is inside. When the task is over the
//! launcher reads the OOM-kill count, reports it, moves itself out and removes
//! the cgroups, so they are gone even if the caller died meanwhile; the caller
//! removes whatever is left after the launcher exits.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Processes the launcher itself adds to the task (launcher, namespace init).
const OVERHEAD: u64 = 2;

/// A controller the task cgroup uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Controller {
    Pids,
    Memory,
}

impl Controller {
    fn name(self) -> &'static str {
        match self {
            Controller::Pids => "pids",
            Controller::Memory => "memory",
        }
    }
}

/// One directory of the task cgroup: in v1 one per controller, in v2 one for
/// all.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CgroupDir {
    pub path: PathBuf,
    pub v2: bool,
    pub controllers: Vec<Controller>,
}

impl CgroupDir {
    /// The file the launcher writes `0` to, to move itself in or out.
    ///
    /// v1: `tasks`, which moves the calling thread; the launcher has one
    /// thread, so that is the whole process. `cgroup.procs` would move the
    /// same process but first takes the kernel's threadgroup lock for
    /// writing, which waits for an RCU grace period: 8 to 15 ms measured
    /// here, the largest part of a short command's start. A thread moving
    /// itself needs no such lock (it cannot exit or exec meanwhile).
    ///
    /// v2: `cgroup.procs`; its `cgroup.threads` only works in threaded
    /// subtrees.
    fn membership_file(&self) -> &'static str {
        if self.v2 { "cgroup.procs" } else { "tasks" }
    }
}

/// The cgroup directories of one task.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct TaskCgroup {
    pub dirs: Vec<CgroupDir>,
}

impl TaskCgroup {
    /// Creates the task's cgroups for the limits that are set. Best effort: a
    /// controller that cannot be used here is simply absent.
    pub(crate) fn create(max_processes: Option<u64>, max_memory: Option<u64>) -> TaskCgroup {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "capstan-sandbox-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let mut cg = TaskCgroup::default();
        let wanted = [
            (Controller::Pids, max_processes.map(|m| m + OVERHEAD)),
            (Controller::Memory, max_memory),
        ];
        for (controller, limit) in wanted {
            let Some(limit) = limit else { continue };
            let Some((parent, v2)) = own_cgroup_dir(controller) else {
                continue;
            };
            let path = parent.join(&name);
            let existing = cg.dirs.iter().position(|d| d.path == path);
            if existing.is_none() && std::fs::create_dir(&path).is_err() {
                continue;
            }
            if set_limit(&path, v2, controller, limit).is_err() {
                if existing.is_none() {
                    let _ = std::fs::remove_dir(&path);
                }
                continue;
            }
            match existing {
                Some(i) => cg.dirs[i].controllers.push(controller),
                None => cg.dirs.push(CgroupDir {
                    path,
                    v2,
                    controllers: vec![controller],
                }),
            }
        }
        cg
    }

    pub(crate) fn has(&self, controller: Controller) -> bool {
        self.dirs
            .iter()
            .any(|d| d.controllers.contains(&controller))
    }

    /// Moves the calling process, which must have one thread, into every
    /// directory.
    pub(crate) fn join(&self) -> Result<(), String> {
        for d in &self.dirs {
            std::fs::write(d.path.join(d.membership_file()), "0")
                .map_err(|e| format!("cannot join the cgroup {}: {e}", d.path.display()))?;
        }
        Ok(())
    }

    /// How many processes the kernel killed for exceeding the memory limit.
    pub(crate) fn oom_kills(&self) -> u64 {
        let Some(d) = self
            .dirs
            .iter()
            .find(|d| d.controllers.contains(&Controller::Memory))
        else {
            return 0;
        };
        // v2: memory.events; v1: memory.oom_control (kernel 4.13+).
        let file = if d.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(d.path.join(file))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Moves the calling process back to the parent cgroups (so that it does
    /// not keep them busy) and removes the directories. For the launcher, once
    /// every other process of the task is gone.
    pub(crate) fn leave_and_remove(&self) {
        for d in &self.dirs {
            if let Some(parent) = d.path.parent() {
                let _ = std::fs::write(parent.join(d.membership_file()), "0");
            }
        }
        self.remove_blocking();
    }

    /// One attempt at removing every directory; true when none is left.
    pub(crate) fn try_remove(&self) -> bool {
        self.dirs
            .iter()
            .all(|d| match std::fs::remove_dir(&d.path) {
                Ok(()) => true,
                Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            })
    }

    /// Removes the (by now empty) directories. A cgroup becomes removable a
    /// moment after its last task exits, hence the short retry.
    pub(crate) fn remove_blocking(&self) {
        for _ in 0..100 {
            if self.try_remove() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for d in &self.dirs {
            tracing::warn!(path = %d.path.display(), "cannot remove the task's cgroup");
        }
    }
}

fn set_limit(dir: &Path, v2: bool, controller: Controller, limit: u64) -> std::io::Result<()> {
    match (controller, v2) {
        (Controller::Pids, _) => std::fs::write(dir.join("pids.max"), limit.to_string()),
        (Controller::Memory, true) => {
            std::fs::write(dir.join("memory.max"), limit.to_string())?;
            // No swap: the limit is on memory the task can touch, swapped or not.
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            Ok(())
        }
        (Controller::Memory, false) => {
            std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string())?;
            // Only present with swap accounting; same reason as memory.swap.max.
            let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
            Ok(())
        }
    }
}

/// The directory of our own cgroup in the hierarchy that has `controller`:
/// cgroup v1 `<mount>/<path>` of that controller, or cgroup v2 `<mount>/<path>`
/// when the controller is enabled there. `true` for v2.
fn own_cgroup_dir(controller: Controller) -> Option<(PathBuf, bool)> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let name = controller.name();
    let mut v1 = None;
    let mut v2 = None;
    for line in mountinfo.lines() {
        // "<id> <parent> <maj:min> <root> <mount point> <opts> ... - <fstype> <source> <super opts>"
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount_point) = left.split(' ').nth(4) else {
            continue;
        };
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or("");
        let super_opts = r.nth(1).unwrap_or("");
        if fstype == "cgroup" && super_opts.split(',').any(|o| o == name) {
            v1 = Some(PathBuf::from(crate::view::unescape_mountinfo(mount_point)));
        } else if fstype == "cgroup2" {
            v2 = Some(PathBuf::from(crate::view::unescape_mountinfo(mount_point)));
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
            .find(|(controllers, _)| controllers.split(',').any(|c| c == name))
    {
        return Some((m.join(rel), false));
    }
    if let Some(m) = &v2
        && let Some((_, rel)) = entries
            .iter()
            .find(|(controllers, _)| controllers.is_empty())
    {
        let dir = m.join(rel);
        // Our own cgroup must offer the controller to its children.
        let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == name));
        if enabled {
            return Some((dir, true));
        }
    }
    None
}
