//! Shell variables whose values bash may evaluate as code.
//!
//! Bash evaluates arithmetic (`$(( ))`, `(( ))`, `let`, `[[ a -eq b ]]`,
//! array subscripts, `${x:offset}`, assignments to `declare -i` variables)
//! recursively: a variable whose *value* is `a[$(rm x)]` runs `rm x` when
//! its name appears in an arithmetic context. So a variable read from a file
//! or from a command's output (`read`, `mapfile`, `x=$(cat f)`, `for x in
//! $(...)`, `getopts`, ...) must never reach arithmetic; the walker records
//! where each variable gets its value ("tainted" when the value may be data)
//! and where arithmetic names it, and the two meet in `finish`.
//!
//! It also reads the arguments of the builtins that assign variables named
//! by an argument or an option (`read`, `mapfile`, `printf -v`, `wait -p`,
//! `getopts`, `declare` and friends), so that every such assignment is
//! checked like a plain `NAME=value` (see `parse.rs`).

use crate::word::Arg;

/// Variables bash itself (or the sandbox environment) fills with data: file
/// contents, paths, matches, the last argument of the previous command.
const DATA: &[&str] = &[
    "_",
    "REPLY",
    "MAPFILE",
    "OPTARG",
    "BASH_REMATCH",
    "PWD",
    "OLDPWD",
    "DIRSTACK",
    "BASH_ARGV",
    "BASH_COMMAND",
    "BASH_SOURCE",
    "BASH_EXECUTION_STRING",
    "FUNCNAME",
    "COPROC",
    "HOME",
    "TMPDIR",
    "PATH",
    "LANG",
    "LC_ALL",
    "TERM",
    "HOSTNAME",
    "READLINE_LINE",
    "COMP_LINE",
    "COMP_WORDS",
];

/// A variable name as bash accepts it in an assignment.
pub(crate) fn is_name(s: &str) -> bool {
    s.chars().next().is_some_and(is_name_start) && s.chars().all(is_name_char)
}

/// The value-taking options of a builtin that names variables it assigns,
/// or `None` for commands that do not. Read as bash's `internal_getopt`
/// does: clusters, values attached or in the next word, `--` ends them.
pub(crate) fn builtin_options(name: &str) -> Option<&'static str> {
    Some(match name {
        "read" => "adinNptu",
        "mapfile" | "readarray" => "dnOsuCc",
        "printf" => "v",
        "wait" => "p",
        "declare" | "typeset" | "local" | "export" | "readonly" | "unset" | "getopts" | "test"
        | "[" | "cd" | "pushd" => "",
        _ => return None,
    })
}

/// A builtin's arguments, parsed (see [`parse_builtin`]).
#[derive(Debug, Default)]
pub(crate) struct Builtin {
    /// Every option letter with its sign (`-` or `+`) and value.
    pub opts: Vec<(char, char, Option<Arg>)>,
    /// The operands (variable names, for the builtins that assign).
    pub operands: Vec<Arg>,
    /// A word in option position is only known at run time, so it may be
    /// any option (it is also the first operand).
    pub dynamic_options: bool,
}

impl Builtin {
    pub(crate) fn has(&self, sign: char, letter: char) -> bool {
        self.opts.iter().any(|(s, l, _)| *s == sign && *l == letter)
    }

    /// The values given to the option `-letter`.
    pub(crate) fn values(&self, letter: char) -> Vec<Arg> {
        self.opts
            .iter()
            .filter(|(s, l, _)| *s == '-' && *l == letter)
            .filter_map(|(_, _, v)| v.clone())
            .collect()
    }
}

/// Parses a builtin's arguments the way bash's `internal_getopt` does:
/// every letter of a cluster is an option, a value-taking letter (in
/// `with_value`) takes the rest of its cluster or the next word, `--` or
/// the first word that is not an option ends the options.
pub(crate) fn parse_builtin(args: &[Arg], with_value: &str) -> Builtin {
    let mut out = Builtin::default();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let t = a.text.as_str();
        if a.dynamic {
            // `"$f"` may expand to `-n`; `x=$v` cannot be an option.
            out.dynamic_options = !t.starts_with(|c: char| is_name_char(c));
            break;
        }
        if t == "--" {
            i += 1;
            break;
        }
        let Some(sign) = t.chars().next().filter(|c| *c == '-' || *c == '+') else {
            break;
        };
        if t.len() < 2 {
            break;
        }
        let letters: Vec<char> = t[1..].chars().collect();
        for (j, &letter) in letters.iter().enumerate() {
            if with_value.contains(letter) {
                let rest: String = letters[j + 1..].iter().collect();
                let value = if rest.is_empty() {
                    i += 1;
                    args.get(i).cloned()
                } else {
                    Some(Arg::literal(rest))
                };
                out.opts.push((sign, letter, value));
                break;
            }
            out.opts.push((sign, letter, None));
        }
        i += 1;
    }
    out.operands = args.get(i..).unwrap_or(&[]).to_vec();
    out
}

/// Whether a variable referenced by name in arithmetic may hold data that
/// bash would evaluate: a positional parameter (`1`, `@`, a function's
/// arguments are anything) or a variable bash fills with data. Variables
/// assigned in the command line are judged by the walker.
pub(crate) fn holds_data(name: &str) -> bool {
    DATA.contains(&name) || name == "@" || name == "*" || name.chars().all(|c| c.is_ascii_digit())
}

/// What an arithmetic text refers to.
#[derive(Default, Debug)]
pub(crate) struct ArithRefs {
    /// Variable names, bare (`x`) or expanded (`$x`, `${x}`, `${x[i]}`).
    pub names: Vec<String>,
    /// It contains a command substitution, whose output is evaluated.
    pub substitution: bool,
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Lexes an arithmetic expression (before or after expansion: expansions
/// keep their source text) for the variables it names. Over-approximates:
/// words inside `${x:-word}` count as names too.
pub(crate) fn arith_refs(text: &str) -> ArithRefs {
    let mut refs = ArithRefs::default();
    let s: Vec<char> = text.chars().collect();
    let mut i = 0;
    let name_at = |i: &mut usize| -> String {
        let start = *i;
        while *i < s.len() && is_name_char(s[*i]) {
            *i += 1;
        }
        s[start..*i].iter().collect()
    };
    while i < s.len() {
        let c = s[i];
        if c.is_ascii_digit() {
            // A number, with a base (`16#ff`) or prefix (`0x1f`).
            while i < s.len() && (is_name_char(s[i]) || s[i] == '#' || s[i] == '@') {
                i += 1;
            }
        } else if is_name_start(c) {
            refs.names.push(name_at(&mut i));
        } else if c == '`' {
            refs.substitution = true;
            i += 1;
        } else if c == '$' {
            i += 1;
            match s.get(i) {
                Some('(') if s.get(i + 1) == Some(&'(') => i += 2,
                Some('(') => {
                    refs.substitution = true;
                    i += 1;
                }
                Some('{') => {
                    i += 1;
                    // `${#x}` (length) and `${!x}` (indirection) still
                    // name `x`; indirection evaluates its value as a name.
                    while i < s.len() && (s[i] == '#' || s[i] == '!') {
                        i += 1;
                    }
                    match s.get(i) {
                        Some(&d) if d.is_ascii_digit() || d == '@' || d == '*' => {
                            refs.names.push(d.to_string());
                            i += 1;
                        }
                        Some(&d) if is_name_start(d) => refs.names.push(name_at(&mut i)),
                        _ => {}
                    }
                }
                Some(&d) if d.is_ascii_digit() || d == '@' || d == '*' => {
                    refs.names.push(d.to_string());
                    i += 1;
                }
                Some(&d) if is_name_start(d) => refs.names.push(name_at(&mut i)),
                _ => {}
            }
        } else {
            i += 1;
        }
    }
    refs
}

/// Whether an assigned value is a number whatever the data: an arithmetic
/// expansion (itself checked where it appears), `$#`, `$?`, `$$`, `$!`, or
/// `${#x}`. Anything else dynamic may carry data.
pub(crate) fn numeric_value(text: &str) -> bool {
    if let Some(inner) = text.strip_prefix("$((").and_then(|t| t.strip_suffix("))")) {
        return !inner.contains("))");
    }
    if matches!(text, "$#" | "$?" | "$$" | "$!") {
        return true;
    }
    text.strip_prefix("${#")
        .and_then(|t| t.strip_suffix('}'))
        .is_some_and(|n| !n.is_empty() && n.chars().all(is_name_char))
}

/// Splits a name operand (`v`, `a[i]`, `a[$i]=x`) of a builtin that assigns
/// or tests a variable into the name and its subscript, if any.
pub(crate) fn name_and_subscript(word: &str) -> (&str, Option<&str>) {
    let lhs = word.split_once('=').map_or(word, |(l, _)| l);
    let lhs = lhs.strip_suffix('+').unwrap_or(lhs);
    match lhs.split_once('[') {
        Some((name, rest)) => (name, Some(rest.strip_suffix(']').unwrap_or(rest))),
        None => (lhs, None),
    }
}

/// The subscript and substring parts of a `${...}` expansion, which bash
/// evaluates as arithmetic: `${a[i]}`, `${x:off:len}`, `${#a[i]}`.
pub(crate) fn expansion_arith(src: &str) -> Vec<String> {
    let Some(inner) = src.strip_prefix("${").and_then(|s| s.strip_suffix('}')) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // `${!x}` evaluates the value of `x` as a variable name, subscript
    // included (`${!prefix*}` and `${!a[@]}` only list names).
    if let Some(target) = inner.strip_prefix('!')
        && !target.ends_with(['*', '@'])
        && !target.ends_with("[@]")
        && !target.ends_with("[*]")
    {
        let name: String = target.chars().take_while(|c| is_name_char(*c)).collect();
        out.push(name);
    }
    let body = inner.trim_start_matches(['#', '!']);
    let name_len = body
        .find(|c: char| !is_name_char(c))
        .unwrap_or(body.len())
        .max(usize::from(body.starts_with(['@', '*'])));
    let rest = &body[name_len..];
    let rest = match rest.strip_prefix('[') {
        Some(r) => {
            let (sub, after) = match r.find(']') {
                Some(end) => (&r[..end], &r[end + 1..]),
                None => (r, ""),
            };
            if sub != "@" && sub != "*" {
                out.push(sub.to_owned());
            }
            after
        }
        None => rest,
    };
    if let Some(after) = rest.strip_prefix(':')
        && !after.starts_with(['-', '=', '?', '+'])
    {
        out.push(after.to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_names() {
        let r = arith_refs("i < n && a[j] + 16#ff + 0x1F + $k + ${m[2]} + ${#p} + $1");
        assert_eq!(r.names, ["i", "n", "a", "j", "k", "m", "p", "1"]);
        assert!(!r.substitution);
        assert!(arith_refs("$(cat f) + 1").substitution);
        assert!(arith_refs("`cat f`").substitution);
        assert!(!arith_refs("$((1 + 2))").substitution);
    }

    #[test]
    fn expansion_parts() {
        assert_eq!(expansion_arith("${a[$v]}"), ["$v"]);
        assert_eq!(expansion_arith("${x:n:2}"), ["n:2"]);
        assert_eq!(expansion_arith("${x:-d}"), Vec::<String>::new());
        assert_eq!(expansion_arith("${a[@]}"), Vec::<String>::new());
        assert_eq!(expansion_arith("${#a[i]}"), ["i"]);
        assert_eq!(expansion_arith("$x"), Vec::<String>::new());
        assert_eq!(expansion_arith("${!v}"), ["v"]);
        assert_eq!(expansion_arith("${!pre*}"), Vec::<String>::new());
    }

    #[test]
    fn numeric_values() {
        assert!(numeric_value("$((i + 1))"));
        assert!(numeric_value("${#x}"));
        assert!(!numeric_value("$(wc -l < f)"));
        assert!(!numeric_value("$x"));
        assert!(!numeric_value("$((1))$(cat f)$((2))"));
    }
}
