//! The seccomp filter of the command.
//!
//! Invariant: once [`install`] returns `Ok`, the calling thread and everything it
//! executes cannot trace or read other processes' memory, use io_uring (which
//! bypasses seccomp for the operations it performs), touch kernel keyrings, mount
//! anything, load kernel code (modules, BPF, kexec), open perf events, create or
//! join namespaces, or use userfaultfd; with the network off it can create no
//! socket but `AF_UNIX`, and with the network through the egress proxy none
//! but `AF_UNIX`, `AF_INET` and `AF_INET6` (and no raw ones). Denied calls return `EPERM` (not a kill) so programs
//! report a readable error. Failure mode: any error installing the filter is
//! returned and the launcher refuses to run the command.
//!
//! Three filters are stacked (the kernel evaluates all and the strictest answer
//! wins): the deny list (`EPERM`), `clone3` (`ENOSYS`, so libc falls back to
//! `clone`, whose flags we can inspect, unlike `clone3`'s struct), and on x86_64
//! the x32 syscall range (`ENOSYS`), which seccompiler's rules do not cover.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// Why a required sandbox is refused when seccomp filters are missing.
pub(crate) const MISSING: &str =
    "seccomp filters are not available in this kernel (needs CONFIG_SECCOMP_FILTER)";

/// System calls that always fail with `EPERM`.
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_open_by_handle_at,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_userfaultfd,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
];

/// `clone` flags that create namespaces.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWCGROUP,
];

fn arch() -> Result<TargetArch, String> {
    std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("seccomp: unsupported architecture: {e}"))
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| e.to_string())
}

/// Which sockets the command may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sockets {
    /// Network off: `AF_UNIX` only.
    UnixOnly,
    /// Network through the egress proxy: `AF_UNIX`, `AF_INET` and `AF_INET6`,
    /// no raw sockets (no netlink, no packet sockets). Where they can go is
    /// the network namespace's and Landlock's business.
    Inet,
    /// The host's network: any.
    Any,
}

/// Builds the filters (pure; exposed for the unit test).
pub(crate) fn build(sockets: Sockets) -> Result<Vec<BpfProgram>, String> {
    let arch = arch()?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();

    let mut clone_rules = Vec::new();
    for &flag in NAMESPACE_FLAGS {
        clone_rules.push(rule(vec![cond(
            0,
            SeccompCmpOp::MaskedEq(flag as u64),
            flag as u64,
        )?])?);
    }
    rules.insert(libc::SYS_clone, clone_rules);

    // TIOCSTI/TIOCLINUX push input into a terminal: the classic way out of a
    // sandbox that shares the user's tty.
    // The request constants' type differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    let (tiocsti, tioclinux) = (libc::TIOCSTI as u64, libc::TIOCLINUX as u64);
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, SeccompCmpOp::Eq, tiocsti)?])?,
            rule(vec![cond(1, SeccompCmpOp::Eq, tioclinux)?])?,
        ],
    );

    match sockets {
        Sockets::UnixOnly => {
            let not_unix = || rule(vec![cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?]);
            rules.insert(libc::SYS_socket, vec![not_unix()?]);
            rules.insert(libc::SYS_socketpair, vec![not_unix()?]);
        }
        Sockets::Inet => {
            // Denied: a family other than the three, or a raw socket.
            let other_family = || {
                rule(vec![
                    cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?,
                    cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
                    cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
                ])
            };
            let raw = || {
                rule(vec![cond(
                    1,
                    SeccompCmpOp::MaskedEq(0xf),
                    libc::SOCK_RAW as u64,
                )?])
            };
            rules.insert(libc::SYS_socket, vec![other_family()?, raw()?]);
            rules.insert(libc::SYS_socketpair, vec![other_family()?]);
        }
        Sockets::Any => {}
    }

    let eperm = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?;

    let mut programs = Vec::new();
    for f in [eperm, clone3] {
        programs.push(BpfProgram::try_from(f).map_err(|e| format!("seccomp: {e}"))?);
    }
    if arch == TargetArch::x86_64 {
        programs.push(x32_filter());
    }
    Ok(programs)
}

/// Sets no_new_privs and installs the filters on the calling thread.
pub(crate) fn install(sockets: Sockets) -> Result<(), String> {
    let programs = build(sockets)?;
    // Required for an unprivileged process to install a filter, and it keeps
    // setuid binaries from regaining what the sandbox took away.
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    for p in &programs {
        seccompiler::apply_filter(p).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

/// Denies the x32 ABI (syscall numbers with bit 30 set, same audit arch as
/// x86_64), which would otherwise reach every denied call under another number.
fn x32_filter() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        ins(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        ins(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        ins(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        ins(JGE_K, 0, 1, X32_SYSCALL_BIT),
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn filters_build() {
        use super::Sockets::*;
        for s in [UnixOnly, Inet, Any] {
            assert!(super::build(s).unwrap().len() >= 2);
        }
    }
}
