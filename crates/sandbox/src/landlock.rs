//! Landlock filesystem (and TCP, and scope) rules for the command.
//!
//! Invariant: after [`restrict`] returns `Ok`, the calling process and everything
//! it executes can write only beneath the workspace and the private `/tmp` (plus
//! a few harmless device files), and can read/execute only the system
//! directories of the view, the extra read paths, the workspace and `/tmp`. This
//! is the inner layer: the filesystem view (`view`) already holds nothing else. Failure mode: when the
//! kernel enforces nothing, [`restrict`] returns an error and the launcher refuses
//! to run the command (the caller asked for a required sandbox).
//!
//! Hard links and renames across directories need `Refer` on both sides, which
//! only the workspace and the per-task directory have, so `ln /etc/passwd ws/x`
//! fails with `EXDEV`; a symlink inside the workspace pointing out is resolved by
//! the kernel to its target, whose (read-only) rules apply.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

/// Readable (not executable) pseudo filesystems.
const SYSTEM_READ: &[&str] = &["/proc", "/dev"];
/// Device files that programs routinely open for writing.
const DEVICES_RW: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Why a required sandbox is refused when Landlock is missing.
pub(crate) const MISSING: &str = "Landlock is not available in this kernel (needs Linux 5.13+ with \
                                  landlock in the lsm= boot list)";

/// The kernel's Landlock ABI version, or `None` when Landlock is unavailable.
pub(crate) fn kernel_abi() -> Option<i32> {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute only queries.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    (v > 0).then_some(v as i32)
}

/// What [`restrict`] achieved.
pub(crate) enum Enforced {
    Fully,
    Partially(String),
}

/// Restricts the calling (single-threaded) process. `writable` are the
/// directories the command may modify.
pub(crate) fn restrict(
    writable: &[PathBuf],
    extra_read: &[PathBuf],
    network: bool,
    connect_port: Option<u16>,
) -> Result<Enforced, String> {
    let Some(kernel) = kernel_abi() else {
        return Err(MISSING.into());
    };
    // Ask for exactly what the running kernel supports (capped at what the crate
    // knows): asking for more would report "partially enforced" on every run of a
    // perfectly fine kernel and make the warning meaningless.
    let abi = ABI::from(kernel.min(9));
    let all = AccessFs::from_all(abi);
    let read_exec = AccessFs::from_read(abi);
    let read = read_exec & !AccessFs::Execute;
    let device =
        (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev) & all;

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(err)?;
    if !network && kernel >= 4 {
        // Defence in depth behind the network namespace and seccomp: no TCP bind
        // or connect, since no port rule is added.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?;
    }
    if kernel >= 6 {
        // No signals to processes outside the sandbox, no connecting to abstract
        // Unix sockets created outside it.
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(err)?;
    }
    let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
    rules.extend(
        crate::view::SYSTEM
            .iter()
            .map(|p| (PathBuf::from(p), read_exec)),
    );
    rules.extend(extra_read.iter().map(|p| (p.clone(), read_exec)));
    rules.extend(SYSTEM_READ.iter().map(|p| (PathBuf::from(p), read)));
    rules.extend(resolv_conf_target().map(|p| (p, read)));
    rules.extend(DEVICES_RW.iter().map(|p| (PathBuf::from(p), device)));
    rules.extend(writable.iter().map(|p| (p.clone(), all)));

    let mut created = ruleset.create().map_err(err)?;
    if let Some(port) = connect_port
        && !network
        && kernel >= 4
    {
        // Network through the egress proxy: TCP connect to the bridge's port
        // only (the namespace has nothing but loopback anyway).
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(|e| format!("Landlock rule for TCP port {port}: {e}"))?;
    }
    for (path, access) in rules {
        let Ok(fd) = PathFd::new(&path) else {
            continue; // does not exist on this machine
        };
        // Directory-only rights on a file rule are an error: keep the file ones.
        let access = if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("Landlock rule for {}: {e}", path.display()))?;
    }

    let status = created.restrict_self().map_err(err)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(Enforced::Fully),
        RulesetStatus::PartiallyEnforced => Ok(Enforced::Partially(format!(
            "Landlock only partially enforced (kernel ABI {kernel})"
        ))),
        RulesetStatus::NotEnforced => Err("Landlock rules are not enforced by this kernel".into()),
    }
}

/// `/etc/resolv.conf` is often a symlink into `/run` (systemd-resolved); name
/// resolution with the network on needs its target to be readable (the view
/// binds it in that case).
fn resolv_conf_target() -> Option<PathBuf> {
    let target = std::fs::canonicalize("/etc/resolv.conf").ok()?;
    (!crate::view::SYSTEM
        .iter()
        .any(|d| target.starts_with(Path::new(d))))
    .then_some(target)
}

fn err(e: impl std::fmt::Display) -> String {
    format!("Landlock: {e}")
}
