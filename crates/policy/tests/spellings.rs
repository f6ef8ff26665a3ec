//! Property-style tests over the table itself (issue 41): for every option
//! of every table entry that raises its risk (`RISKY_OPTIONS`), every other
//! spelling the program accepts must classify at least as high as the
//! canonical one. The spellings are generated, not listed: every prefix of
//! a long option (ambiguous ones too) with `=value` and a separate value,
//! every position in a short-option cluster, attached values, repeats,
//! options after operands, after a `--` that is an option's value, and a
//! word only known at run time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_policy::Risk::{self, ReadOnly};
use capstan_policy::{OptionValue, RISKY_OPTIONS, classify_shell, syntax};

/// The words of a command line: `git log` is two.
fn head(command: &str) -> Vec<String> {
    command.split(' ').map(str::to_owned).collect()
}

fn line(words: &[String]) -> String {
    words.join(" ")
}

/// A letter to put next to `letter` in a cluster: not one whose value
/// would swallow the rest of the cluster.
fn filler(letter: char, short_val: &str) -> char {
    "qvzbjkyQ"
        .chars()
        .find(|c| *c != letter && !short_val.contains(*c))
        .unwrap()
}

/// Every other spelling of `name` (with its value, if it takes one), as
/// the argument words that replace the canonical ones.
fn spellings(command: &str, name: &str, value: OptionValue) -> Vec<Vec<String>> {
    let syn = syntax(command);
    let v = "VAL".to_owned();
    let s = |w: &[&str]| w.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
    let mut out: Vec<Vec<String>> = Vec::new();
    if let Some(long) = name.strip_prefix("--") {
        for end in 1..=long.len() {
            let prefix = &long[..end];
            if prefix != long && syn.exact.contains(&prefix) {
                continue; // another option, spelled out in full
            }
            let p = format!("--{prefix}");
            match value {
                OptionValue::Required => {
                    out.push(vec![format!("{p}={v}")]);
                    out.push(vec![p.clone(), v.clone()]);
                    out.push(vec!["f".into(), format!("{p}={v}")]);
                    out.push(vec!["-q".into(), "--".into(), format!("{p}={v}")]);
                }
                OptionValue::Optional => {
                    out.push(vec![format!("{p}={v}")]);
                    out.push(vec![p.clone()]);
                    out.push(vec!["f".into(), p.clone()]);
                }
                OptionValue::None => {
                    out.push(vec![p.clone()]);
                    out.push(vec!["f".into(), p.clone()]);
                    out.push(vec!["-q".into(), "--".into(), p.clone()]);
                }
            }
        }
        out.push(s(&[&format!("{name}={v}"), &format!("{name}={v}")]));
    } else if let Some(letter) = name.strip_prefix('-').filter(|l| l.chars().count() == 1) {
        let c = letter.chars().next().unwrap();
        let f = filler(c, syn.short_val);
        match value {
            OptionValue::Required => {
                out.push(vec![format!("-{f}{c}"), v.clone()]);
                out.push(vec![format!("-{c}{v}")]);
                out.push(vec![format!("-{f}{c}{v}")]);
                out.push(vec![format!("-{f}{f}{c}"), v.clone()]);
                out.push(vec!["f".into(), format!("-{c}"), v.clone()]);
                out.push(vec![format!("-{c}"), v.clone(), format!("-{c}"), v.clone()]);
                out.push(vec!["-q".into(), "--".into(), format!("-{c}"), v.clone()]);
            }
            OptionValue::Optional => {
                out.push(vec![format!("-{f}{c}")]);
                out.push(vec![format!("-{c}{v}")]);
                out.push(vec![format!("-{f}{c}{v}")]);
                out.push(vec!["f".into(), format!("-{c}")]);
            }
            OptionValue::None => {
                out.push(vec![format!("-{f}{c}")]);
                out.push(vec![format!("-{c}{f}")]);
                out.push(vec![format!("-{f}{c}{f}")]);
                out.push(vec!["f".into(), format!("-{f}{c}")]);
                out.push(vec![format!("-{c}"), format!("-{c}")]);
                out.push(vec!["-q".into(), "--".into(), format!("-{c}")]);
            }
        }
    } else {
        // A single-dash long name: only its exact spellings.
        out.push(vec![name.to_owned()]);
    }
    // A word only known at run time may be this option.
    out.push(vec!["\"$X\"".into()]);
    out
}

fn canonical(name: &str, value: OptionValue) -> Vec<String> {
    match value {
        OptionValue::Required => vec![name.to_owned(), "VAL".into()],
        _ => vec![name.to_owned()],
    }
}

#[test]
fn every_spelling_of_a_risky_option_is_at_least_as_risky() {
    let mut generated = 0usize;
    let mut failures = Vec::new();
    for row in RISKY_OPTIONS {
        for command in row.commands {
            for name in row.names {
                let mut words = head(command);
                words.extend(canonical(name, row.value));
                words.push("f".into());
                let canon = classify_shell(&line(&words));
                if canon.risk < row.risk {
                    failures.push(format!(
                        "canonical `{}` is {} but the table says {}: {:?}",
                        line(&words),
                        canon.risk,
                        row.risk,
                        canon.reasons
                    ));
                    continue;
                }
                for spelling in spellings(command, name, row.value) {
                    let mut words = head(command);
                    words.extend(spelling);
                    words.push("f".into());
                    let text = line(&words);
                    generated += 1;
                    let c = classify_shell(&text);
                    if c.risk < canon.risk {
                        failures.push(format!(
                            "`{text}` is {} but `{command} {name}` is {}: {:?}",
                            c.risk, canon.risk, c.reasons
                        ));
                    }
                }
            }
        }
    }
    eprintln!(
        "{generated} spellings of {} table rows checked",
        RISKY_OPTIONS.len()
    );
    assert!(generated > 1000, "only {generated} spellings generated");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every risky option is above read_only in its canonical spelling, and
/// the table lists one for every command whose rule used to match options
/// by hand.
#[test]
fn the_table_covers_the_option_checks() {
    let commands: Vec<&str> = RISKY_OPTIONS
        .iter()
        .flat_map(|r| r.commands.iter().copied())
        .collect();
    for expected in [
        "sort",
        "hash",
        "mapfile",
        "tar",
        "rsync",
        "less",
        "iconv",
        "date",
        "git log",
        "git grep",
        "git branch",
        "git rebase",
        "git fetch",
        "git clone",
        "cargo",
        "pip list",
    ] {
        assert!(commands.contains(&expected), "{expected}");
    }
    for row in RISKY_OPTIONS {
        assert!(row.risk > ReadOnly, "{row:?}");
        let _: Risk = row.risk;
    }
}
