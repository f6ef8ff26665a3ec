//! Argument helpers: where options end and operands begin.
//!
//! Two directions, two rules. Checks that *raise* risk ([`has_flag`], and
//! the rows of `options.rs`) read every spelling an option may have (see
//! [`super::options::spells`]): abbreviated long options, letters inside
//! short clusters, words only known at run time. Checks that *lower* risk
//! ([`surely_flag`]) accept only the exact spelling, and only when nothing
//! could undo it (a `--no-...` negation, a run-time word).

use super::options::{Syntax, any_spells};
use crate::display;
use crate::word::Arg;

/// The arguments that surely may still be options: those before the first
/// literal `--`. For checks that lower risk.
pub(super) fn opts(args: &[Arg]) -> &[Arg] {
    match args.iter().position(|a| a.is_static() && a.text == "--") {
        Some(i) => &args[..i],
        None => args,
    }
}

/// The arguments that may be options, for checks that raise risk: up to a
/// `--` that surely ends the options. A `--` right after an option word
/// may be that option's value (`sort -T -- --compress-program=sh`), so the
/// scan goes on past it.
pub(super) fn option_words(args: &[Arg]) -> &[Arg] {
    for (i, a) in args.iter().enumerate() {
        if !(a.is_static() && a.text == "--") {
            continue;
        }
        let after_option = i > 0 && {
            let p = &args[i - 1];
            p.dynamic || (p.text.len() > 1 && p.text.starts_with('-') && !p.text.contains('='))
        };
        if !after_option {
            return &args[..i];
        }
    }
    args
}

/// Whether any option may be one of `names`, in any spelling: long names
/// abbreviated or with `=value`, short names anywhere in a cluster.
/// Pessimistic: a dynamic argument counts as a match.
pub(super) fn has_flag(args: &[Arg], names: &[&str]) -> bool {
    any_spells(args, names, &Syntax::default())
}

/// Like [`has_flag`] but only the exact, static spelling counts, and not
/// when another word may undo it (`--no-dry-run` after `-n`, or a word
/// only known at run time): for checks that lower risk.
pub(super) fn surely_flag(args: &[Arg], names: &[&str]) -> bool {
    let o = opts(args);
    // A glob that could expand to an option is dynamic already (`word.rs`).
    if o.iter().any(|a| a.dynamic) {
        return false;
    }
    o.iter().any(|a| names.contains(&a.text.as_str()))
        && !o
            .iter()
            .any(|a| !names.contains(&a.text.as_str()) && names.iter().any(|n| negates(&a.text, n)))
}

/// Whether `word` may be the negation of the long option `name` (git's
/// parse-options and Perl's Getopt::Long accept `--no-x` for `--x` and
/// `--x` for `--no-x` or `--nox`, abbreviated too).
fn negates(word: &str, name: &str) -> bool {
    let (Some(given), Some(long)) = (word.strip_prefix("--"), name.strip_prefix("--")) else {
        return false;
    };
    let given = given.split_once('=').map_or(given, |(g, _)| g);
    if given.is_empty() {
        return false;
    }
    let opposite = match long.strip_prefix("no-").or_else(|| long.strip_prefix("no")) {
        Some(positive) => positive.to_owned(),
        None => format!("no-{long}"),
    };
    opposite.starts_with(given)
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

/// One option found by [`parse_opts`]: its name (a letter or a long name
/// without `--`) and its value, if it takes one.
pub(super) struct Opt {
    pub(super) name: String,
    pub(super) value: Option<Arg>,
}

/// A command's own options, parsed.
pub(super) struct Parsed {
    /// The index of the first operand (the wrapped command, for wrappers).
    pub(super) end: usize,
    /// Every option, in order, with its value.
    pub(super) opts: Vec<Opt>,
}

impl Parsed {
    /// Whether any option is one of `names` (letters or long names).
    pub(super) fn has(&self, names: &[&str]) -> bool {
        self.opts.iter().any(|o| names.contains(&o.name.as_str()))
    }

    /// The values given to any of the options `names`.
    pub(super) fn values<'a>(&'a self, names: &'a [&str]) -> impl Iterator<Item = &'a Arg> + 'a {
        self.opts
            .iter()
            .filter(move |o| names.contains(&o.name.as_str()))
            .filter_map(|o| o.value.as_ref())
    }
}

/// Parses the options described by `spec`, up to the first operand, or
/// explains why they cannot be understood. Unknown options are refused
/// rather than guessed at, and so are abbreviated long options: guessing
/// wrong shifts where the wrapped command starts (the fail-closed rule for
/// every wrapper).
pub(super) fn parse_opts(args: &[Arg], spec: &OptSpec, who: &str) -> Result<Parsed, String> {
    let mut opts = Vec::new();
    let mut i = 0;
    let not_understood =
        |t: &str| format!("`{who}` option `{}` is not understood", display::clip(t));
    while i < args.len() {
        let a = &args[i];
        if a.dynamic {
            return Err(format!("the options of `{who}` come from a variable"));
        }
        let t = a.text.as_str();
        if t == "--" {
            return Ok(Parsed { end: i + 1, opts });
        }
        if let Some(long) = t.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            if spec.long_val.contains(&name) {
                let value = match inline {
                    Some(v) => Some(Arg::literal(v)),
                    None => {
                        i += 1;
                        Some(args.get(i).cloned().ok_or_else(|| not_understood(t))?)
                    }
                };
                opts.push(Opt {
                    name: name.to_owned(),
                    value,
                });
                i += 1;
                continue;
            }
            if spec.long_flag.contains(&name) && inline.is_none() {
                opts.push(Opt {
                    name: name.to_owned(),
                    value: None,
                });
                i += 1;
                continue;
            }
            return Err(not_understood(t));
        }
        if t.len() > 1 && t.starts_with('-') {
            let chars: Vec<char> = t[1..].chars().collect();
            let mut j = 0;
            while j < chars.len() {
                let ch = chars[j];
                if spec.short_val.contains(ch) {
                    let rest: String = chars[j + 1..].iter().collect();
                    let value = if rest.is_empty() {
                        i += 1;
                        args.get(i).cloned().ok_or_else(|| not_understood(t))?
                    } else {
                        Arg::literal(rest)
                    };
                    opts.push(Opt {
                        name: ch.to_string(),
                        value: Some(value),
                    });
                    break;
                }
                if !spec.short_flag.contains(ch) {
                    return Err(not_understood(t));
                }
                opts.push(Opt {
                    name: ch.to_string(),
                    value: None,
                });
                j += 1;
            }
            i += 1;
            continue;
        }
        return Ok(Parsed { end: i, opts });
    }
    Ok(Parsed {
        end: args.len(),
        opts,
    })
}

/// [`parse_opts`] when only the end of the options matters.
pub(super) fn skip_opts(args: &[Arg], spec: &OptSpec, who: &str) -> Result<usize, String> {
    parse_opts(args, spec, who).map(|p| p.end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[&str]) -> Vec<Arg> {
        ws.iter().map(|w| Arg::literal(*w)).collect()
    }

    #[test]
    fn lowering_needs_the_exact_spelling_and_no_negation() {
        assert!(surely_flag(&words(&["-n", "x"]), &["-n", "--dry-run"]));
        assert!(!surely_flag(
            &words(&["-n", "--no-dry-run"]),
            &["-n", "--dry-run"]
        ));
        assert!(!surely_flag(
            &words(&["-n", "--no-d"]),
            &["-n", "--dry-run"]
        ));
        assert!(!surely_flag(&words(&["--noenv", "--env"]), &["--noenv"]));
        assert!(!surely_flag(
            &words(&["--staged", "--no-staged"]),
            &["--staged"]
        ));
        assert!(!surely_flag(&words(&["-dn"]), &["-n"]));
        // Both spellings listed: neither undoes the other.
        assert!(surely_flag(
            &words(&["--contains", "x"]),
            &["--contains", "--no-contains"]
        ));
        let mut d = words(&["-n", "$X"]);
        d[1].dynamic = true;
        assert!(!surely_flag(&d, &["-n"]));
    }

    #[test]
    fn a_double_dash_after_an_option_may_be_its_value() {
        let a = words(&["-T", "--", "--compress-program=sh"]);
        assert_eq!(option_words(&a).len(), 3);
        let b = words(&["f", "--", "-o"]);
        assert_eq!(option_words(&b).len(), 1);
        assert!(has_flag(&a, &["--compress-program"]));
        assert!(has_flag(&words(&["-rp/usr/bin/rm"]), &["-p"]));
    }
}
