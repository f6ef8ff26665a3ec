//! Argument helpers: where options end and operands begin.

use crate::display;
use crate::word::Arg;

/// The arguments that may still be options: those before a literal `--`.
pub(super) fn opts(args: &[Arg]) -> &[Arg] {
    match args.iter().position(|a| a.is_static() && a.text == "--") {
        Some(i) => &args[..i],
        None => args,
    }
}

/// Whether any option is one of `names` (long names also match `--name=...`).
/// Pessimistic: a dynamic argument counts as a match.
pub(super) fn has_flag(args: &[Arg], names: &[&str]) -> bool {
    opts(args).iter().any(|a| {
        a.dynamic
            || names.iter().any(|n| {
                a.text == *n
                    || (n.starts_with("--")
                        && a.text.strip_prefix(n).is_some_and(|r| r.starts_with('=')))
            })
    })
}

/// Whether any short-option cluster (`-xyz`) contains `c`. Pessimistic.
pub(super) fn has_short(args: &[Arg], c: char) -> bool {
    opts(args).iter().any(|a| {
        a.dynamic
            || (a.text.starts_with('-') && !a.text.starts_with("--") && a.text[1..].contains(c))
    })
}

/// Like [`has_flag`] but only static words count: for checks that lower risk.
pub(super) fn surely_flag(args: &[Arg], names: &[&str]) -> bool {
    opts(args)
        .iter()
        .any(|a| a.is_static() && names.contains(&a.text.as_str()))
}

pub(super) fn any_dynamic(args: &[Arg]) -> bool {
    args.iter().any(|a| a.dynamic)
}

/// Operands: arguments that do not look like options (all of them after
/// `--`). Dynamic words are included since they may be operands.
pub(super) fn operands(args: &[Arg]) -> Vec<&Arg> {
    let mut out = Vec::new();
    let mut after = false;
    for a in args {
        if after || a.dynamic {
            out.push(a);
        } else if a.text == "--" {
            after = true;
        } else if !a.text.starts_with('-') || a.text == "-" {
            out.push(a);
        }
    }
    out
}

/// Describes a command's options, for finding where the wrapped command or
/// first operand starts.
pub(super) struct OptSpec {
    /// Short options taking a value (`-n 5` or `-n5`).
    pub(super) short_val: &'static str,
    /// Short options without a value.
    pub(super) short_flag: &'static str,
    /// Long options taking a value (`--name v` or `--name=v`), without `--`.
    pub(super) long_val: &'static [&'static str],
    /// Long options without a value, without `--`.
    pub(super) long_flag: &'static [&'static str],
}

/// Returns the index of the first operand after the options described by
/// `spec`, or a reason if the options cannot be understood. Unknown options
/// are refused rather than guessed at, since guessing wrong shifts where
/// the wrapped command starts.
pub(super) fn skip_opts(args: &[Arg], spec: &OptSpec, who: &str) -> Result<usize, String> {
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a.dynamic {
            return Err(format!("the options of `{who}` come from a variable"));
        }
        let t = a.text.as_str();
        if t == "--" {
            return Ok(i + 1);
        }
        if let Some(long) = t.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            if spec.long_val.contains(&name) {
                i += if inline { 1 } else { 2 };
                continue;
            }
            if spec.long_flag.contains(&name) && !inline {
                i += 1;
                continue;
            }
            return Err(format!(
                "`{who}` option `{}` is not understood",
                display::clip(t)
            ));
        }
        if t.len() > 1 && t.starts_with('-') {
            let chars: Vec<char> = t[1..].chars().collect();
            let mut j = 0;
            let mut consumed_next = false;
            while j < chars.len() {
                let ch = chars[j];
                if spec.short_val.contains(ch) {
                    if j + 1 == chars.len() {
                        consumed_next = true;
                    }
                    break;
                }
                if !spec.short_flag.contains(ch) {
                    return Err(format!(
                        "`{who}` option `{}` is not understood",
                        display::clip(t)
                    ));
                }
                j += 1;
            }
            i += if consumed_next { 2 } else { 1 };
            continue;
        }
        return Ok(i);
    }
    Ok(args.len())
}
