//! `find` and friends: commands whose options run other commands.

use super::args::{OptSpec, any_dynamic, has_flag, has_short, skip_opts};
use super::{Cmd, Effect};
use crate::risk::Risk;
use crate::word::Arg;
pub(super) fn find(c: &mut Cmd<'_>) {
    let args = c.args;
    if any_dynamic(args) {
        c.unknown("has arguments from a variable, which could be `-delete` or `-exec`");
        return;
    }
    let mut i = 0;
    let mut risk = Risk::ReadOnly;
    let mut runs: Vec<Vec<Arg>> = Vec::new();
    while i < args.len() {
        let t = args[i].text.as_str();
        match t {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let start = i + 1;
                let Some(end) = args[start..]
                    .iter()
                    .position(|a| a.text == ";" || a.text == "+")
                else {
                    c.unknown("has an `-exec` without a terminating `;` or `+`");
                    return;
                };
                let mut inner: Vec<Arg> = args[start..start + end].to_vec();
                for a in &mut inner {
                    if a.text.contains("{}") {
                        a.dynamic = true;
                    }
                }
                if inner.is_empty() {
                    c.unknown("has an empty `-exec`");
                    return;
                }
                runs.push(inner);
                i = start + end + 1;
                continue;
            }
            "-delete" => {
                risk = risk.max(Risk::Delete);
            }
            "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                risk = risk.max(Risk::Write);
            }
            _ => {}
        }
        i += 1;
    }
    match risk {
        Risk::Delete => c.risk(Risk::Delete, "deletes the files it finds"),
        Risk::Write => c.risk(Risk::Write, "writes its results to a file"),
        _ => c.read_only(),
    }
    for inner in runs {
        c.run(inner, "find -exec");
    }
}

pub(super) fn fd(c: &mut Cmd<'_>) {
    let args = c.args;
    if let Some(pos) = args.iter().position(|a| {
        a.dynamic || matches!(a.text.as_str(), "-x" | "--exec" | "-X" | "--exec-batch")
    }) {
        if args[pos].dynamic {
            c.unknown("has arguments from a variable, which could be `--exec`");
            return;
        }
        c.read_only();
        let rest = &args[pos + 1..];
        let end = rest
            .iter()
            .position(|a| a.text == ";")
            .unwrap_or(rest.len());
        let mut inner: Vec<Arg> = rest[..end].to_vec();
        for a in &mut inner {
            if a.text.contains('{') {
                a.dynamic = true;
            }
        }
        if inner.is_empty() {
            c.unknown("has an empty `--exec`");
        } else {
            c.run(inner, "fd --exec");
        }
    } else {
        c.read_only();
    }
}

pub(super) fn watch(c: &mut Cmd<'_>) {
    let spec = OptSpec {
        short_val: "nq",
        short_flag: "dtbegcxpwr",
        long_val: &["interval", "equexit", "differences"],
        long_flag: &[
            "differences",
            "no-title",
            "beep",
            "errexit",
            "chgexit",
            "color",
            "no-color",
            "exec",
            "precise",
            "no-wrap",
            "no-rerun",
        ],
    };
    match skip_opts(c.args, &spec, "watch") {
        Ok(i) if i < c.args.len() => {
            if has_flag(&c.args[..i], &["-x", "--exec"]) || has_short(&c.args[..i], 'x') {
                let inner = c.args[i..].to_vec();
                c.run(inner, "watch");
            } else if any_dynamic(&c.args[i..]) {
                c.unknown("runs a command that comes from a variable");
            } else {
                let text = c.args[i..]
                    .iter()
                    .map(|a| a.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                c.out.push(Effect::Script {
                    text,
                    via: "watch".into(),
                });
            }
        }
        Ok(_) => c.unknown("has no command"),
        Err(reason) => c.unknown(&format!("cannot be analysed: {reason}")),
    }
}

pub(super) fn parallel(c: &mut Cmd<'_>) {
    let args = c.args;
    if args
        .first()
        .is_none_or(|a| a.dynamic || a.text.starts_with('-'))
    {
        c.unknown("options of `parallel` are not analysed, and without a command it runs lines from its input");
        return;
    }
    let end = args
        .iter()
        .position(|a| a.text.starts_with(":::"))
        .unwrap_or(args.len());
    if any_dynamic(&args[..end]) {
        c.unknown("runs a command that comes from a variable");
        return;
    }
    let text = args[..end]
        .iter()
        .map(|a| a.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    c.out.push(Effect::Script {
        text,
        via: "parallel".into(),
    });
}
