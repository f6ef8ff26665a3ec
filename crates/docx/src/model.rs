//! What [`crate::read`] returns, and its plain-text and Markdown renderings.

/// A document body in reading order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Document {
    /// `dc:title` from `docProps/core.xml`, if set.
    pub title: Option<String>,
    /// The body's top-level paragraphs and tables, in reading order.
    pub blocks: Vec<Block>,
}

/// One top-level element of the body.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A paragraph (`w:p`).
    Paragraph(Paragraph),
    /// A table (`w:tbl`).
    Table(Table),
}

/// A paragraph: its role and its formatted text runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Paragraph {
    /// What the paragraph is, from its style and numbering.
    pub kind: ParagraphKind,
    /// The style id (`w:pStyle`), if any.
    pub style_id: Option<String>,
    /// The text runs, in order.
    pub runs: Vec<Run>,
}

/// The role of a paragraph, which decides how it renders in Markdown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ParagraphKind {
    /// Body text (any style not recognised below).
    #[default]
    Normal,
    /// The `Title` style.
    Title,
    /// `Heading1` .. `Heading9` (or an outline level), 1-based.
    Heading(u8),
    /// A numbered or bulleted paragraph; `level` is 0-based (`w:ilvl`).
    ListItem {
        /// Nesting depth, 0 for the outermost list.
        level: u8,
        /// Numbered (`1.`) rather than bulleted.
        ordered: bool,
        /// The item's number for ordered lists (as Word would count it).
        number: Option<u32>,
    },
    /// Block quote (`Quote` / `IntenseQuote` styles).
    Quote,
    /// Preformatted code (a style named like `Code`, `HTML Preformatted`).
    Code,
}

/// A stretch of text with one formatting (`w:r`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    /// The text (tabs and breaks as `\t` and `\n`).
    pub text: String,
    /// Bold (`w:b`), directly or through the run's style.
    pub bold: bool,
    /// Italic (`w:i`), directly or through the run's style.
    pub italic: bool,
}

/// A table; rows may have different lengths (merged cells are not expanded).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    /// The rows, top to bottom, each its cells left to right.
    pub rows: Vec<Vec<Cell>>,
}

/// One table cell.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cell {
    /// The cell's paragraphs (nested tables are flattened into them).
    pub paragraphs: Vec<Paragraph>,
}

impl Paragraph {
    /// The runs' text joined, without formatting.
    pub fn text(&self) -> String {
        self.runs.iter().map(|r| r.text.as_str()).collect()
    }

    /// The heading level (1 to 9) when the paragraph is a heading; `None` otherwise (also for `Title`).
    pub fn heading_level(&self) -> Option<u8> {
        match self.kind {
            ParagraphKind::Heading(l) => Some(l),
            _ => None,
        }
    }

    /// The runs as inline Markdown: adjacent runs with the same formatting merged,
    /// `**bold**` and `*italic*` around the non-blank middle of each.
    pub fn inline_markdown(&self) -> String {
        inline_markdown(&self.runs, false)
    }
}

impl Cell {
    /// The paragraphs' text, one per line, trimmed.
    pub fn text(&self) -> String {
        let parts: Vec<String> = self.paragraphs.iter().map(Paragraph::text).collect();
        parts.join("\n").trim().to_owned()
    }
}

impl Table {
    /// The length of the longest row.
    pub fn columns(&self) -> usize {
        self.rows.iter().map(Vec::len).max().unwrap_or(0)
    }
}

impl Document {
    /// Every paragraph, including those inside table cells, in reading order.
    pub fn all_paragraphs(&self) -> Vec<&Paragraph> {
        let mut out = Vec::new();
        for b in &self.blocks {
            match b {
                Block::Paragraph(p) => out.push(p),
                Block::Table(t) => {
                    for row in &t.rows {
                        for cell in row {
                            out.extend(cell.paragraphs.iter());
                        }
                    }
                }
            }
        }
        out
    }

    /// Top-level paragraphs (outside tables).
    pub fn paragraphs(&self) -> impl Iterator<Item = &Paragraph> {
        self.blocks.iter().filter_map(|b| match b {
            Block::Paragraph(p) => Some(p),
            Block::Table(_) => None,
        })
    }

    /// Top-level tables (not those nested in cells).
    pub fn tables(&self) -> impl Iterator<Item = &Table> {
        self.blocks.iter().filter_map(|b| match b {
            Block::Table(t) => Some(t),
            Block::Paragraph(_) => None,
        })
    }

    /// Plain text: one line per paragraph (empty paragraphs kept as empty lines, runs of
    /// them collapsed), table rows as tab-separated cells.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let mut blank = true;
        for b in &self.blocks {
            match b {
                Block::Paragraph(p) => {
                    let text = p.text();
                    let text = text.trim_end();
                    if text.is_empty() {
                        if !blank {
                            out.push('\n');
                            blank = true;
                        }
                        continue;
                    }
                    if let ParagraphKind::ListItem {
                        level,
                        ordered,
                        number,
                    } = p.kind
                    {
                        out.push_str(&"  ".repeat(level as usize));
                        if ordered {
                            out.push_str(&format!("{}. ", number.unwrap_or(1)));
                        } else {
                            out.push_str("- ");
                        }
                    }
                    out.push_str(text);
                    out.push('\n');
                    blank = false;
                }
                Block::Table(t) => {
                    for row in &t.rows {
                        let cells: Vec<String> = row
                            .iter()
                            .map(|c| c.text().replace(['\n', '\t'], " "))
                            .collect();
                        out.push_str(&cells.join("\t"));
                        out.push('\n');
                    }
                    blank = false;
                }
            }
        }
        out
    }

    /// Markdown: `#` headings (the Title style is `#` too), `-` and `1.` lists indented
    /// by level, pipe tables (first row as the header), `**bold**`, `*italic*`, `>`
    /// quotes and fenced code.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        // What the previous block was, to keep list items and code lines together.
        #[derive(PartialEq)]
        enum Prev {
            None,
            List,
            Code,
            Other,
        }
        let mut prev = Prev::None;
        // Whether the last top-level list item was ordered (a switch starts a new list).
        let mut prev_ordered = None;
        let close_code = |out: &mut String, prev: &Prev| {
            if *prev == Prev::Code {
                out.push_str("```\n");
            }
        };
        for b in &self.blocks {
            match b {
                Block::Paragraph(p) => {
                    if p.kind == ParagraphKind::Code {
                        if prev != Prev::Code {
                            if prev != Prev::None {
                                out.push('\n');
                            }
                            out.push_str("```\n");
                        }
                        out.push_str(&p.text());
                        out.push('\n');
                        prev = Prev::Code;
                        continue;
                    }
                    let inline = p.inline_markdown();
                    if inline.trim().is_empty() {
                        continue;
                    }
                    close_code(&mut out, &prev);
                    let is_list = matches!(p.kind, ParagraphKind::ListItem { .. });
                    let new_list = match p.kind {
                        ParagraphKind::ListItem {
                            level: 0, ordered, ..
                        } => prev_ordered.replace(ordered).is_some_and(|o| o != ordered),
                        _ => false,
                    };
                    if prev != Prev::None && (!(is_list && prev == Prev::List) || new_list) {
                        out.push('\n');
                    }
                    match &p.kind {
                        ParagraphKind::Title => out.push_str("# "),
                        ParagraphKind::Heading(l) => {
                            out.push_str(&"#".repeat((*l).clamp(1, 6) as usize));
                            out.push(' ');
                        }
                        ParagraphKind::ListItem {
                            level,
                            ordered,
                            number,
                        } => {
                            // Ordered markers are up to 4 wide; 3 spaces per level nests
                            // under both `- ` and `1. `.
                            out.push_str(&"   ".repeat(*level as usize));
                            if *ordered {
                                out.push_str(&format!("{}. ", number.unwrap_or(1)));
                            } else {
                                out.push_str("- ");
                            }
                        }
                        ParagraphKind::Quote => out.push_str("> "),
                        ParagraphKind::Normal | ParagraphKind::Code => {}
                    }
                    let body = if matches!(p.kind, ParagraphKind::Title | ParagraphKind::Heading(_))
                    {
                        inline.replace('\n', " ")
                    } else {
                        // A line break inside a paragraph: Markdown's hard break.
                        inline.replace('\n', "\\\n")
                    };
                    out.push_str(body.trim());
                    out.push('\n');
                    prev = if is_list { Prev::List } else { Prev::Other };
                    if !is_list {
                        prev_ordered = None;
                    }
                }
                Block::Table(t) => {
                    if t.rows.is_empty() {
                        continue;
                    }
                    close_code(&mut out, &prev);
                    if prev != Prev::None {
                        out.push('\n');
                    }
                    let cols = t.columns().max(1);
                    // A header row that is bold throughout is bold by styling, not emphasis.
                    let plain_header = t.rows[0].iter().all(|c| {
                        c.paragraphs
                            .iter()
                            .flat_map(|p| &p.runs)
                            .all(|r| r.bold || r.text.trim().is_empty())
                    });
                    for (i, row) in t.rows.iter().enumerate() {
                        out.push('|');
                        for c in 0..cols {
                            let text = row
                                .get(c)
                                .map(|cell| cell_markdown(cell, i == 0 && plain_header))
                                .unwrap_or_default();
                            out.push(' ');
                            out.push_str(&text);
                            out.push_str(" |");
                        }
                        out.push('\n');
                        if i == 0 {
                            out.push('|');
                            out.push_str(&" --- |".repeat(cols));
                            out.push('\n');
                        }
                    }
                    prev = Prev::Other;
                }
            }
        }
        close_code(&mut out, &prev);
        out
    }
}

fn cell_markdown(cell: &Cell, unbold: bool) -> String {
    let parts: Vec<String> = cell
        .paragraphs
        .iter()
        .map(|p| {
            if unbold {
                let runs: Vec<Run> = p
                    .runs
                    .iter()
                    .map(|r| Run {
                        bold: false,
                        ..r.clone()
                    })
                    .collect();
                inline_markdown(&runs, true)
            } else {
                inline_markdown(&p.runs, true)
            }
        })
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().replace('\n', " "))
        .collect();
    parts.join("<br>")
}

/// Escapes what Markdown would take as markup inside text.
fn escape_markdown(s: &str, table: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '*' | '_' | '`' | '[' | ']' | '<' => {
                out.push('\\');
                out.push(c);
            }
            '|' if table => out.push_str("\\|"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a line start that Markdown would read as a block marker.
fn escape_line_start(s: String) -> String {
    let t = s.trim_start();
    let lead = s.len() - t.len();
    let needs = t.starts_with('#')
        || t.starts_with('>')
        || t.starts_with("- ")
        || t.starts_with("+ ")
        || t == "-"
        || t.starts_with("---")
        || t.starts_with("===")
        || {
            let digits = t.bytes().take_while(u8::is_ascii_digit).count();
            digits > 0 && (t[digits..].starts_with(". ") || t[digits..].starts_with(") "))
        };
    if !needs {
        return s;
    }
    if let Some(first) = t.chars().next()
        && first.is_ascii_digit()
    {
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        return format!("{}{}\\{}", &s[..lead], &t[..digits], &t[digits..]);
    }
    format!("{}\\{}", &s[..lead], t)
}

fn inline_markdown(runs: &[Run], table: bool) -> String {
    // Merge adjacent runs with the same formatting.
    let mut merged: Vec<(String, bool, bool)> = Vec::new();
    for r in runs {
        if r.text.is_empty() {
            continue;
        }
        match merged.last_mut() {
            Some(last) if last.1 == r.bold && last.2 == r.italic => last.0.push_str(&r.text),
            _ => merged.push((r.text.clone(), r.bold, r.italic)),
        }
    }
    let mut out = String::new();
    for (text, bold, italic) in merged {
        let escaped = escape_markdown(&text, table);
        if (!bold && !italic) || escaped.trim().is_empty() {
            out.push_str(&escaped);
            continue;
        }
        let marker = match (bold, italic) {
            (true, true) => "***",
            (true, false) => "**",
            _ => "*",
        };
        // Emphasis cannot start or end with a space: keep blanks outside the markers,
        // and each line of a multi-line run on its own.
        let lines: Vec<&str> = escaped.split('\n').collect();
        for (i, line) in lines.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let trimmed = line.trim();
            if trimmed.is_empty() {
                out.push_str(line);
                continue;
            }
            let start = line.len() - line.trim_start().len();
            let end = line.trim_end().len();
            out.push_str(&line[..start]);
            out.push_str(marker);
            out.push_str(trimmed);
            out.push_str(marker);
            out.push_str(&line[end..]);
        }
    }
    let lines: Vec<String> = out
        .split('\n')
        .map(|l| escape_line_start(l.to_owned()))
        .collect();
    lines.join("\n")
}
