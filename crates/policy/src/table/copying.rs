//! Copying tools (`dd`, `tar`, `rsync`).

use super::Cmd;
use super::args::{has_flag, has_short, operands, surely_flag};
use super::dispatch::{is_net_device, is_null_device};
use crate::risk::Risk;
pub(super) fn dd(c: &mut Cmd<'_>) {
    let mut risk = Risk::ReadOnly;
    for a in c.args {
        if a.dynamic {
            c.unknown("has operands that come from a variable");
            return;
        }
        if let Some(target) = a.text.strip_prefix("of=") {
            if is_null_device(target) {
                continue;
            }
            if is_net_device(target) {
                risk = risk.max(Risk::Network);
            } else if target.starts_with("/dev/") {
                c.unknown("writes to a device, which can destroy a disk");
                return;
            } else {
                risk = risk.max(Risk::Write);
            }
        }
    }
    match risk {
        Risk::ReadOnly => c.read_only(),
        Risk::Network => c.network(),
        _ => c.write(),
    }
}

pub(super) fn tar(c: &mut Cmd<'_>) {
    let args = c.args;
    if has_flag(
        args,
        &[
            "--to-command",
            "--use-compress-program",
            "-I",
            "--checkpoint-action",
            "--rsh-command",
            "--info-script",
            "--new-volume-script",
            "-F",
        ],
    ) {
        c.unknown("runs a helper program");
        return;
    }
    // The first argument may be a bundled mode without a dash (`tar xzf`).
    let mode: String = args
        .iter()
        .filter(|a| !a.text.starts_with("--"))
        .take(1)
        .chain(
            args.iter()
                .filter(|a| a.text.starts_with('-') && !a.text.starts_with("--")),
        )
        .map(|a| a.text.trim_start_matches('-').to_owned())
        .collect();
    let long = |n: &str| surely_flag(args, &[n]);
    if mode.contains('t') || long("--list") {
        if mode.contains('x') || mode.contains('c') || mode.contains('r') || mode.contains('u') {
            c.write();
        } else {
            c.read_only();
        }
    } else if args
        .iter()
        .any(|a| a.text.contains("--remove-files") || a.text.contains("--delete"))
    {
        c.delete();
    } else {
        c.write();
    }
}

pub(super) fn rsync(c: &mut Cmd<'_>) {
    let args = c.args;
    if has_flag(args, &["--rsh", "--rsync-path"]) || has_short(args, 'e') {
        c.unknown("runs a remote shell command");
        return;
    }
    let remote = operands(args).iter().any(|a| {
        a.dynamic || a.text.starts_with("rsync://") || {
            let before_slash = a.text.split('/').next().unwrap_or("");
            before_slash.contains(':')
        }
    });
    if remote {
        c.network();
    }
    if args
        .iter()
        .any(|a| a.text.starts_with("--delete") || a.text == "--remove-source-files")
    {
        c.delete();
    } else if !remote {
        c.write();
    }
}
