//! Copying tools (`dd`, `tar`, `rsync`).

use super::Cmd;
use super::args::{operands, surely_flag};
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
    // Its helper-program options are rows of `options::RISKY_OPTIONS`;
    // the old style (`tar xfI a.tar prog`, a first word without a dash)
    // is a cluster too, each letter taking the next word as its value.
    if args
        .first()
        .is_some_and(|a| !a.text.starts_with('-') && (a.text.contains('I') || a.text.contains('F')))
    {
        c.unknown("runs a helper program (`I` or `F` in its bundled options)");
        return;
    }
    // `-f host:file` (without `--force-local`) runs a remote shell.
    let archives = args.iter().enumerate().filter_map(|(i, a)| {
        let t = a.text.as_str();
        if let Some(v) = t.strip_prefix("--file=") {
            return Some(v);
        }
        let cluster = t.strip_prefix('-').filter(|r| !r.starts_with('-'));
        let bundled = i == 0 && !t.starts_with('-');
        match cluster.or(bundled.then_some(t)) {
            Some(opts) => match opts.split_once('f') {
                Some((_, "")) => args.get(i + 1).map(|v| v.text.as_str()),
                Some((_, v)) if !bundled => Some(v),
                Some(_) => args.get(i + 1).map(|v| v.text.as_str()),
                None => None,
            },
            None => None,
        }
    });
    let remote = archives
        .into_iter()
        .any(|f| f.split('/').next().is_some_and(|h| h.contains(':')));
    if remote && !surely_flag(args, &["--force-local"]) {
        c.network();
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
