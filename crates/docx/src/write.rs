//! Markdown into WordprocessingML: the body, the styles it uses and its numbering.
//!
//! Mapping: `#`..`######` → `Heading1`..`Heading6`; paragraphs → `Normal`; `-`/`*`
//! lists → `ListBullet` with numbering (one shared bullet definition); `1.` lists →
//! `ListNumber`, each list its own numbering instance restarting at its first number;
//! nested lists → `w:ilvl`; further paragraphs of an item → `ListParagraph` indented;
//! `**bold**` → `w:b`, `*italic*` → `w:i`, `~~strike~~` → `w:strike`, `` `code` `` →
//! Consolas; fenced/indented code → `Code` paragraphs (one per line); `>` → `Quote`;
//! pipe tables → `TableGrid` tables (header row bold and repeated, column alignment
//! kept); `---` → a bordered empty paragraph; links → their text followed by the URL in
//! parentheses; images → their alt text; raw HTML → literal text.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use pulldown_cmark::{Alignment, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

use crate::opc::{escape_attr, escape_text};

pub(crate) const W_NS: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";
pub(crate) const R_NS: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";

/// Usable page width in twips (Letter, 1" margins).
const TEXT_WIDTH: u32 = 9360;

/// A numbering instance the body refers to.
#[derive(Debug, Clone)]
pub(crate) struct NumInstance {
    pub num_id: u32,
    pub ordered: bool,
    pub level: u8,
    pub start: u32,
}

/// The generated body and what it needs from the rest of the package.
#[derive(Debug, Default)]
pub(crate) struct Body {
    pub xml: String,
    pub styles: BTreeSet<&'static str>,
    pub nums: Vec<NumInstance>,
    /// Plain text of the first heading (the document title).
    pub first_heading: Option<String>,
    pub paragraphs: usize,
    /// Whether the last element written is a table (a body must not end on one).
    pub ends_with_table: bool,
}

struct ListCtx {
    ordered: bool,
    num_id: u32,
}

#[derive(Default)]
struct Para {
    ppr: String,
    runs: String,
    text: String,
    /// The run being built: (its `w:rPr` content, its text); runs of the same
    /// formatting are merged.
    pending: Option<(String, String)>,
}

impl Para {
    /// Writes out the run being built.
    fn commit(&mut self) {
        let Some((rpr, text)) = self.pending.take() else {
            return;
        };
        self.runs.push_str("<w:r>");
        if !rpr.is_empty() {
            self.runs.push_str("<w:rPr>");
            self.runs.push_str(&rpr);
            self.runs.push_str("</w:rPr>");
        }
        // Tabs are their own element in WordprocessingML.
        for (i, piece) in text.split('\t').enumerate() {
            if i > 0 {
                self.runs.push_str("<w:tab/>");
            }
            if !piece.is_empty() {
                let _ = write!(
                    self.runs,
                    "<w:t xml:space=\"preserve\">{}</w:t>",
                    escape_text(piece)
                );
            }
        }
        self.runs.push_str("</w:r>");
    }
}

struct TableCtx {
    aligns: Vec<Alignment>,
    rows: Vec<(bool, Vec<String>)>,
    row: Vec<String>,
    in_head: bool,
}

struct Gen<'a> {
    body: Body,
    next_num_id: u32,
    bullet_num: Option<u32>,
    lists: Vec<ListCtx>,
    /// The numbering of the item whose first paragraph is still to come.
    pending_item: Option<(u32, u8, bool)>,
    para: Option<Para>,
    bold: u32,
    italic: u32,
    strike: u32,
    quote: u32,
    code_block: bool,
    table: Option<TableCtx>,
    links: Vec<String>,
    /// Our style id → the id to write (an existing style of the same name).
    style_map: &'a HashMap<String, String>,
}

/// Markdown → body XML. Numbering ids start at `first_num_id`.
pub(crate) fn markdown_body(
    md: &str,
    first_num_id: u32,
    style_map: &HashMap<String, String>,
) -> Body {
    let mut g = Gen {
        body: Body::default(),
        next_num_id: first_num_id,
        bullet_num: None,
        lists: Vec::new(),
        pending_item: None,
        para: None,
        bold: 0,
        italic: 0,
        strike: 0,
        quote: 0,
        code_block: false,
        table: None,
        links: Vec::new(),
        style_map,
    };
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    for event in Parser::new_ext(md, options) {
        g.event(event);
    }
    g.flush();
    g.body
}

impl Gen<'_> {
    /// Notes a style as used and returns the id to write for it.
    fn style(&mut self, id: &'static str) -> String {
        self.body.styles.insert(id);
        escape_attr(self.style_map.get(id).map_or(id, String::as_str)).into_owned()
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(t) => {
                if self.code_block {
                    let text = t.strip_suffix('\n').unwrap_or(&t);
                    for line in text.split('\n') {
                        let style = self.style("Code");
                        self.para = Some(Para {
                            ppr: format!("<w:pStyle w:val=\"{style}\"/>"),
                            ..Para::default()
                        });
                        self.run(line.trim_end_matches('\r'), false);
                        self.flush();
                    }
                } else {
                    self.run(&t, false);
                }
            }
            Event::Code(t) => self.run(&t, true),
            Event::Html(t) | Event::InlineHtml(t) => {
                let t = t.trim_end_matches('\n').to_owned();
                self.run(&t, false);
            }
            Event::InlineMath(t) | Event::DisplayMath(t) => self.run(&t, false),
            Event::FootnoteReference(t) => self.run(&format!("[^{t}]"), false),
            Event::SoftBreak => self.run(" ", false),
            Event::HardBreak => {
                self.ensure_para();
                if let Some(p) = self.para.as_mut() {
                    p.commit();
                    p.runs.push_str("<w:r><w:br/></w:r>");
                    p.text.push('\n');
                }
            }
            Event::Rule => {
                self.flush();
                self.body.xml.push_str(
                    "<w:p><w:pPr><w:pBdr><w:bottom w:val=\"single\" w:sz=\"6\" w:space=\"1\" w:color=\"auto\"/></w:pBdr></w:pPr></w:p>",
                );
                self.body.paragraphs += 1;
                self.body.ends_with_table = false;
            }
            Event::TaskListMarker(done) => self.run(if done { "[x] " } else { "[ ] " }, false),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            // Cells hold their text directly; elsewhere a paragraph ends the previous one.
            Tag::Paragraph if self.table.is_none() => self.flush(),
            Tag::Heading { level, .. } => {
                self.flush();
                let n = match level {
                    HeadingLevel::H1 => 1,
                    HeadingLevel::H2 => 2,
                    HeadingLevel::H3 => 3,
                    HeadingLevel::H4 => 4,
                    HeadingLevel::H5 => 5,
                    HeadingLevel::H6 => 6,
                };
                let style = self.style(HEADINGS[n as usize - 1]);
                self.para = Some(Para {
                    ppr: format!("<w:pStyle w:val=\"{style}\"/>"),
                    ..Para::default()
                });
            }
            Tag::BlockQuote(_) => {
                self.flush();
                self.quote += 1;
            }
            Tag::CodeBlock(_) => {
                self.flush();
                self.code_block = true;
            }
            Tag::List(start) => {
                self.flush();
                let ordered = start.is_some();
                let num_id = if ordered {
                    let id = self.next_num_id;
                    self.next_num_id += 1;
                    let level = self.lists.len().min(8) as u8;
                    self.body.nums.push(NumInstance {
                        num_id: id,
                        ordered: true,
                        level,
                        start: start.unwrap_or(1).min(u64::from(u32::MAX)) as u32,
                    });
                    id
                } else {
                    match self.bullet_num {
                        Some(id) => id,
                        None => {
                            let id = self.next_num_id;
                            self.next_num_id += 1;
                            self.bullet_num = Some(id);
                            self.body.nums.push(NumInstance {
                                num_id: id,
                                ordered: false,
                                level: 0,
                                start: 1,
                            });
                            id
                        }
                    }
                };
                self.lists.push(ListCtx { ordered, num_id });
            }
            Tag::Item => {
                self.flush();
                if let Some(l) = self.lists.last() {
                    let level = (self.lists.len() - 1).min(8) as u8;
                    self.pending_item = Some((l.num_id, level, l.ordered));
                }
            }
            Tag::Table(aligns) => {
                self.flush();
                self.table = Some(TableCtx {
                    aligns,
                    rows: Vec::new(),
                    row: Vec::new(),
                    in_head: false,
                });
            }
            Tag::TableHead => {
                if let Some(t) = self.table.as_mut() {
                    t.in_head = true;
                    t.row.clear();
                }
            }
            Tag::TableRow => {
                if let Some(t) = self.table.as_mut() {
                    t.row.clear();
                }
            }
            Tag::TableCell => {
                let (head, align) = match self.table.as_ref() {
                    Some(t) => (
                        t.in_head,
                        t.aligns
                            .get(t.row.len())
                            .copied()
                            .unwrap_or(Alignment::None),
                    ),
                    None => (false, Alignment::None),
                };
                let jc = match align {
                    Alignment::Center => "<w:jc w:val=\"center\"/>",
                    Alignment::Right => "<w:jc w:val=\"right\"/>",
                    _ => "",
                };
                if head {
                    self.bold += 1;
                }
                self.para = Some(Para {
                    ppr: format!("<w:spacing w:after=\"0\"/>{jc}"),
                    ..Para::default()
                });
            }
            Tag::Emphasis => self.italic += 1,
            Tag::Strong => self.bold += 1,
            Tag::Strikethrough => self.strike += 1,
            Tag::Link { dest_url, .. } => self.links.push(dest_url.to_string()),
            Tag::Paragraph
            | Tag::Image { .. }
            | Tag::FootnoteDefinition(_)
            | Tag::HtmlBlock
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::MetadataBlock(_)
            | Tag::Superscript
            | Tag::Subscript => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            // Cells hold their text directly; elsewhere a paragraph ends the previous one.
            TagEnd::Paragraph if self.table.is_none() => self.flush(),
            TagEnd::Heading(_) => {
                if self.body.first_heading.is_none()
                    && let Some(p) = &self.para
                {
                    let t = p.text.trim();
                    if !t.is_empty() {
                        self.body.first_heading = Some(t.to_owned());
                    }
                }
                self.flush();
            }
            TagEnd::BlockQuote(_) => {
                self.flush();
                self.quote = self.quote.saturating_sub(1);
            }
            TagEnd::CodeBlock => {
                self.flush();
                self.code_block = false;
            }
            TagEnd::List(_) => {
                self.flush();
                self.lists.pop();
            }
            TagEnd::Item => {
                // An empty item still shows its bullet.
                if self.pending_item.is_some() {
                    self.ensure_para();
                }
                self.flush();
            }
            TagEnd::TableCell => {
                let mut cell = self.para.take().unwrap_or_default();
                cell.commit();
                if let Some(t) = self.table.as_mut() {
                    if t.in_head {
                        self.bold = self.bold.saturating_sub(1);
                    }
                    t.row.push(format!(
                        "<w:p><w:pPr>{}</w:pPr>{}</w:p>",
                        cell.ppr, cell.runs
                    ));
                }
            }
            TagEnd::TableHead => {
                if let Some(t) = self.table.as_mut() {
                    let row = std::mem::take(&mut t.row);
                    t.rows.push((true, row));
                    t.in_head = false;
                }
            }
            TagEnd::TableRow => {
                if let Some(t) = self.table.as_mut() {
                    let row = std::mem::take(&mut t.row);
                    t.rows.push((false, row));
                }
            }
            TagEnd::Table => {
                if let Some(t) = self.table.take() {
                    self.table_xml(t);
                }
            }
            TagEnd::Emphasis => self.italic = self.italic.saturating_sub(1),
            TagEnd::Strong => self.bold = self.bold.saturating_sub(1),
            TagEnd::Strikethrough => self.strike = self.strike.saturating_sub(1),
            TagEnd::Link => {
                if let Some(url) = self.links.pop() {
                    let shown = self
                        .para
                        .as_ref()
                        .is_some_and(|p| p.text.ends_with(url.as_str()));
                    if !url.is_empty() && !shown {
                        self.run(&format!(" ({url})"), false);
                    }
                }
            }
            _ => {}
        }
    }

    /// Opens a paragraph if none is open, styled for where we are.
    fn ensure_para(&mut self) {
        if self.para.is_some() {
            return;
        }
        let mut ppr = String::new();
        if let Some((num_id, level, ordered)) = self.pending_item.take() {
            let style = self.style(if ordered { "ListNumber" } else { "ListBullet" });
            let _ = write!(
                ppr,
                "<w:pStyle w:val=\"{style}\"/><w:numPr><w:ilvl w:val=\"{level}\"/><w:numId w:val=\"{num_id}\"/></w:numPr>"
            );
        } else if !self.lists.is_empty() {
            // A later paragraph of a list item: indented like the item's text.
            let level = self.lists.len() as u32;
            let style = self.style("ListParagraph");
            let _ = write!(
                ppr,
                "<w:pStyle w:val=\"{style}\"/><w:ind w:left=\"{}\"/>",
                720 * level
            );
        } else if self.quote > 0 {
            let style = self.style("Quote");
            let _ = write!(ppr, "<w:pStyle w:val=\"{style}\"/>");
        }
        self.para = Some(Para {
            ppr,
            ..Para::default()
        });
    }

    fn run(&mut self, text: &str, code: bool) {
        if text.is_empty() {
            return;
        }
        self.ensure_para();
        let mut rpr = String::new();
        if code {
            rpr.push_str("<w:rFonts w:ascii=\"Consolas\" w:hAnsi=\"Consolas\" w:cs=\"Consolas\"/>");
        }
        if self.bold > 0 {
            rpr.push_str("<w:b/>");
        }
        if self.italic > 0 {
            rpr.push_str("<w:i/>");
        }
        if self.strike > 0 {
            rpr.push_str("<w:strike/>");
        }
        let Some(p) = self.para.as_mut() else { return };
        p.text.push_str(text);
        match p.pending.as_mut() {
            Some((r, t)) if *r == rpr => t.push_str(text),
            _ => {
                p.commit();
                p.pending = Some((rpr, text.to_owned()));
            }
        }
    }

    fn flush(&mut self) {
        if let Some(mut p) = self.para.take() {
            p.commit();
            self.body.xml.push_str("<w:p>");
            if !p.ppr.is_empty() {
                let _ = write!(self.body.xml, "<w:pPr>{}</w:pPr>", p.ppr);
            }
            self.body.xml.push_str(&p.runs);
            self.body.xml.push_str("</w:p>");
            self.body.paragraphs += 1;
            self.body.ends_with_table = false;
        }
    }

    fn table_xml(&mut self, t: TableCtx) {
        let cols = t
            .rows
            .iter()
            .map(|(_, r)| r.len())
            .max()
            .unwrap_or(0)
            .max(t.aligns.len())
            .max(1);
        let width = TEXT_WIDTH / cols as u32;
        let style = self.style("TableGrid");
        let x = &mut self.body.xml;
        let _ = write!(x, "<w:tbl><w:tblPr><w:tblStyle w:val=\"{style}\"/>");
        x.push_str(
            "<w:tblW w:w=\"0\" w:type=\"auto\"/><w:tblLook w:val=\"04A0\" w:firstRow=\"1\" w:lastRow=\"0\" w:firstColumn=\"1\" w:lastColumn=\"0\" w:noHBand=\"0\" w:noVBand=\"1\"/></w:tblPr><w:tblGrid>",
        );
        for _ in 0..cols {
            let _ = write!(x, "<w:gridCol w:w=\"{width}\"/>");
        }
        x.push_str("</w:tblGrid>");
        for (head, row) in &t.rows {
            x.push_str("<w:tr>");
            if *head {
                x.push_str("<w:trPr><w:tblHeader/></w:trPr>");
            }
            for c in 0..cols {
                let _ = write!(
                    x,
                    "<w:tc><w:tcPr><w:tcW w:w=\"{width}\" w:type=\"dxa\"/></w:tcPr>"
                );
                match row.get(c) {
                    Some(p) => x.push_str(p),
                    None => x.push_str("<w:p/>"),
                }
                x.push_str("</w:tc>");
            }
            x.push_str("</w:tr>");
        }
        x.push_str("</w:tbl>");
        self.body.ends_with_table = true;
    }
}

const HEADINGS: [&str; 6] = [
    "Heading1", "Heading2", "Heading3", "Heading4", "Heading5", "Heading6",
];

fn heading_style(id: &str, n: u32) -> String {
    // Sizes in half-points for levels 1..6.
    let size = [32, 26, 24, 22, 22, 22][(n - 1) as usize];
    let italic = if n >= 4 { "<w:i/>" } else { "" };
    format!(
        "<w:style w:type=\"paragraph\" w:styleId=\"{id}\"><w:name w:val=\"heading {n}\"/><w:basedOn w:val=\"Normal\"/><w:next w:val=\"Normal\"/><w:uiPriority w:val=\"9\"/><w:qFormat/><w:pPr><w:keepNext/><w:keepLines/><w:spacing w:before=\"{}\" w:after=\"80\"/><w:outlineLvl w:val=\"{}\"/></w:pPr><w:rPr><w:rFonts w:ascii=\"Calibri Light\" w:hAnsi=\"Calibri Light\" w:cs=\"Calibri Light\"/><w:b/><w:bCs/>{italic}<w:color w:val=\"1F3864\"/><w:sz w:val=\"{size}\"/><w:szCs w:val=\"{size}\"/></w:rPr></w:style>",
        if n == 1 { 360 } else { 240 },
        n - 1
    )
}

/// The definition of a style this crate uses, by id.
pub(crate) fn style_xml(id: &str) -> Option<String> {
    if let Some(n) = HEADINGS.iter().position(|h| *h == id) {
        return Some(heading_style(id, n as u32 + 1));
    }
    let xml = match id {
        "Normal" => {
            "<w:style w:type=\"paragraph\" w:default=\"1\" w:styleId=\"Normal\"><w:name w:val=\"Normal\"/><w:qFormat/></w:style>"
        }
        "DefaultParagraphFont" => {
            "<w:style w:type=\"character\" w:default=\"1\" w:styleId=\"DefaultParagraphFont\"><w:name w:val=\"Default Paragraph Font\"/><w:uiPriority w:val=\"1\"/><w:semiHidden/><w:unhideWhenUsed/></w:style>"
        }
        "TableNormal" => {
            "<w:style w:type=\"table\" w:default=\"1\" w:styleId=\"TableNormal\"><w:name w:val=\"Normal Table\"/><w:uiPriority w:val=\"99\"/><w:semiHidden/><w:unhideWhenUsed/><w:tblPr><w:tblInd w:w=\"0\" w:type=\"dxa\"/><w:tblCellMar><w:top w:w=\"0\" w:type=\"dxa\"/><w:left w:w=\"108\" w:type=\"dxa\"/><w:bottom w:w=\"0\" w:type=\"dxa\"/><w:right w:w=\"108\" w:type=\"dxa\"/></w:tblCellMar></w:tblPr></w:style>"
        }
        "NoList" => {
            "<w:style w:type=\"numbering\" w:default=\"1\" w:styleId=\"NoList\"><w:name w:val=\"No List\"/><w:uiPriority w:val=\"99\"/><w:semiHidden/><w:unhideWhenUsed/></w:style>"
        }
        "Title" => {
            "<w:style w:type=\"paragraph\" w:styleId=\"Title\"><w:name w:val=\"Title\"/><w:basedOn w:val=\"Normal\"/><w:next w:val=\"Normal\"/><w:uiPriority w:val=\"10\"/><w:qFormat/><w:pPr><w:spacing w:after=\"160\" w:line=\"240\" w:lineRule=\"auto\"/><w:contextualSpacing/></w:pPr><w:rPr><w:rFonts w:ascii=\"Calibri Light\" w:hAnsi=\"Calibri Light\" w:cs=\"Calibri Light\"/><w:spacing w:val=\"-10\"/><w:kern w:val=\"28\"/><w:sz w:val=\"56\"/><w:szCs w:val=\"56\"/></w:rPr></w:style>"
        }
        "ListParagraph" => {
            "<w:style w:type=\"paragraph\" w:styleId=\"ListParagraph\"><w:name w:val=\"List Paragraph\"/><w:basedOn w:val=\"Normal\"/><w:uiPriority w:val=\"34\"/><w:qFormat/><w:pPr><w:ind w:left=\"720\"/><w:contextualSpacing/></w:pPr></w:style>"
        }
        "ListBullet" => {
            "<w:style w:type=\"paragraph\" w:styleId=\"ListBullet\"><w:name w:val=\"List Bullet\"/><w:basedOn w:val=\"ListParagraph\"/><w:uiPriority w:val=\"99\"/><w:unhideWhenUsed/><w:pPr><w:contextualSpacing/></w:pPr></w:style>"
        }
        "ListNumber" => {
            "<w:style w:type=\"paragraph\" w:styleId=\"ListNumber\"><w:name w:val=\"List Number\"/><w:basedOn w:val=\"ListParagraph\"/><w:uiPriority w:val=\"99\"/><w:unhideWhenUsed/><w:pPr><w:contextualSpacing/></w:pPr></w:style>"
        }
        "Quote" => {
            "<w:style w:type=\"paragraph\" w:styleId=\"Quote\"><w:name w:val=\"Quote\"/><w:basedOn w:val=\"Normal\"/><w:next w:val=\"Normal\"/><w:uiPriority w:val=\"29\"/><w:qFormat/><w:pPr><w:spacing w:before=\"120\" w:after=\"120\"/><w:ind w:left=\"720\" w:right=\"720\"/></w:pPr><w:rPr><w:i/><w:iCs/><w:color w:val=\"404040\"/></w:rPr></w:style>"
        }
        "Code" => {
            "<w:style w:type=\"paragraph\" w:customStyle=\"1\" w:styleId=\"Code\"><w:name w:val=\"Code\"/><w:basedOn w:val=\"Normal\"/><w:qFormat/><w:pPr><w:spacing w:after=\"0\" w:line=\"240\" w:lineRule=\"auto\"/></w:pPr><w:rPr><w:rFonts w:ascii=\"Consolas\" w:hAnsi=\"Consolas\" w:cs=\"Consolas\"/><w:sz w:val=\"20\"/><w:szCs w:val=\"20\"/></w:rPr></w:style>"
        }
        "TableGrid" => {
            "<w:style w:type=\"table\" w:styleId=\"TableGrid\"><w:name w:val=\"Table Grid\"/><w:basedOn w:val=\"TableNormal\"/><w:uiPriority w:val=\"39\"/><w:pPr><w:spacing w:after=\"0\" w:line=\"240\" w:lineRule=\"auto\"/></w:pPr><w:tblPr><w:tblBorders><w:top w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"auto\"/><w:left w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"auto\"/><w:bottom w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"auto\"/><w:right w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"auto\"/><w:insideH w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"auto\"/><w:insideV w:val=\"single\" w:sz=\"4\" w:space=\"0\" w:color=\"auto\"/></w:tblBorders></w:tblPr></w:style>"
        }
        _ => return None,
    };
    Some(xml.to_owned())
}

/// Every style a new document gets (all the ones Markdown can use, so a user editing
/// it in Word finds them).
pub(crate) const ALL_STYLES: &[&str] = &[
    "Normal",
    "DefaultParagraphFont",
    "TableNormal",
    "NoList",
    "Heading1",
    "Heading2",
    "Heading3",
    "Heading4",
    "Heading5",
    "Heading6",
    "Title",
    "ListParagraph",
    "ListBullet",
    "ListNumber",
    "Quote",
    "Code",
    "TableGrid",
];

/// Styles a style depends on (its `basedOn`), to add alongside it.
pub(crate) fn style_dependencies(id: &str) -> &'static [&'static str] {
    match id {
        "ListBullet" | "ListNumber" => &["ListParagraph", "Normal"],
        "TableGrid" => &["TableNormal"],
        _ => &["Normal"],
    }
}

pub(crate) fn styles_xml() -> String {
    let mut x = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<w:styles xmlns:w=\"{W_NS}\" xmlns:r=\"{R_NS}\"><w:docDefaults><w:rPrDefault><w:rPr><w:rFonts w:ascii=\"Calibri\" w:eastAsia=\"Calibri\" w:hAnsi=\"Calibri\" w:cs=\"Calibri\"/><w:sz w:val=\"22\"/><w:szCs w:val=\"22\"/><w:lang w:val=\"en-US\" w:eastAsia=\"en-US\" w:bidi=\"ar-SA\"/></w:rPr></w:rPrDefault><w:pPrDefault><w:pPr><w:spacing w:after=\"160\" w:line=\"259\" w:lineRule=\"auto\"/></w:pPr></w:pPrDefault></w:docDefaults>"
    );
    for id in ALL_STYLES {
        if let Some(s) = style_xml(id) {
            x.push_str(&s);
        }
    }
    x.push_str("</w:styles>");
    x
}

const BULLETS: [&str; 3] = ["\u{2022}", "\u{25E6}", "\u{25AA}"];

/// One abstract numbering definition (9 levels) for bullets or decimals.
pub(crate) fn abstract_num_xml(abstract_id: u32, ordered: bool) -> String {
    let mut x = format!(
        "<w:abstractNum w:abstractNumId=\"{abstract_id}\"><w:multiLevelType w:val=\"hybridMultilevel\"/>"
    );
    for l in 0..9u32 {
        let (fmt, text) = if ordered {
            ("decimal".to_owned(), format!("%{}.", l + 1))
        } else {
            ("bullet".to_owned(), BULLETS[l as usize % 3].to_owned())
        };
        let _ = write!(
            x,
            "<w:lvl w:ilvl=\"{l}\"><w:start w:val=\"1\"/><w:numFmt w:val=\"{fmt}\"/><w:lvlText w:val=\"{}\"/><w:lvlJc w:val=\"left\"/><w:pPr><w:ind w:left=\"{}\" w:hanging=\"360\"/></w:pPr></w:lvl>",
            escape_attr(&text),
            720 * (l + 1)
        );
    }
    x.push_str("</w:abstractNum>");
    x
}

/// `w:num` elements for the body's instances, given the two abstract ids.
pub(crate) fn nums_xml(
    nums: &[NumInstance],
    bullet_abstract: u32,
    decimal_abstract: u32,
) -> String {
    let mut x = String::new();
    for n in nums {
        if n.ordered {
            let _ = write!(
                x,
                "<w:num w:numId=\"{}\"><w:abstractNumId w:val=\"{decimal_abstract}\"/><w:lvlOverride w:ilvl=\"{}\"><w:startOverride w:val=\"{}\"/></w:lvlOverride></w:num>",
                n.num_id, n.level, n.start
            );
        } else {
            let _ = write!(
                x,
                "<w:num w:numId=\"{}\"><w:abstractNumId w:val=\"{bullet_abstract}\"/></w:num>",
                n.num_id
            );
        }
    }
    x
}

pub(crate) fn numbering_xml(nums: &[NumInstance]) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<w:numbering xmlns:w=\"{W_NS}\">{}{}{}</w:numbering>",
        abstract_num_xml(0, false),
        abstract_num_xml(1, true),
        nums_xml(nums, 0, 1)
    )
}

const SECT_PR: &str = "<w:sectPr><w:pgSz w:w=\"12240\" w:h=\"15840\"/><w:pgMar w:top=\"1440\" w:right=\"1440\" w:bottom=\"1440\" w:left=\"1440\" w:header=\"720\" w:footer=\"720\" w:gutter=\"0\"/><w:cols w:space=\"720\"/></w:sectPr>";

pub(crate) fn document_xml(body: &Body) -> String {
    let tail = if body.ends_with_table || body.xml.is_empty() {
        "<w:p/>"
    } else {
        ""
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<w:document xmlns:w=\"{W_NS}\" xmlns:r=\"{R_NS}\"><w:body>{}{tail}{SECT_PR}</w:body></w:document>",
        body.xml
    )
}

pub(crate) const CONTENT_TYPES: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\"><Default Extension=\"rels\" ContentType=\"application/vnd.openxmlformats-package.relationships+xml\"/><Default Extension=\"xml\" ContentType=\"application/xml\"/><Override PartName=\"/word/document.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml\"/><Override PartName=\"/word/styles.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml\"/><Override PartName=\"/word/numbering.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.wordprocessingml.numbering+xml\"/><Override PartName=\"/docProps/core.xml\" ContentType=\"application/vnd.openxmlformats-package.core-properties+xml\"/><Override PartName=\"/docProps/app.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.extended-properties+xml\"/></Types>";

pub(crate) const ROOT_RELS: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\"><Relationship Id=\"rId1\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument\" Target=\"word/document.xml\"/><Relationship Id=\"rId2\" Type=\"http://schemas.openxmlformats.org/package/2006/relationships/metadata/core-properties\" Target=\"docProps/core.xml\"/><Relationship Id=\"rId3\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/extended-properties\" Target=\"docProps/app.xml\"/></Relationships>";

pub(crate) const DOCUMENT_RELS: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\"><Relationship Id=\"rId1\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles\" Target=\"styles.xml\"/><Relationship Id=\"rId2\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/numbering\" Target=\"numbering.xml\"/></Relationships>";

pub(crate) const APP_XML: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Properties xmlns=\"http://schemas.openxmlformats.org/officeDocument/2006/extended-properties\"><Application>Capstan</Application></Properties>";

pub(crate) fn core_xml(title: Option<&str>) -> String {
    let title = title
        .map(|t| format!("<dc:title>{}</dc:title>", escape_text(t)))
        .unwrap_or_default();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<cp:coreProperties xmlns:cp=\"http://schemas.openxmlformats.org/package/2006/metadata/core-properties\" xmlns:dc=\"http://purl.org/dc/elements/1.1/\" xmlns:dcterms=\"http://purl.org/dc/terms/\" xmlns:dcmitype=\"http://purl.org/dc/dcmitype/\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\">{title}<dc:creator>Capstan</dc:creator></cp:coreProperties>"
    )
}

/// The display name of one of our styles (how Word matches styles across documents).
pub(crate) fn style_name(id: &str) -> Option<String> {
    if let Some(n) = HEADINGS.iter().position(|h| *h == id) {
        return Some(format!("heading {}", n + 1));
    }
    let name = match id {
        "Normal" => "Normal",
        "DefaultParagraphFont" => "Default Paragraph Font",
        "TableNormal" => "Normal Table",
        "NoList" => "No List",
        "Title" => "Title",
        "ListParagraph" => "List Paragraph",
        "ListBullet" => "List Bullet",
        "ListNumber" => "List Number",
        "Quote" => "Quote",
        "Code" => "Code",
        "TableGrid" => "Table Grid",
        _ => return None,
    };
    Some(name.to_owned())
}
