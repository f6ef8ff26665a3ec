//! A passage cut into the units an answer may quote: whole sentences, whole
//! list items, table rows and code blocks. Hard-wrapped lines of one paragraph
//! or one list item are joined first, so a unit never ends mid-sentence.

use unicode_segmentation::UnicodeSegmentation;

/// What a unit is, which decides how it may be shown and what it can answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitKind {
    Sentence,
    ListItem,
    /// One row of a table; `context` holds the header row.
    TableRow,
    /// A block of code or a command line.
    Code,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    pub kind: UnitKind,
    /// Shown to people as is: whole, joined across line breaks.
    pub text: String,
    /// Matched but never shown (a table's header row).
    pub context: String,
    /// Position of the unit within its passage.
    pub index: usize,
    /// Position among the items of its list, from 0 (list items only).
    pub item: usize,
}

/// Longer list items are cut into their sentences: a unit is a quote, not a page.
const MAX_ITEM_CHARS: usize = 320;

/// The units of a passage's text, in order.
pub fn units(text: &str) -> Vec<Unit> {
    let mut out = Vec::new();
    for block in blocks(text) {
        match block {
            Block::Paragraph(lines) => {
                if looks_like_code(&lines) {
                    push(&mut out, UnitKind::Code, lines.join("\n"), "", 0);
                } else {
                    for s in sentences(&lines.join(" ")) {
                        push(&mut out, UnitKind::Sentence, s, "", 0);
                    }
                }
            }
            Block::Item(n, text) => {
                if text.chars().count() > MAX_ITEM_CHARS {
                    for s in sentences(&text) {
                        push(&mut out, UnitKind::ListItem, s, "", n);
                    }
                } else {
                    push(&mut out, UnitKind::ListItem, text, "", n);
                }
            }
            Block::Table(rows) => {
                let header = rows.first().cloned().unwrap_or_default();
                for row in rows.into_iter().skip(1) {
                    push(&mut out, UnitKind::TableRow, row, &header, 0);
                }
            }
            Block::Fence(lines) => push(&mut out, UnitKind::Code, lines.join("\n"), "", 0),
        }
    }
    out
}

fn push(out: &mut Vec<Unit>, kind: UnitKind, text: String, context: &str, item: usize) {
    let text = text.trim().to_string();
    // A lone marker or number is no answer to anything.
    if text.chars().filter(|c| c.is_alphanumeric()).count() < 2 {
        return;
    }
    let index = out.len();
    out.push(Unit {
        kind,
        text,
        context: context.to_string(),
        index,
        item,
    });
}

enum Block {
    Paragraph(Vec<String>),
    /// (position in its list, the item's text joined across lines)
    Item(usize, String),
    /// Rows as cells joined by " | "; the first row is the header.
    Table(Vec<String>),
    Fence(Vec<String>),
}

/// Where a list item's text starts, if the line starts an item.
fn item_start(line: &str) -> Option<&str> {
    for bullet in ["- ", "* ", "+ ", "• "] {
        if let Some(rest) = line.strip_prefix(bullet) {
            return Some(rest);
        }
    }
    let digits = line.chars().take_while(|c| c.is_ascii_digit()).count();
    if digits > 0 && digits <= 3 {
        let rest = &line[digits..];
        for mark in [". ", ") "] {
            if let Some(rest) = rest.strip_prefix(mark) {
                return Some(rest);
            }
        }
    }
    // reStructuredText's auto-numbered items.
    line.strip_prefix("#. ")
}

fn table_row(line: &str) -> Option<String> {
    let inner = line.strip_prefix('|')?;
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
    // The |---|:--:| separator row carries nothing.
    if cells
        .iter()
        .all(|c| c.chars().all(|ch| "-:= ".contains(ch)))
    {
        return Some(String::new());
    }
    Some(cells.join(" | "))
}

/// Markup lines that are neither prose nor an answer: reStructuredText
/// directives and targets, and adornment lines.
fn is_markup(line: &str) -> bool {
    line.starts_with(".. ")
        || (line.len() >= 3
            && line
                .chars()
                .all(|c| "=-~^\"'`#*+_".contains(c) && c == line.chars().next().unwrap_or(c)))
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut para: Vec<String> = Vec::new();
    let mut item: Option<(usize, String)> = None;
    let mut table: Vec<String> = Vec::new();
    let mut fence: Option<Vec<String>> = None;
    let mut items_in_list = 0usize;

    fn flush(
        out: &mut Vec<Block>,
        para: &mut Vec<String>,
        item: &mut Option<(usize, String)>,
        table: &mut Vec<String>,
    ) {
        if !para.is_empty() {
            out.push(Block::Paragraph(std::mem::take(para)));
        }
        if let Some((n, text)) = item.take() {
            out.push(Block::Item(n, text));
        }
        if !table.is_empty() {
            out.push(Block::Table(std::mem::take(table)));
        }
    }

    for raw in text.lines() {
        let line = raw.trim();
        if let Some(code) = fence.as_mut() {
            if line.starts_with("```") || line.starts_with("~~~") {
                out.push(Block::Fence(std::mem::take(code)));
                fence = None;
            } else if !line.is_empty() {
                code.push(raw.trim_end().to_string());
            }
            continue;
        }
        if line.starts_with("```") || line.starts_with("~~~") {
            flush(&mut out, &mut para, &mut item, &mut table);
            fence = Some(Vec::new());
            continue;
        }
        if line.is_empty() {
            flush(&mut out, &mut para, &mut item, &mut table);
            continue;
        }
        if is_markup(line) {
            continue;
        }
        if let Some(row) = table_row(line) {
            if !para.is_empty() || item.is_some() {
                flush(&mut out, &mut para, &mut item, &mut table);
            }
            if !row.is_empty() {
                table.push(row);
            }
            continue;
        }
        if let Some(rest) = item_start(line) {
            let continuing_list = item.is_some();
            flush(&mut out, &mut para, &mut item, &mut table);
            if !continuing_list && out.last().is_none_or(|b| !matches!(b, Block::Item(..))) {
                items_in_list = 0;
            }
            item = Some((items_in_list, rest.trim().to_string()));
            items_in_list += 1;
            continue;
        }
        if let Some((_, text)) = item.as_mut() {
            // An item's wrapped continuation line (indented or not).
            text.push(' ');
            text.push_str(line);
            continue;
        }
        if !table.is_empty() {
            flush(&mut out, &mut para, &mut item, &mut table);
        }
        para.push(line.to_string());
    }
    if let Some(code) = fence {
        out.push(Block::Fence(code));
    }
    flush(&mut out, &mut para, &mut item, &mut table);
    out
}

/// Code that lost its fence when the document was parsed (reStructuredText
/// literal blocks, doctests): most lines read as code rather than prose.
fn looks_like_code(lines: &[String]) -> bool {
    let code = lines
        .iter()
        .filter(|l| {
            let l = l.trim();
            l.starts_with(">>>")
                || l.starts_with("...")
                || l.starts_with("$ ")
                || l.ends_with([';', '{', '}', '(', ')', ','])
                || (l.ends_with(':') && !l.contains(' '))
                || l.starts_with("def ")
                || l.starts_with("class ")
                || l.starts_with("import ")
                || l.starts_with("from ")
                || l.starts_with("return ")
                || (l.contains(" = ") && !l.contains(". "))
        })
        .count();
    code * 2 > lines.len()
}

/// Whole sentences of a paragraph (Unicode sentence boundaries), with the
/// cases UAX #29 splits too eagerly merged back: abbreviations such as "e.g."
/// and "i.e." are not the end of a sentence.
pub fn sentences(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in text.unicode_sentences() {
        let s = s.trim();
        if s.is_empty() {
            continue;
        }
        let glue = out.last().is_some_and(|prev| {
            let lower = prev.to_lowercase();
            ["e.g.", "i.e.", "etc.", "vs.", "cf.", "approx."]
                .iter()
                .any(|a| lower.ends_with(a))
                || prev.chars().count() < 4
        });
        match out.last_mut() {
            Some(prev) if glue => {
                prev.push(' ');
                prev.push_str(s);
            }
            _ => out.push(s.to_string()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_wrapped_lines_and_splits_sentences() {
        let u = units(
            "The on-call engineer is paged through the incident tool. Acknowledge within\n15 minutes; escalate after 30 minutes.",
        );
        let texts: Vec<&str> = u.iter().map(|u| u.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "The on-call engineer is paged through the incident tool.",
                "Acknowledge within 15 minutes; escalate after 30 minutes."
            ]
        );
    }

    #[test]
    fn list_items_stay_whole_and_numbered() {
        let u = units(
            "1. Generate a key with `minisign -G`.\n2. Sign the new key with\n   the old one.\n\nThe old key stays valid.",
        );
        assert_eq!(u[0].kind, UnitKind::ListItem);
        assert_eq!(u[1].text, "Sign the new key with the old one.");
        assert_eq!((u[0].item, u[1].item), (0, 1));
        assert_eq!(u[2].kind, UnitKind::Sentence);
    }

    #[test]
    fn table_rows_carry_their_header() {
        let u = units("| Tier | Days |\n|---|---|\n| Gold | 30 |\n| Basic | 10 |");
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].kind, UnitKind::TableRow);
        assert_eq!(u[0].text, "Gold | 30");
        assert_eq!(u[0].context, "Tier | Days");
    }

    #[test]
    fn abbreviations_do_not_end_sentences() {
        assert_eq!(
            sentences("Use a tool, e.g. minisign. Then publish."),
            ["Use a tool, e.g. minisign.", "Then publish."]
        );
    }
}
