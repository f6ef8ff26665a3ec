//! reStructuredText, line based (docutils itself is Python; no Rust crate parses rST).
//!
//! What is recognised, following the docutils rules where they matter for chunking:
//! * section titles: a line underlined (optionally also overlined) by one punctuation
//!   character repeated; the underline must be at least as long as the title or at least
//!   4 characters long (shorter ones are text in docutils too). The level is the order of
//!   first appearance of each (character, overlined) style in the file;
//! * literal blocks: the indented block after a paragraph ending in `::`;
//! * code directives (`code-block`, `code`, `sourcecode`, `doctest`, ...) and doctest
//!   blocks (`>>>`): kept whole as code, the directive line and options left out;
//! * comments, hyperlink targets, substitution definitions and directives without
//!   retrievable prose (`toctree`, `index`, `image`, `raw`, ...) are dropped;
//! * other directives (`note`, `function`, ...) keep their body as prose, and their
//!   directive line too when it carries an argument (a signature, a title).

use std::borrow::Cow;

use crate::chunk::{Block, Line};
use crate::lines::{line_no, split_lines};

/// Punctuation that may adorn a section title (the 7-bit printable non-alphanumerics).
const ADORNMENT: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// Directives whose body is code: one unsplit block.
const CODE_DIRECTIVES: &[&str] = &[
    "code-block",
    "code",
    "sourcecode",
    "doctest",
    "testcode",
    "testoutput",
    "parsed-literal",
    "productionlist",
    "math",
];

/// Directives dropped with their body: navigation, markup plumbing, non-text content.
const SKIP_DIRECTIVES: &[&str] = &[
    "toctree",
    "contents",
    "index",
    "highlight",
    "sectionauthor",
    "moduleauthor",
    "codeauthor",
    "image",
    "include",
    "literalinclude",
    "raw",
    "tabularcolumns",
    "meta",
    "currentmodule",
    "testsetup",
    "testcleanup",
    "kernel-doc",
    "kernel-include",
    "kernel-feat",
    "kernel-abi",
    "sectnum",
    "default-role",
    "role",
];

/// Directives whose line is dropped even with an argument (the argument is not prose).
const LINE_ONLY_DIRECTIVES: &[&str] = &["only", "ifconfig", "container", "class", "cssclass"];

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '\t']).len()
}

fn blank(line: &str) -> bool {
    line.trim().is_empty()
}

/// `Some((char, length))` if the line is one adornment character repeated (2 or more).
fn adornment(line: &str) -> Option<(char, usize)> {
    let t = line.trim_end();
    let c = t.chars().next()?;
    if !ADORNMENT.contains(c) || !t.chars().all(|x| x == c) {
        return None;
    }
    let n = t.chars().count();
    (n >= 2).then_some((c, n))
}

/// A section title starting at `i`: `(title text line index, style, lines consumed)`.
fn title_at(lines: &[&str], i: usize) -> Option<(usize, (char, bool), usize)> {
    let line = lines[i];
    if indent(line) != 0 {
        return None;
    }
    if let Some((c, n)) = adornment(line) {
        // Overline + title + underline of the same character; the title may be inset.
        let title = lines.get(i + 1)?;
        let (uc, un) = adornment(lines.get(i + 2)?)?;
        let width = title.trim().chars().count();
        if uc == c && !blank(title) && adornment(title).is_none() && width <= n.max(un) {
            return Some((i + 1, (c, true), 3));
        }
        return None;
    }
    let (_, n) = adornment(lines.get(i + 1)?)?;
    let width = line.trim_end().chars().count();
    let c = lines[i + 1].chars().next()?;
    if n >= 4 || n >= width {
        return Some((i, (c, false), 2));
    }
    None
}

enum Markup<'a> {
    Directive {
        name: &'a str,
        argument: &'a str,
    },
    /// Comments, targets and substitution definitions.
    Drop,
    /// Footnotes and citations: prose.
    Prose,
}

fn explicit_markup(line: &str) -> Option<Markup<'_>> {
    let t = line.trim_start();
    let rest = if t == ".." {
        ""
    } else {
        t.strip_prefix(".. ")?
    };
    let rest = rest.trim_start();
    if rest.starts_with('[') {
        return Some(Markup::Prose);
    }
    if rest.starts_with('_') || rest.starts_with('|') {
        return Some(Markup::Drop);
    }
    if let Some(pos) = rest.find("::") {
        let name = &rest[..pos];
        let after = &rest[pos + 2..];
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_:+.".contains(c))
            && (after.is_empty() || after.starts_with([' ', '\t']));
        if valid {
            return Some(Markup::Directive {
                name,
                argument: after.trim(),
            });
        }
    }
    Some(Markup::Drop)
}

/// Index one past the indented region that follows line `i` (lines blank or indented more
/// than `base`).
fn region_end(lines: &[&str], i: usize, base: usize) -> usize {
    let mut j = i + 1;
    while j < lines.len() && (blank(lines[j]) || indent(lines[j]) > base) {
        j += 1;
    }
    j
}

/// Lines `from..to`, dedented by their common indentation, with their line numbers.
fn dedented<'a>(lines: &[&'a str], from: usize, to: usize) -> Vec<Line<'a>> {
    let min = lines[from..to]
        .iter()
        .filter(|l| !blank(l))
        .map(|l| indent(l))
        .min()
        .unwrap_or(0);
    (from..to)
        .map(|k| {
            let l = lines[k].trim_end();
            let cut = if blank(l) { l.len() } else { min.min(l.len()) };
            (line_no(k), Cow::Borrowed(&l[cut..]))
        })
        .collect()
}

pub(crate) fn blocks(text: &str) -> Vec<Block<'_>> {
    let lines = split_lines(text);
    let n = lines.len();
    let mut out = Vec::new();
    let mut styles: Vec<(char, bool)> = Vec::new();
    // Indentation of a paragraph that ended in `::`: the next more-indented block is literal.
    let mut literal_base: Option<usize> = None;
    let mut i = 0;
    while i < n {
        let line = lines[i];
        if blank(line) {
            i += 1;
            continue;
        }
        let ind = indent(line);
        if let Some(base) = literal_base.take()
            && ind > base
        {
            let j = region_end(&lines, i, base);
            out.push(Block::code(dedented(&lines, i, j)));
            i = j;
            continue;
        }
        if let Some((t, style, consumed)) = title_at(&lines, i) {
            let level = match styles.iter().position(|s| *s == style) {
                Some(p) => p,
                None => {
                    styles.push(style);
                    styles.len() - 1
                }
            };
            let level = u32::try_from(level + 1).unwrap_or(u32::MAX);
            out.push(Block::heading(level, lines[t], line_no(t)));
            i += consumed;
            continue;
        }
        if adornment(line).is_some_and(|(_, len)| len >= 4) {
            // A transition (horizontal rule): no text.
            i += 1;
            continue;
        }
        let markup = explicit_markup(line);
        match &markup {
            Some(Markup::Drop) => {
                i = region_end(&lines, i, ind);
                continue;
            }
            Some(Markup::Directive { name, argument }) => {
                let name = name.rsplit(':').next().unwrap_or(name);
                if SKIP_DIRECTIVES.contains(&name) {
                    i = region_end(&lines, i, ind);
                    continue;
                }
                if CODE_DIRECTIVES.contains(&name) {
                    let j = region_end(&lines, i, ind);
                    // Skip the `:option: value` lines right after the directive line.
                    let mut k = i + 1;
                    while k < j && lines[k].trim_start().starts_with(':') {
                        k += 1;
                    }
                    let body = dedented(&lines, k, j);
                    if body.iter().any(|(_, l)| !blank(l)) {
                        out.push(Block::code(body));
                    }
                    i = j;
                    continue;
                }
                if argument.is_empty() || LINE_ONLY_DIRECTIVES.contains(&name) {
                    // Drop the directive line and its options; the body is scanned as usual.
                    i += 1;
                    while i < n && !blank(lines[i]) && lines[i].trim_start().starts_with(':') {
                        i += 1;
                    }
                    continue;
                }
            }
            Some(Markup::Prose) | None => {}
        }
        let mut j = i;
        while j < n && !blank(lines[j]) {
            j += 1;
        }
        let para = dedented(&lines, i, j);
        let first = para[0].1.trim_start();
        let last = para[para.len() - 1].1.trim_end();
        if markup.is_none() && last.ends_with("::") {
            literal_base = Some(ind);
        }
        if para.len() == 1 && last == "::" {
            // An expanded literal-block marker alone: no text of its own.
        } else if first.starts_with(">>>") {
            out.push(Block::code(para));
        } else {
            out.push(Block::prose(para));
        }
        i = j;
    }
    out
}

/// Whether a `.txt` file is reStructuredText: an adorned section title, or a directive.
pub(crate) fn looks_like_rst(text: &str) -> bool {
    let lines = split_lines(text);
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with(".. ")
            && matches!(explicit_markup(line), Some(Markup::Directive { .. }))
        {
            return true;
        }
        let starts_block = i == 0 || blank(lines[i - 1]);
        if starts_block
            && !blank(line)
            && adornment(line).is_none()
            && let Some(next) = lines.get(i + 1)
            && let Some((_, n)) = adornment(next)
            && n >= 3
            && n >= line.trim_end().chars().count()
        {
            return true;
        }
    }
    false
}
