//! Shell word normalisation: quote removal, escape decoding, brace expansion,
//! and detection of everything whose value is only known at run time.
//!
//! The classifier looks commands up by their *expanded* words, so that
//! `'r''m'`, `\rm`, `"rm"`, `$'\x72m'` and `{rm,-rf,x}` all reach the table as
//! `rm`. Anything that cannot be resolved statically (parameter expansion,
//! command substitution, arithmetic) is kept as its source text and the word
//! is flagged `dynamic`; callers must treat a dynamic word as "could be
//! anything", never as the text it happens to display.

use brush_parser::ParserOptions;
use brush_parser::word::{
    self, BraceExpressionMember, BraceExpressionOrText, Parameter, ParameterExpr,
    ParameterTransformOp, WordPiece, WordPieceWithSource,
};

/// Most words a single source word may brace-expand into before we give up
/// and treat it as dynamic (bounding work on inputs like `{1..99999999}`).
const MAX_BRACE_WORDS: usize = 64;

/// One argument after expansion of everything that can be expanded statically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Arg {
    /// The word after quote removal. Dynamic parts appear as their source
    /// text (e.g. `$HOME`), which is for display only.
    pub text: String,
    /// Part of the value is only known at run time; `text` is not the value.
    pub dynamic: bool,
    /// Contains an unquoted glob character, so it may expand to other words.
    pub glob: bool,
    /// The *literal* (non-expanded) text contains `$(` or a backtick, i.e.
    /// text that bash would execute if it were later evaluated as an
    /// arithmetic expression or array subscript.
    pub literal_code: bool,
}

impl Arg {
    /// A word whose value is exactly `text` (e.g. an element of a real argv).
    pub fn literal(text: impl Into<String>) -> Self {
        let text = text.into();
        let literal_code = looks_like_code(&text);
        Arg {
            text,
            dynamic: false,
            glob: false,
            literal_code,
        }
    }

    /// Whether the value is known exactly (no expansion, no glob).
    pub fn is_static(&self) -> bool {
        !self.dynamic && !self.glob
    }
}

/// What scanning a source word found besides its arguments.
#[derive(Default, Debug)]
pub(crate) struct WordScan {
    /// The arguments the word expands to (usually one; brace expansion may
    /// give several, an empty unquoted expansion may give none).
    pub args: Vec<Arg>,
    /// Bodies of command substitutions (`$(...)`, backticks, and those nested
    /// inside `${...}` or `$((...))`): each must be classified as a script.
    pub substitutions: Vec<String>,
    /// Problems that make the word unsafe to reason about, as reasons.
    pub hazards: Vec<String>,
    /// Texts bash evaluates as arithmetic: `$((...))` bodies, subscripts
    /// and substring offsets of `${...}` expansions.
    pub arith: Vec<String>,
    /// Variables assigned by `${x:=word}` or `${x=word}`, with whether the
    /// word is dynamic (so the value may be data).
    pub assigned: Vec<(String, bool)>,
}

/// Whether unquoted text is a glob pattern: `*`, `?`, or a `[...]` class
/// (a lone `[`, as in the `[` command, is not).
fn is_glob(s: &str) -> bool {
    s.contains('*') || s.contains('?') || s.find('[').is_some_and(|i| s[i + 1..].contains(']'))
}

fn looks_like_code(s: &str) -> bool {
    s.contains("$(") || s.contains('`')
}

fn options() -> ParserOptions {
    ParserOptions::default()
}

/// Scans one raw source word (as written, quotes included).
pub(crate) fn scan_word(raw: &str) -> WordScan {
    let mut scan = WordScan::default();
    // Too many alternatives: keep the word whole (still scanning it for
    // substitutions) and treat its value as unknown.
    let (expanded, too_many) = match expand_braces(raw) {
        Some(words) => (words, false),
        None => (vec![raw.to_owned()], true),
    };
    for w in expanded {
        let mut b = Builder::default();
        match word::parse(&w, &options()) {
            Ok(pieces) => walk(&w, &pieces, false, &mut b, &mut scan),
            Err(_) => {
                scan.hazards.push(format!(
                    "could not parse the word `{}`",
                    crate::display::clip(&w)
                ));
                b.text.push_str(&w);
                b.dynamic = true;
            }
        }
        if too_many {
            b.dynamic = true;
        }
        // A glob that starts with a wildcard can match file names that
        // start with `-` (such as a file the agent created named
        // `--to-command=sh`), so it may turn into options: treat its value
        // as unknown. `src/*.rs` cannot, and stays static apart from `glob`.
        if b.glob && b.text.starts_with(['*', '?', '[']) {
            b.dynamic = true;
        }
        // Every word is kept, even one that might expand to nothing, so
        // callers always see that something was there.
        scan.args.push(Arg {
            literal_code: looks_like_code(&b.literal_view),
            text: b.text,
            dynamic: b.dynamic,
            glob: b.glob,
        });
    }
    scan
}

/// Scans the body of a here-document that bash expands (its delimiter was
/// not quoted) like a double-quoted word: command substitutions,
/// arithmetic, `${x:=...}` assignments and prompt expansions in it count
/// as they would anywhere else. `None` if it cannot be parsed.
pub(crate) fn scan_heredoc(body: &str) -> Option<WordScan> {
    let pieces = word::parse_heredoc(body, &options()).ok()?;
    let mut scan = WordScan::default();
    let mut b = Builder::default();
    walk(body, &pieces, true, &mut b, &mut scan);
    Some(scan)
}

#[derive(Default)]
struct Builder {
    text: String,
    /// The text with dynamic parts replaced by a NUL, so that `$(` produced by
    /// a real substitution is not mistaken for literal code.
    literal_view: String,
    dynamic: bool,
    glob: bool,
}

impl Builder {
    fn lit(&mut self, s: &str) {
        self.text.push_str(s);
        self.literal_view.push_str(s);
    }

    fn dyn_part(&mut self, source: &str) {
        self.text.push_str(source);
        self.literal_view.push('\0');
        self.dynamic = true;
    }
}

fn source_of<'a>(raw: &'a str, p: &WordPieceWithSource, fallback: &'a str) -> &'a str {
    raw.get(p.start_index..p.end_index).unwrap_or(fallback)
}

fn walk(
    raw: &str,
    pieces: &[WordPieceWithSource],
    quoted: bool,
    b: &mut Builder,
    scan: &mut WordScan,
) {
    for p in pieces {
        match &p.piece {
            WordPiece::Text(s) => {
                if !quoted && is_glob(s) {
                    b.glob = true;
                }
                b.lit(s);
            }
            WordPiece::SingleQuotedText(s) => b.lit(s),
            WordPiece::AnsiCQuotedText(s) => b.lit(&decode_ansi_c(s)),
            WordPiece::DoubleQuotedSequence(inner)
            | WordPiece::GettextDoubleQuotedSequence(inner) => walk(raw, inner, true, b, scan),
            WordPiece::TildeExpansion(_) => {
                // The home directory is static but unknown to us; keep the
                // tilde so path checks can see it refers to $HOME.
                let src = source_of(raw, p, "~");
                b.lit(src);
            }
            WordPiece::EscapeSequence(s) => {
                let mut chars = s.chars();
                chars.next(); // the backslash
                let rest: String = chars.collect();
                // `\<newline>` is a line continuation and disappears.
                if rest != "\n" {
                    b.lit(&rest);
                }
            }
            WordPiece::ParameterExpansion(expr) => {
                let src = source_of(raw, p, "${?}");
                b.dyn_part(src);
                if is_prompt_expansion(expr) {
                    scan.hazards.push(format!(
                        "`{src}` applies prompt expansion, which can run commands"
                    ));
                }
                scan.arith.extend(crate::vars::expansion_arith(src));
                if let ParameterExpr::AssignDefaultValues {
                    parameter,
                    indirect,
                    default_value,
                    ..
                } = expr
                {
                    let dynamic = default_value
                        .as_deref()
                        .is_some_and(|w| w.contains('$') || w.contains('`'));
                    match parameter {
                        _ if *indirect => scan.hazards.push(format!(
                            "`{src}` assigns the variable named by the value of another, which is only known at run time"
                        )),
                        Parameter::Named(name)
                        | Parameter::NamedWithIndex { name, .. }
                        | Parameter::NamedWithAllIndices { name, .. } => {
                            scan.assigned.push((name.clone(), dynamic));
                        }
                        // Positional and special parameters cannot be assigned.
                        _ => {}
                    }
                }
                scan_nested_text(
                    src.strip_prefix("${").and_then(|s| s.strip_suffix('}')),
                    src,
                    scan,
                );
            }
            WordPiece::CommandSubstitution(body)
            | WordPiece::BackquotedCommandSubstitution(body) => {
                let src = source_of(raw, p, "$(...)");
                b.dyn_part(src);
                scan.substitutions.push(body.clone());
            }
            WordPiece::ArithmeticExpression(expr) => {
                let src = source_of(raw, p, "$((...))");
                b.dyn_part(src);
                scan.arith.push(expr.value.clone());
                scan_nested_text(Some(&expr.value), src, scan);
            }
        }
    }
}

/// Looks for command substitutions inside text that the word parser keeps as
/// an unparsed string: the operands of `${...}` and arithmetic expressions.
fn scan_nested_text(inner: Option<&str>, src: &str, scan: &mut WordScan) {
    let Some(inner) = inner else {
        return;
    };
    if !inner.contains('$') && !inner.contains('`') {
        return;
    }
    match word::parse(inner, &options()) {
        Ok(pieces) => {
            let mut throwaway = Builder::default();
            walk(inner, &pieces, false, &mut throwaway, scan);
        }
        Err(_) if looks_like_code(inner) => scan.hazards.push(format!(
            "could not analyse the expansion `{}`",
            crate::display::clip(src)
        )),
        Err(_) => {}
    }
}

fn is_prompt_expansion(expr: &ParameterExpr) -> bool {
    matches!(
        expr,
        ParameterExpr::Transform {
            op: ParameterTransformOp::PromptExpand,
            ..
        }
    )
}

/// The text with every expansion replaced by `1`, for checking whether
/// arithmetic text is well-formed once expanded. `None` if it cannot be
/// parsed as a word.
pub(crate) fn with_placeholders(text: &str) -> Option<String> {
    let pieces = word::parse(text, &options()).ok()?;
    let mut out = String::new();
    for p in pieces {
        match p.piece {
            WordPiece::Text(s) | WordPiece::SingleQuotedText(s) => out.push_str(&s),
            WordPiece::EscapeSequence(s) => out.push_str(s.trim_start_matches('\\')),
            _ => out.push('1'),
        }
    }
    Some(out)
}

/// Decodes the body of a `$'...'` string the way bash does.
pub(crate) fn decode_ansi_c(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = it.next() else {
            out.push('\\');
            break;
        };
        match e {
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\x0b'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match it.peek().and_then(|c| c.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            it.next();
                        }
                        None => break,
                    }
                }
                push_code(&mut out, v);
            }
            'x' | 'u' | 'U' => {
                let max = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut v = 0u32;
                let mut n = 0;
                while n < max {
                    match it.peek().and_then(|c| c.to_digit(16)) {
                        Some(d) => {
                            v = v.wrapping_mul(16).wrapping_add(d);
                            it.next();
                            n += 1;
                        }
                        None => break,
                    }
                }
                if n == 0 {
                    out.push('\\');
                    out.push(e);
                } else {
                    push_code(&mut out, v);
                }
            }
            'c' => {
                if let Some(x) = it.next() {
                    push_code(&mut out, (x as u32) & 0x1f);
                }
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

fn push_code(out: &mut String, v: u32) {
    out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
}

/// Performs bash brace expansion on a raw word, returning raw words (quotes
/// intact). `None` if the expansion would exceed [`MAX_BRACE_WORDS`].
fn expand_braces(raw: &str) -> Option<Vec<String>> {
    if !raw.contains('{') {
        return Some(vec![raw.to_owned()]);
    }
    match word::parse_brace_expansions(raw, &options()) {
        Ok(Some(pieces)) => expand_pieces(&pieces),
        // Not a brace expression (or not parseable as one): bash leaves it.
        _ => Some(vec![raw.to_owned()]),
    }
}

fn expand_pieces(pieces: &[BraceExpressionOrText]) -> Option<Vec<String>> {
    let mut acc = vec![String::new()];
    for piece in pieces {
        let alternatives = match piece {
            BraceExpressionOrText::Text(t) => vec![t.clone()],
            BraceExpressionOrText::Expr(members) => {
                let mut alts = Vec::new();
                for m in members {
                    alts.extend(expand_member(m)?);
                    if alts.len() > MAX_BRACE_WORDS {
                        return None;
                    }
                }
                alts
            }
        };
        if acc.len() * alternatives.len() > MAX_BRACE_WORDS {
            return None;
        }
        acc = acc
            .iter()
            .flat_map(|a| alternatives.iter().map(move |b| format!("{a}{b}")))
            .collect();
    }
    Some(acc)
}

fn expand_member(m: &BraceExpressionMember) -> Option<Vec<String>> {
    match m {
        BraceExpressionMember::Child(pieces) => expand_pieces(pieces),
        BraceExpressionMember::NumberSequence {
            start,
            end,
            increment,
        } => {
            let step = increment.unsigned_abs().max(1);
            let span = start.abs_diff(*end) / step + 1;
            if span > MAX_BRACE_WORDS as u64 {
                return None;
            }
            let mut out = Vec::new();
            let mut v = *start;
            for _ in 0..span {
                out.push(v.to_string());
                v = if start <= end {
                    v + step as i64
                } else {
                    v - step as i64
                };
            }
            Some(out)
        }
        BraceExpressionMember::CharSequence {
            start,
            end,
            increment,
        } => {
            let (s, e) = (*start as u32, *end as u32);
            let step = increment.unsigned_abs().max(1) as u32;
            let mut out = Vec::new();
            let mut v = s;
            loop {
                out.push(char::from_u32(v)?.to_string());
                if out.len() > MAX_BRACE_WORDS {
                    return None;
                }
                if v == e {
                    break;
                }
                v = if s <= e {
                    v.checked_add(step)?
                } else {
                    v.checked_sub(step)?
                };
                if (s <= e && v > e) || (s > e && v < e) {
                    break;
                }
            }
            Some(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(raw: &str) -> Vec<String> {
        scan_word(raw).args.into_iter().map(|a| a.text).collect()
    }

    #[test]
    fn quote_removal() {
        assert_eq!(texts("'r''m'"), ["rm"]);
        assert_eq!(texts("\\rm"), ["rm"]);
        assert_eq!(texts("\"rm\""), ["rm"]);
        assert_eq!(texts("r\\m"), ["rm"]);
        assert_eq!(texts("$'\\x72m'"), ["rm"]);
        assert_eq!(texts("$'\\162m'"), ["rm"]);
    }

    #[test]
    fn braces_expand() {
        assert_eq!(texts("{rm,-rf,x}"), ["rm", "-rf", "x"]);
        assert_eq!(texts("a{1..3}"), ["a1", "a2", "a3"]);
        assert_eq!(texts("'{a,b}'"), ["{a,b}"]);
        let big = scan_word("{1..100000}");
        assert!(big.args[0].dynamic && big.hazards.is_empty());
    }

    #[test]
    fn dynamic_parts() {
        let s = scan_word("\"$X\"");
        assert!(s.args[0].dynamic);
        let s = scan_word("${X:-$(rm -rf x)}");
        assert_eq!(s.substitutions, ["rm -rf x"]);
        let s = scan_word("$((1 + $(id -u)))");
        assert_eq!(s.substitutions, ["id -u"]);
        assert!(!scan_word("${X@P}").hazards.is_empty());
        assert!(scan_word("'a[$(id)]'").args[0].literal_code);
        assert!(!scan_word("\"$(id)\"").args[0].literal_code);
    }
}
