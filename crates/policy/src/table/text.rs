//! Text processors with embedded languages (`sed`, `awk`).

use super::Cmd;
use super::args::{any_dynamic, opts};
use super::dispatch::is_null_device;
use crate::display;
use crate::risk::Risk;
use crate::word::Arg;
pub(super) fn sed(c: &mut Cmd<'_>) {
    let args = c.args;
    if any_dynamic(opts(args)) {
        c.unknown(
            "has arguments from a variable, which could be `-i` or a script that runs commands",
        );
        return;
    }
    let mut scripts: Vec<String> = Vec::new();
    let mut in_place = false;
    let mut script_file = false;
    let mut first_operand: Option<usize> = None;
    let mut i = 0;
    let mut end_of_opts = false;
    while i < args.len() {
        let t = args[i].text.as_str();
        if end_of_opts || !t.starts_with('-') || t == "-" {
            if first_operand.is_none() {
                first_operand = Some(i);
            }
            i += 1;
            continue;
        }
        if t == "--" {
            end_of_opts = true;
            i += 1;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            match name {
                "in-place" => in_place = true,
                "expression" => match value {
                    Some(v) => scripts.push(v),
                    None => {
                        scripts.push(args.get(i + 1).map(|a| a.text.clone()).unwrap_or_default());
                        i += 1;
                    }
                },
                "file" => script_file = true,
                "line-length" if value.is_none() => i += 1,
                "quiet" | "silent" | "regexp-extended" | "separate" | "unbuffered"
                | "null-data" | "zero-terminated" | "posix" | "debug" | "sandbox"
                | "follow-symlinks" | "binary" | "line-length" | "help" | "version" => {}
                _ => {
                    c.unknown(&format!("option `{}` is not understood", display::clip(t)));
                    return;
                }
            }
            i += 1;
            continue;
        }
        let chars: Vec<char> = t[1..].chars().collect();
        let mut j = 0;
        while j < chars.len() {
            match chars[j] {
                'n' | 'E' | 'r' | 's' | 'u' | 'z' | 'b' => {}
                'i' => {
                    in_place = true;
                    break; // the rest of the cluster is the backup suffix
                }
                'e' | 'f' | 'l' => {
                    let rest: String = chars[j + 1..].iter().collect();
                    let value = if rest.is_empty() {
                        i += 1;
                        args.get(i).map(|a| a.text.clone()).unwrap_or_default()
                    } else {
                        rest
                    };
                    match chars[j] {
                        'e' => scripts.push(value),
                        'f' => script_file = true,
                        _ => {}
                    }
                    break;
                }
                other => {
                    c.unknown(&format!("option `-{other}` is not understood"));
                    return;
                }
            }
            j += 1;
        }
        i += 1;
    }
    if script_file {
        c.unknown("runs a sed script from a file, which may run commands");
        return;
    }
    if scripts.is_empty() {
        match first_operand {
            Some(idx) if args[idx].dynamic => {
                c.unknown("runs a sed script that comes from a variable");
                return;
            }
            Some(idx) => scripts.push(args[idx].text.clone()),
            None => {
                c.unknown("has no script");
                return;
            }
        }
    }
    let mut risk = if in_place {
        Risk::Write
    } else {
        Risk::ReadOnly
    };
    for s in &scripts {
        match sed_script_risk(s) {
            Ok(r) => risk = risk.max(r),
            Err(why) => {
                c.unknown(&why);
                return;
            }
        }
    }
    match risk {
        Risk::ReadOnly => c.read_only(),
        _ if in_place => c.risk(Risk::Write, "edits files in place"),
        _ => c.risk(risk, "writes files from its script"),
    }
}

/// Walks a sed script just far enough to find the commands that write
/// files (`w`, `W`, `s///w`) or run programs (`e`, `s///e`). Anything it
/// does not understand is an error, i.e. `unknown`.
fn sed_script_risk(script: &str) -> Result<Risk, String> {
    let s: Vec<char> = script.chars().collect();
    let mut i = 0;
    let mut risk = Risk::ReadOnly;
    let err = |what: &str| Err(format!("sed script {what}, so it may run commands"));
    let to_eol = |i: &mut usize| {
        while *i < s.len() && s[*i] != '\n' {
            *i += 1;
        }
    };
    // Reads a filename argument (to end of line) and returns it.
    let filename = |i: &mut usize| -> String {
        while *i < s.len() && s[*i] == ' ' {
            *i += 1;
        }
        let start = *i;
        while *i < s.len() && s[*i] != '\n' {
            *i += 1;
        }
        s[start..*i].iter().collect()
    };
    let write_risk = |f: &str| {
        if is_null_device(f.trim()) {
            Risk::ReadOnly
        } else {
            Risk::Write
        }
    };
    // Skips a delimited regex/replacement part starting after the delimiter.
    let delimited = |i: &mut usize, d: char| -> bool {
        while *i < s.len() {
            if s[*i] == '\\' {
                *i += 2;
                continue;
            }
            if s[*i] == d {
                *i += 1;
                return true;
            }
            if s[*i] == '\n' && d != '\n' {
                return false;
            }
            *i += 1;
        }
        false
    };
    while i < s.len() {
        let ch = s[i];
        if ch.is_whitespace() || ch == ';' {
            i += 1;
            continue;
        }
        // Addresses.
        loop {
            if i < s.len() && (s[i].is_ascii_digit() || s[i] == '$' || s[i] == '~' || s[i] == '+') {
                while i < s.len()
                    && (s[i].is_ascii_digit() || s[i] == '$' || s[i] == '~' || s[i] == '+')
                {
                    i += 1;
                }
            } else if i < s.len() && s[i] == '/' {
                i += 1;
                if !delimited(&mut i, '/') {
                    return err("has an unterminated address");
                }
                while i < s.len() && (s[i] == 'I' || s[i] == 'M') {
                    i += 1;
                }
            } else if i + 1 < s.len() && s[i] == '\\' {
                let d = s[i + 1];
                i += 2;
                if !delimited(&mut i, d) {
                    return err("has an unterminated address");
                }
                while i < s.len() && (s[i] == 'I' || s[i] == 'M') {
                    i += 1;
                }
            } else {
                break;
            }
            if i < s.len() && s[i] == ',' {
                i += 1;
                continue;
            }
            break;
        }
        while i < s.len() && (s[i] == ' ' || s[i] == '!') {
            i += 1;
        }
        if i >= s.len() {
            break;
        }
        let cmd = s[i];
        i += 1;
        match cmd {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x'
            | 'z' | 'F' => {}
            'l' | 'L' | 'q' | 'Q' => {
                while i < s.len() && (s[i].is_ascii_digit() || s[i] == ' ') {
                    i += 1;
                }
            }
            '#' | ':' => to_eol(&mut i),
            'b' | 't' | 'T' | 'v' => {
                while i < s.len() && s[i] != ';' && s[i] != '\n' && s[i] != '}' {
                    i += 1;
                }
            }
            'a' | 'i' | 'c' => {
                // Text runs to the end of the line; `\` continues it.
                while i < s.len() && s[i] != '\n' {
                    if s[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            'r' | 'R' => {
                filename(&mut i);
            }
            'w' | 'W' => {
                let f = filename(&mut i);
                risk = risk.max(write_risk(&f));
            }
            'e' => return err("uses the `e` command, which runs a shell command"),
            's' | 'y' => {
                let Some(&d) = s.get(i) else {
                    return err("is truncated");
                };
                if d == '\\' || d == '\n' {
                    return err("uses an unusual delimiter");
                }
                i += 1;
                if !delimited(&mut i, d) || !delimited(&mut i, d) {
                    return err("has an unterminated `s` or `y` command");
                }
                if cmd == 's' {
                    while i < s.len() {
                        match s[i] {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => i += 1,
                            'e' => {
                                return err(
                                    "uses the `e` flag, which runs the result as a command",
                                );
                            }
                            'w' => {
                                i += 1;
                                let f = filename(&mut i);
                                risk = risk.max(write_risk(&f));
                            }
                            _ => break,
                        }
                    }
                }
            }
            _ => return err(&format!("has a command `{cmd}` that is not understood")),
        }
    }
    Ok(risk)
}

pub(super) fn awk(c: &mut Cmd<'_>) {
    let args = c.args;
    let mut i = 0;
    // Every `-e`/`--source` program counts, and the first operand is the
    // program only when there is none.
    let mut sources: Vec<&Arg> = Vec::new();
    let mut program: Option<&Arg> = None;
    while i < args.len() {
        let a = &args[i];
        if a.dynamic {
            c.unknown("has a program or options that come from a variable");
            return;
        }
        let t = a.text.as_str();
        match t {
            "-F" | "-v" => i += 2,
            "--" => {
                if sources.is_empty() {
                    program = args.get(i + 1);
                }
                break;
            }
            _ if t.starts_with("-F") || t.starts_with("-v") => i += 1,
            "-f" | "--file" | "-i" | "--include" | "-l" | "--load" | "-E" | "--exec" => {
                c.unknown("loads awk code or extensions from a file");
                return;
            }
            "-e" | "--source" => {
                match args.get(i + 1) {
                    Some(p) => sources.push(p),
                    None => {
                        c.unknown("has `-e` without a program");
                        return;
                    }
                }
                i += 2;
            }
            _ if t.starts_with('-') && t.len() > 1 => {
                c.unknown(&format!("option `{}` is not understood", display::clip(t)));
                return;
            }
            _ => {
                if sources.is_empty() {
                    program = Some(a);
                }
                break;
            }
        }
    }
    if !sources.is_empty() {
        for p in &sources {
            if p.dynamic || awk_program_runs(&p.text) {
                c.unknown(
                    "has a program that may run commands or write files (`system`, `|` or `>`), or that comes from a variable",
                );
                return;
            }
        }
        c.read_only();
        return;
    }
    match program {
        None => c.unknown("has no program"),
        Some(p) if p.dynamic => c.unknown("runs a program that comes from a variable"),
        Some(p) => {
            if awk_program_runs(&p.text) {
                c.unknown(
                    "has a program that may run commands or write files (`system`, `|` or `>`)",
                );
            } else {
                c.read_only();
            }
        }
    }
}

/// Whether an awk program may run commands or write files.
fn awk_program_runs(text: &str) -> bool {
    text.contains("system") || text.contains('>') || text.contains('|') || text.contains('@')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sed_scripts() {
        assert_eq!(sed_script_risk("s/a/b/g"), Ok(Risk::ReadOnly));
        assert_eq!(sed_script_risk("1,5p;$d"), Ok(Risk::ReadOnly));
        assert_eq!(sed_script_risk("/x/w out.txt"), Ok(Risk::Write));
        assert_eq!(sed_script_risk("s/a/b/w out"), Ok(Risk::Write));
        assert!(sed_script_risk("1e rm -rf x").is_err());
        assert!(sed_script_risk("s/.*/rm x/e").is_err());
        assert!(sed_script_risk("s|a|w|g").is_ok());
    }
}
