//! Format-independent chunking: every format parser produces a flat list of [`Block`]s,
//! and [`chunk`] turns them into passages.
//!
//! Invariants of the output (relied on by the index and the benchmark):
//! * a passage holds blocks of one section only (between two heading blocks);
//! * passage text is the blocks' lines joined by `\n`, blocks by a blank line; heading lines
//!   are never part of it;
//! * a code block up to [`MAX_FACTOR`] × target stays whole; bigger blocks (code or prose)
//!   are cut at line breaks, and a single line longer than that at whitespace;
//! * passages are in file order, `line_start <= line_end`, and only overlap (in lines) with
//!   their predecessor in the same section, by at most `overlap_chars` of prose.

use std::borrow::Cow;

use crate::{ChunkOptions, Passage};

/// Blocks up to this many times `target_chars` are kept whole.
pub(crate) const MAX_FACTOR: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A section title. `level` only orders headings: smaller is outer; equal levels are
    /// siblings. Its lines are never part of a passage.
    Heading {
        level: u32,
        title: String,
    },
    Prose,
    /// Kept whole (up to the cap) and never used as overlap.
    Code,
}

/// One line of a block: its number and its text, without the terminator; borrowed from
/// the file's text where the parser keeps it as it is (most lines), so a file's lines are
/// not each copied into an allocation of their own on the way to a passage.
pub(crate) type Line<'a> = (u32, Cow<'a, str>);

/// One block of a file: `lines` are `(line number, text)` in order, without terminators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block<'a> {
    pub(crate) kind: Kind,
    pub(crate) lines: Vec<Line<'a>>,
}

impl<'a> Block<'a> {
    pub(crate) fn heading(level: u32, title: &str, line: u32) -> Self {
        Self {
            kind: Kind::Heading {
                level,
                title: collapse_ws(title),
            },
            lines: vec![(line, Cow::Borrowed(""))],
        }
    }

    pub(crate) fn prose(lines: Vec<Line<'a>>) -> Self {
        Self {
            kind: Kind::Prose,
            lines,
        }
    }

    pub(crate) fn code(lines: Vec<Line<'a>>) -> Self {
        Self {
            kind: Kind::Code,
            lines,
        }
    }
}

/// Collapses runs of whitespace to one space and trims.
pub(crate) fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A piece of a section being packed into passages.
#[derive(Debug, Clone)]
struct Unit<'a> {
    lines: Vec<Line<'a>>,
    code: bool,
    chars: usize,
}

impl<'a> Unit<'a> {
    fn new(lines: Vec<Line<'a>>, code: bool) -> Self {
        let chars = lines_chars(&lines);
        Self { lines, code, chars }
    }
}

fn lines_chars(lines: &[Line<'_>]) -> usize {
    lines.iter().map(|(_, l)| l.chars().count()).sum::<usize>() + lines.len().saturating_sub(1)
}

/// Separator between blocks in passage text.
const BLOCK_SEP: &str = "\n\n";

/// Chunks `blocks` into passages. `base_heading` prefixes every heading path (used for
/// source files, whose heading is their path).
pub(crate) fn chunk(
    blocks: Vec<Block<'_>>,
    base_heading: &str,
    opts: &ChunkOptions,
) -> Vec<Passage> {
    // Zero would make every block "too big"; a tiny target still makes progress.
    let target = opts.target_chars.max(16);
    let max = target.saturating_mul(MAX_FACTOR);
    let mut out = Vec::new();
    let mut stack: Vec<(u32, String)> = Vec::new();
    let mut heading = base_heading.to_owned();
    let mut section: Vec<Block<'_>> = Vec::new();
    for block in blocks {
        match block.kind {
            Kind::Heading { level, title } => {
                pack(
                    std::mem::take(&mut section),
                    &heading,
                    target,
                    max,
                    opts.overlap_chars,
                    &mut out,
                );
                while stack.last().is_some_and(|(l, _)| *l >= level) {
                    stack.pop();
                }
                stack.push((level, title));
                heading = heading_path(base_heading, &stack);
            }
            _ => section.push(block),
        }
    }
    pack(section, &heading, target, max, opts.overlap_chars, &mut out);
    out
}

fn heading_path(base: &str, stack: &[(u32, String)]) -> String {
    std::iter::once(base)
        .chain(stack.iter().map(|(_, t)| t.as_str()))
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(" > ")
}

/// Packs one section's blocks into passages appended to `out`.
fn pack(
    section: Vec<Block<'_>>,
    heading: &str,
    target: usize,
    max: usize,
    overlap: usize,
    out: &mut Vec<Passage>,
) {
    let mut units = Vec::new();
    for block in section {
        let code = block.kind == Kind::Code;
        let lines = trim_blank_edges(block.lines);
        if lines.is_empty() {
            continue;
        }
        let unit = Unit::new(lines, code);
        if unit.chars <= max {
            units.push(unit);
        } else {
            split_big(unit, target, &mut units);
        }
    }
    let mut cur: Vec<Unit<'_>> = Vec::new();
    // Characters of the units taken since the last emit (with separators), not counting the
    // overlap carried over: the overlap is extra context on top of the target.
    let mut fresh = 0usize;
    for unit in units {
        if fresh > 0 && fresh + BLOCK_SEP.len() + unit.chars > target {
            let tail = overlap_tail(&cur, overlap);
            // When the whole passage would be repeated as the next one's overlap (a short
            // lead-in before a big block), emitting it alone would only duplicate it: keep it
            // with what follows instead.
            if tail.len() < cur.len() {
                out.push(emit(&cur, heading));
                cur = tail;
                fresh = 0;
            }
        }
        fresh = if fresh == 0 {
            unit.chars
        } else {
            fresh + BLOCK_SEP.len() + unit.chars
        };
        cur.push(unit);
    }
    if fresh > 0 {
        out.push(emit(&cur, heading));
    }
}

fn trim_blank_edges(mut lines: Vec<Line<'_>>) -> Vec<Line<'_>> {
    while lines.last().is_some_and(|(_, l)| l.trim().is_empty()) {
        lines.pop();
    }
    let first = lines
        .iter()
        .position(|(_, l)| !l.trim().is_empty())
        .unwrap_or(lines.len());
    lines.drain(..first);
    lines
}

/// Splits a block bigger than the cap into pieces of about `target` chars at line breaks;
/// a line longer than `target` is cut at whitespace (or anywhere, for a run without any).
fn split_big<'a>(unit: Unit<'a>, target: usize, units: &mut Vec<Unit<'a>>) {
    let mut piece: Vec<Line<'a>> = Vec::new();
    let mut piece_chars = 0usize;
    for (no, line) in unit.lines {
        let n = line.chars().count();
        if n > target {
            if !piece.is_empty() {
                units.push(Unit::new(std::mem::take(&mut piece), unit.code));
                piece_chars = 0;
            }
            for part in split_line(&line, target) {
                units.push(Unit::new(vec![(no, Cow::Owned(part))], unit.code));
            }
            continue;
        }
        if !piece.is_empty() && piece_chars + 1 + n > target {
            units.push(Unit::new(std::mem::take(&mut piece), unit.code));
            piece_chars = 0;
        }
        piece_chars += if piece.is_empty() { n } else { n + 1 };
        piece.push((no, line));
    }
    if !piece.is_empty() {
        let lines = trim_blank_edges(piece);
        if !lines.is_empty() {
            units.push(Unit::new(lines, unit.code));
        }
    }
}

/// Cuts one long line into pieces of at most `target` chars, preferring whitespace.
fn split_line(line: &str, target: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        // Byte index just past `target` chars, or the end.
        let end = rest
            .char_indices()
            .nth(target)
            .map_or(rest.len(), |(i, _)| i);
        if end == rest.len() {
            out.push(rest.to_owned());
            break;
        }
        let cut = rest[..end]
            .rfind(char::is_whitespace)
            .filter(|&i| i > 0)
            .unwrap_or(end);
        out.push(rest[..cut].trim_end().to_owned());
        rest = rest[cut..].trim_start();
    }
    out
}

/// The prose at the end of a just-emitted passage to repeat at the start of the next:
/// whole trailing units while they fit in `overlap`, else trailing whole lines of the last
/// unit. Code is never repeated.
fn overlap_tail<'a>(cur: &[Unit<'a>], overlap: usize) -> Vec<Unit<'a>> {
    let mut taken: Vec<Unit<'a>> = Vec::new();
    let mut acc = 0usize;
    for unit in cur.iter().rev() {
        if unit.code {
            break;
        }
        let add = if taken.is_empty() {
            unit.chars
        } else {
            unit.chars + BLOCK_SEP.len()
        };
        if acc + add <= overlap {
            acc += add;
            taken.push(unit.clone());
            continue;
        }
        if taken.is_empty() {
            let mut lines = Vec::new();
            let mut n = 0usize;
            for (no, l) in unit.lines.iter().rev() {
                let c = l.chars().count() + usize::from(!lines.is_empty());
                if n + c > overlap {
                    break;
                }
                n += c;
                lines.push((*no, l.clone()));
            }
            // Taking the whole unit would have fitted above; a partial tail must leave
            // something out, or it is not an overlap but a repeat.
            if !lines.is_empty() && lines.len() < unit.lines.len() {
                lines.reverse();
                let lines = trim_blank_edges(lines);
                if !lines.is_empty() {
                    taken.push(Unit::new(lines, false));
                }
            }
        }
        break;
    }
    taken.reverse();
    taken
}

fn emit(units: &[Unit<'_>], heading: &str) -> Passage {
    // Lines joined by `\n`, units by BLOCK_SEP, into one allocation.
    let bytes: usize = units
        .iter()
        .flat_map(|u| u.lines.iter().map(|(_, l)| l.len() + 1))
        .sum::<usize>()
        + units.len() * BLOCK_SEP.len();
    let mut text = String::with_capacity(bytes);
    for (i, u) in units.iter().enumerate() {
        if i > 0 {
            text.push_str(BLOCK_SEP);
        }
        for (j, (_, l)) in u.lines.iter().enumerate() {
            if j > 0 {
                text.push('\n');
            }
            text.push_str(l);
        }
    }
    let line_start = units
        .iter()
        .flat_map(|u| u.lines.iter().map(|(n, _)| *n))
        .min()
        .unwrap_or(1);
    let line_end = units
        .iter()
        .flat_map(|u| u.lines.iter().map(|(n, _)| *n))
        .max()
        .unwrap_or(line_start);
    Passage {
        heading: heading.to_owned(),
        text,
        line_start,
        line_end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn para(start: u32, n: usize, width: usize) -> Block<'static> {
        Block::prose(
            (0..n)
                .map(|i| (start + i as u32, "x".repeat(width).into()))
                .collect(),
        )
    }

    fn opts(target: usize, overlap: usize) -> ChunkOptions {
        ChunkOptions {
            target_chars: target,
            overlap_chars: overlap,
            ..ChunkOptions::default()
        }
    }

    #[test]
    fn heading_stack_and_empty_sections() {
        let blocks = vec![
            Block::heading(1, "A", 1),
            para(2, 1, 5),
            Block::heading(2, "B", 3),
            Block::heading(3, "C", 4),
            para(5, 1, 5),
            Block::heading(2, "D", 6),
            para(7, 1, 5),
            Block::heading(1, "E", 8),
        ];
        let p = chunk(blocks, "", &ChunkOptions::default());
        let got: Vec<_> = p
            .iter()
            .map(|p| (p.heading.as_str(), p.line_start, p.line_end))
            .collect();
        assert_eq!(got, [("A", 2, 2), ("A > B > C", 5, 5), ("A > D", 7, 7)]);
    }

    #[test]
    fn split_with_overlap_at_block_boundaries() {
        // Three 5-line paragraphs of 59 chars (9 + 1 separator... per line: 10 chars).
        let blocks = vec![para(1, 5, 10), para(7, 5, 10), para(13, 5, 10)];
        let p = chunk(blocks, "", &opts(120, 30));
        // Each paragraph is 54 chars: two fit in 120 (54+2+54=110), the third does not.
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].line_start, p[0].line_end), (1, 11));
        // Overlap: the last two lines (21 chars) of the second paragraph.
        assert_eq!((p[1].line_start, p[1].line_end), (10, 17));
        assert!(p[1].text.starts_with("xxxxxxxxxx\nxxxxxxxxxx\n\nxxxx"));
    }

    #[test]
    fn code_is_kept_whole_up_to_the_cap_and_never_overlapped() {
        let code = Block::code((1..=30).map(|i| (i, "y".repeat(9).into())).collect()); // 299 chars
        let p = chunk(vec![code, para(32, 1, 50)], "", &opts(100, 60));
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].line_start, p[0].line_end), (1, 30));
        assert_eq!((p[1].line_start, p[1].line_end), (32, 32));
        // Over 4x the target: cut at lines into ~target pieces.
        let code = Block::code((1..=50).map(|i| (i, "y".repeat(9).into())).collect()); // 499 chars
        let p = chunk(vec![code], "", &opts(100, 60));
        assert_eq!(p.len(), 5);
        assert_eq!((p[0].line_start, p[0].line_end), (1, 10));
        assert_eq!((p[4].line_start, p[4].line_end), (41, 50));
    }

    #[test]
    fn long_line_is_cut_at_whitespace() {
        let line = "word ".repeat(200);
        let p = chunk(
            vec![Block::prose(vec![(3, line.into())])],
            "f.json",
            &opts(100, 0),
        );
        assert!(p.len() >= 10);
        assert!(p.iter().all(|p| p.text.chars().count() <= 100));
        assert!(p.iter().all(|p| p.line_start == 3 && p.line_end == 3));
        assert!(p.iter().all(|p| p.heading == "f.json"));
        assert!(p.iter().all(|p| !p.text.starts_with(' ')));
        // Without whitespace: a hard cut at a char boundary.
        assert_eq!(split_line(&"é".repeat(25), 10).len(), 3);
    }
}
