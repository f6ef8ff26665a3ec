//! `find` and friends: commands whose options run other commands.

use super::args::{OptSpec, any_dynamic, parse_opts};
use super::{Cmd, Effect};
use crate::display;
use crate::risk::Risk;
use crate::word::Arg;
/// Every primary, operator and option of GNU and BSD `find` that neither
/// runs nor writes anything, with whether it takes a value. Anything else
/// in the expression is refused (a wrapper's rule: what is not known may
/// run something).
const FIND_KNOWN: &[(&str, bool)] = &[
    // Options.
    ("-H", false),
    ("-L", false),
    ("-P", false),
    ("-E", false),
    ("-X", false),
    ("-s", false),
    ("-x", false),
    ("-d", false),
    ("-f", true),
    ("-D", true),
    ("-O0", false),
    ("-O1", false),
    ("-O2", false),
    ("-O3", false),
    ("-depth", false),
    ("-maxdepth", true),
    ("-mindepth", true),
    ("-mount", false),
    ("-xdev", false),
    ("-noleaf", false),
    ("-ignore_readdir_race", false),
    ("-noignore_readdir_race", false),
    ("-daystart", false),
    ("-follow", false),
    ("-regextype", true),
    ("-warn", false),
    ("-nowarn", false),
    ("-files0-from", true),
    ("-help", false),
    ("--help", false),
    ("-version", false),
    ("--version", false),
    // Tests.
    ("-amin", true),
    ("-anewer", true),
    ("-atime", true),
    ("-cmin", true),
    ("-cnewer", true),
    ("-ctime", true),
    ("-empty", false),
    ("-executable", false),
    ("-false", false),
    ("-fstype", true),
    ("-gid", true),
    ("-group", true),
    ("-ilname", true),
    ("-iname", true),
    ("-inum", true),
    ("-ipath", true),
    ("-iregex", true),
    ("-iwholename", true),
    ("-links", true),
    ("-lname", true),
    ("-mmin", true),
    ("-mtime", true),
    ("-name", true),
    ("-newer", true),
    ("-nogroup", false),
    ("-nouser", false),
    ("-path", true),
    ("-perm", true),
    ("-readable", false),
    ("-regex", true),
    ("-samefile", true),
    ("-size", true),
    ("-true", false),
    ("-type", true),
    ("-uid", true),
    ("-used", true),
    ("-user", true),
    ("-wholename", true),
    ("-writable", false),
    ("-xtype", true),
    ("-context", true),
    ("-neweraa", true),
    ("-newerac", true),
    ("-neweram", true),
    ("-newerat", true),
    ("-newerca", true),
    ("-newercc", true),
    ("-newercm", true),
    ("-newerct", true),
    ("-newerma", true),
    ("-newermc", true),
    ("-newermm", true),
    ("-newermt", true),
    ("-newerBt", true),
    ("-newerBm", true),
    ("-Bmin", true),
    ("-Btime", true),
    ("-Bnewer", true),
    ("-flags", true),
    ("-acl", false),
    ("-nofollow", false),
    ("-sparse", false),
    ("-xattr", false),
    ("-xattrname", true),
    // Actions that only print, and operators.
    ("-print", false),
    ("-print0", false),
    ("-printf", true),
    ("-ls", false),
    ("-prune", false),
    ("-quit", false),
    ("-not", false),
    ("-and", false),
    ("-or", false),
    ("-a", false),
    ("-o", false),
    ("!", false),
    ("(", false),
    (")", false),
    (",", false),
];

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
                // `+` ends the command only right after `{}`; anywhere
                // else it is an argument of the command.
                let Some(end) = args[start..].iter().enumerate().position(|(k, a)| {
                    a.text == ";" || (a.text == "+" && k > 0 && args[start + k - 1].text == "{}")
                }) else {
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
            "-fprint" | "-fprint0" | "-fls" => {
                risk = risk.max(Risk::Write);
                i += 1;
            }
            "-fprintf" => {
                risk = risk.max(Risk::Write);
                i += 2;
            }
            _ if t.starts_with('-') || matches!(t, "!" | "(" | ")" | ",") => {
                // `-newerXY` for any two of `a`, `B`, `c`, `m` (and `t`).
                let newer = t
                    .strip_prefix("-newer")
                    .is_some_and(|xy| xy.len() == 2 && xy.chars().all(|ch| "aBcmt".contains(ch)));
                let known = FIND_KNOWN
                    .iter()
                    .find(|(n, _)| *n == t)
                    .or(newer.then_some(&("-newerXY", true)));
                match known {
                    Some((_, true)) => i += 1,
                    Some((_, false)) => {}
                    None => {
                        c.unknown(&format!(
                            "has `{}`, which is not a `find` expression it knows",
                            display::clip(t)
                        ));
                        return;
                    }
                }
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
    let exec = ["-x", "--exec", "-X", "--exec-batch"];
    if let Some(pos) = args.iter().position(|a| {
        super::options::any_spells(std::slice::from_ref(a), &exec, &Default::default())
    }) {
        if args[pos].dynamic {
            c.unknown("has arguments from a variable, which could be `--exec`");
            return;
        }
        if !exec.contains(&args[pos].text.as_str()) {
            c.unknown(&format!(
                "`{}` may run a command (`--exec` in another spelling), which is not analysed",
                display::clip(&args[pos].text)
            ));
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
    match parse_opts(c.args, &spec, "watch") {
        Ok(p) if p.end < c.args.len() => {
            let i = p.end;
            if p.has(&["x", "exec"]) {
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
