//! `word/document.xml` (with `styles.xml` and `numbering.xml`) into a [`Document`].
//!
//! * text comes from `w:t` (plus `w:tab`, `w:br`, `w:cr`, `w:noBreakHyphen`); deleted
//!   text (`w:delText`), field codes (`w:instrText`) and `mc:Fallback` copies of
//!   drawings are not text;
//! * a run is bold/italic when its own `w:rPr` or its character style says so
//!   (`w:b`, `w:b w:val="0"` turns it off); tracked formatting changes are ignored;
//! * a paragraph's kind comes from its style (following `w:basedOn`): `Title`,
//!   `heading N` / `HeadingN` / an outline level, numbering (direct `w:numPr` or the
//!   style's, `numId` 0 meaning none) with `numbering.xml` deciding bullet or number,
//!   quote and code styles;
//! * text boxes (paragraphs inside a paragraph) follow their paragraph; a table nested in
//!   a cell becomes lines of that cell.

use std::collections::HashMap;

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use crate::model::{Block, Cell, Document, Paragraph, ParagraphKind, Run, Table};
use crate::opc::{self, Error, Kind, Package, Result, attr};

/// Paragraphs nested in paragraphs (text boxes) and tables in tables, at most.
const MAX_NESTING: usize = 64;
/// `w:basedOn` chains are followed this far (they can loop in broken files).
const MAX_STYLE_CHAIN: usize = 16;

#[derive(Debug, Default, Clone)]
pub(crate) struct StyleDef {
    pub name: String,
    based_on: Option<String>,
    outline: Option<u8>,
    num_id: Option<u32>,
    ilvl: Option<u8>,
    bold: Option<bool>,
    italic: Option<bool>,
}

#[derive(Debug, Default)]
pub(crate) struct Styles {
    pub defs: HashMap<String, StyleDef>,
}

#[derive(Debug, Default)]
struct Level {
    fmt: String,
    start: u32,
}

#[derive(Debug, Default)]
struct Numbering {
    /// abstractNumId → ilvl → level.
    abstracts: HashMap<u32, HashMap<u8, Level>>,
    /// numId → (abstractNumId, ilvl → start override).
    nums: HashMap<u32, (u32, HashMap<u8, u32>)>,
}

impl Numbering {
    fn level(&self, num_id: u32, ilvl: u8) -> Option<&Level> {
        let (abs, _) = self.nums.get(&num_id)?;
        self.abstracts.get(abs)?.get(&ilvl)
    }
    fn start(&self, num_id: u32, ilvl: u8) -> u32 {
        self.nums
            .get(&num_id)
            .and_then(|(_, o)| o.get(&ilvl).copied())
            .or_else(|| self.level(num_id, ilvl).map(|l| l.start))
            .unwrap_or(1)
    }
}

/// The parts a reader needs, located through the relationships.
pub(crate) struct Parts {
    pub main: String,
    pub styles: Option<String>,
    pub numbering: Option<String>,
    pub core: Option<String>,
}

pub(crate) fn locate(pkg: &mut Package<'_>) -> Result<Parts> {
    let root = pkg.rels("")?;
    let main = pkg.main_part()?;
    let core = root
        .iter()
        .find(|r| !r.external && r.rel_type.ends_with("/core-properties"))
        .map(|r| r.target.clone())
        .or_else(|| {
            pkg.has("docProps/core.xml")
                .then(|| "docProps/core.xml".to_owned())
        });
    let rels = pkg.rels(&main)?;
    let find = |suffix: &str| {
        rels.iter()
            .find(|r| !r.external && r.rel_type.ends_with(suffix))
            .map(|r| r.target.clone())
    };
    Ok(Parts {
        styles: find("/styles"),
        numbering: find("/numbering"),
        core,
        main,
    })
}

pub(crate) fn read(bytes: &[u8]) -> Result<Document> {
    let mut pkg = Package::open(bytes, Kind::Docx)?;
    let parts = locate(&mut pkg)?;
    let (_, xml) = pkg.main_xml()?;
    let styles = match &parts.styles {
        Some(p) => match pkg.read_xml(p)? {
            Some(s) => parse_styles(&s, p)?,
            None => Styles::default(),
        },
        None => Styles::default(),
    };
    let numbering = match &parts.numbering {
        Some(p) => match pkg.read_xml(p)? {
            Some(s) => parse_numbering(&s, p)?,
            None => Numbering::default(),
        },
        None => Numbering::default(),
    };
    let title = match &parts.core {
        Some(p) => match pkg.read_xml(p)? {
            Some(s) => core_title(&s, p)?,
            None => None,
        },
        None => None,
    };
    let mut doc = parse_document(&xml, &parts.main, &styles, &numbering)?;
    doc.title = title;
    Ok(doc)
}

fn on_off(e: &BytesStart<'_>) -> bool {
    !matches!(
        attr(e, "val").as_deref(),
        Some("0" | "false" | "off" | "none")
    )
}

fn parse_u32(e: &BytesStart<'_>) -> Option<u32> {
    attr(e, "val").and_then(|v| v.trim().parse().ok())
}

pub(crate) fn parse_styles(xml: &str, part: &str) -> Result<Styles> {
    let mut reader = Reader::from_str(xml);
    let mut out = Styles::default();
    let mut cur: Option<(String, StyleDef)> = None;
    let mut in_rpr = false;
    loop {
        let ev = reader
            .read_event()
            .map_err(|e| Error::xml(part, &reader, e))?;
        let is_start = matches!(ev, Event::Start(_));
        match ev {
            // Revisions of a style's formatting are history, not the style.
            Event::Start(e) if matches!(e.local_name().as_ref(), "rPrChange" | "pPrChange") => {
                reader
                    .read_to_end(e.name())
                    .map_err(|er| Error::xml(part, &reader, er))?;
            }
            Event::Start(e) | Event::Empty(e) => {
                let name = e.local_name();
                if name.as_ref() == "style" {
                    cur = attr(&e, "styleId").map(|id| (id, StyleDef::default()));
                    in_rpr = false;
                    continue;
                }
                let Some((_, def)) = cur.as_mut() else {
                    continue;
                };
                match name.as_ref() {
                    "name" => def.name = attr(&e, "val").unwrap_or_default(),
                    "basedOn" => def.based_on = attr(&e, "val"),
                    "outlineLvl" => {
                        def.outline = parse_u32(&e).filter(|l| *l < 9).map(|l| l as u8 + 1)
                    }
                    "numId" => def.num_id = parse_u32(&e),
                    "ilvl" => def.ilvl = parse_u32(&e).map(|l| l.min(8) as u8),
                    "rPr" => in_rpr = is_start,
                    "b" if in_rpr => def.bold = Some(on_off(&e)),
                    "i" if in_rpr => def.italic = Some(on_off(&e)),
                    _ => {}
                }
            }
            Event::End(e) => match e.local_name().as_ref() {
                "style" => {
                    if let Some((id, def)) = cur.take() {
                        out.defs.insert(id, def);
                    }
                }
                "rPr" => in_rpr = false,
                _ => {}
            },
            Event::DocType(_) => {
                return Err(Error::Doctype {
                    part: part.to_owned(),
                });
            }
            Event::Eof => return Ok(out),
            _ => {}
        }
    }
}

fn parse_numbering(xml: &str, part: &str) -> Result<Numbering> {
    let mut reader = Reader::from_str(xml);
    let mut out = Numbering::default();
    let mut abs: Option<u32> = None;
    let mut lvl: Option<u8> = None;
    let mut num: Option<u32> = None;
    let mut override_lvl: Option<u8> = None;
    loop {
        let ev = reader
            .read_event()
            .map_err(|e| Error::xml(part, &reader, e))?;
        match ev {
            Event::Start(e) | Event::Empty(e) => match e.local_name().as_ref() {
                "abstractNum" => {
                    abs = attr(&e, "abstractNumId").and_then(|v| v.parse().ok());
                    if let Some(a) = abs {
                        out.abstracts.entry(a).or_default();
                    }
                }
                "lvl" => {
                    lvl = attr(&e, "ilvl")
                        .and_then(|v| v.parse::<u32>().ok())
                        .map(|l| l.min(8) as u8);
                    if let (Some(a), Some(l), None) = (abs, lvl, num) {
                        out.abstracts
                            .entry(a)
                            .or_default()
                            .entry(l)
                            .or_insert(Level {
                                fmt: String::new(),
                                start: 1,
                            });
                    }
                }
                "numFmt" => {
                    if let (Some(a), Some(l), None) = (abs, lvl, num)
                        && let Some(level) = out.abstracts.get_mut(&a).and_then(|m| m.get_mut(&l))
                    {
                        level.fmt = attr(&e, "val").unwrap_or_default();
                    }
                }
                "start" => {
                    if let (Some(a), Some(l), None) = (abs, lvl, num)
                        && let Some(level) = out.abstracts.get_mut(&a).and_then(|m| m.get_mut(&l))
                    {
                        level.start = parse_u32(&e).unwrap_or(1);
                    }
                }
                "num" => {
                    num = attr(&e, "numId").and_then(|v| v.parse().ok());
                    abs = None;
                }
                "abstractNumId" => {
                    if let (Some(n), Some(a)) = (num, parse_u32(&e)) {
                        out.nums.entry(n).or_insert_with(|| (a, HashMap::new())).0 = a;
                    }
                }
                "lvlOverride" => {
                    override_lvl = attr(&e, "ilvl")
                        .and_then(|v| v.parse::<u32>().ok())
                        .map(|l| l.min(8) as u8);
                }
                "startOverride" => {
                    if let (Some(n), Some(l), Some(s)) = (num, override_lvl, parse_u32(&e))
                        && let Some((_, o)) = out.nums.get_mut(&n)
                    {
                        o.insert(l, s);
                    }
                }
                _ => {}
            },
            Event::End(e) => match e.local_name().as_ref() {
                "abstractNum" => abs = None,
                "lvl" => lvl = None,
                "num" => num = None,
                "lvlOverride" => override_lvl = None,
                _ => {}
            },
            Event::DocType(_) => {
                return Err(Error::Doctype {
                    part: part.to_owned(),
                });
            }
            Event::Eof => return Ok(out),
            _ => {}
        }
    }
}

/// `dc:title` of `docProps/core.xml`.
pub(crate) fn core_title(xml: &str, part: &str) -> Result<Option<String>> {
    let mut reader = Reader::from_str(xml);
    let mut in_title = false;
    let mut title = String::new();
    loop {
        let ev = reader
            .read_event()
            .map_err(|e| Error::xml(part, &reader, e))?;
        match ev {
            Event::Start(e) if e.local_name().as_ref() == "title" => in_title = true,
            Event::End(e) if e.local_name().as_ref() == "title" => in_title = false,
            Event::Text(t) if in_title => title.push_str(&t.xml10_content()),
            Event::CData(t) if in_title => title.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if in_title => {
                if let Some(s) = opc::resolve_ref(&r) {
                    title.push_str(&s);
                }
            }
            Event::DocType(_) => {
                return Err(Error::Doctype {
                    part: part.to_owned(),
                });
            }
            Event::Eof => break,
            _ => {}
        }
    }
    let title = title.trim();
    Ok((!title.is_empty()).then(|| title.to_owned()))
}

impl Styles {
    /// Walks the `basedOn` chain from `id`, returning the first value `f` gives.
    fn find<T>(&self, id: &str, f: impl Fn(&str, &StyleDef) -> Option<T>) -> Option<T> {
        let mut cur = Some(id.to_owned());
        for _ in 0..MAX_STYLE_CHAIN {
            let id = cur?;
            let Some(def) = self.defs.get(&id) else {
                return f(&id, &StyleDef::default());
            };
            if let Some(v) = f(&id, def) {
                return Some(v);
            }
            cur = def.based_on.clone();
        }
        None
    }

    fn name_of<'s>(&'s self, id: &'s str) -> &'s str {
        self.defs
            .get(id)
            .map(|d| d.name.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or(id)
    }
}

fn squash(name: &str) -> String {
    name.chars()
        .filter(|c| !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect()
}

/// `heading N` / `HeadingN` → N; `Title` → 0.
fn heading_from_name(name: &str) -> Option<u8> {
    let s = squash(name);
    if s == "title" {
        return Some(0);
    }
    let n: u8 = s.strip_prefix("heading")?.parse().ok()?;
    (1..=9).contains(&n).then_some(n)
}

/// The trailing number of `List Bullet 2` / `List Number 3` (a level, 1-based).
fn list_style_level(name: &str) -> Option<u8> {
    let s = squash(name);
    let rest = s
        .strip_prefix("listbullet")
        .or_else(|| s.strip_prefix("listnumber"))?;
    if rest.is_empty() {
        return Some(1);
    }
    rest.parse().ok().filter(|n| (1..=9).contains(n))
}

#[derive(Default)]
struct ParaBuilder {
    style: Option<String>,
    num_id: Option<u32>,
    ilvl: Option<u8>,
    outline: Option<u8>,
    runs: Vec<Run>,
    /// Paragraphs of text boxes anchored in this one.
    nested: Vec<Paragraph>,
}

#[derive(Default)]
struct TableBuilder {
    rows: Vec<Vec<Cell>>,
    row: Option<Vec<Cell>>,
    cell: Option<Cell>,
}

#[derive(Default, Clone)]
struct RunProps {
    bold: Option<bool>,
    italic: Option<bool>,
    style: Option<String>,
}

struct Builder<'s> {
    styles: &'s Styles,
    numbering: &'s Numbering,
    /// numId → counters per level.
    counters: HashMap<u32, [Option<u32>; 9]>,
    blocks: Vec<Block>,
    paras: Vec<ParaBuilder>,
    tables: Vec<TableBuilder>,
}

impl Builder<'_> {
    fn finish_paragraph(&mut self, p: ParaBuilder) -> Vec<Paragraph> {
        let kind = self.kind_of(&p);
        let mut out = vec![Paragraph {
            kind,
            style_id: p.style,
            runs: p.runs,
        }];
        out.extend(p.nested);
        out
    }

    fn kind_of(&mut self, p: &ParaBuilder) -> ParagraphKind {
        let styles = self.styles;
        let style = p.style.as_deref();
        let name = style
            .map(|s| styles.name_of(s).to_owned())
            .unwrap_or_default();
        let heading = p.outline.or_else(|| {
            styles.find(style?, |id, def| {
                heading_from_name(&def.name)
                    .or_else(|| heading_from_name(id))
                    .or(def.outline)
            })
        });
        match heading {
            Some(0) => return ParagraphKind::Title,
            Some(l) => return ParagraphKind::Heading(l.min(9)),
            None => {}
        }
        let num_id = p
            .num_id
            .or_else(|| styles.find(style?, |_, d| d.num_id))
            .filter(|n| *n != 0);
        let named_level = list_style_level(&name);
        if num_id.is_some() || named_level.is_some() {
            let level = p
                .ilvl
                .or_else(|| style.and_then(|s| styles.find(s, |_, d| d.ilvl)))
                .or(named_level.map(|l| l - 1))
                .unwrap_or(0)
                .min(8);
            let fmt = num_id
                .and_then(|n| self.numbering.level(n, level))
                .map(|l| l.fmt.as_str());
            let ordered = match fmt {
                Some("bullet" | "none") => false,
                Some("") | None => squash(&name).contains("number"),
                Some(_) => true,
            };
            let number = if ordered {
                let key = num_id.unwrap_or(0);
                let start = num_id.map_or(1, |n| self.numbering.start(n, level));
                let counters = self.counters.entry(key).or_insert([None; 9]);
                let n = counters[level as usize].map_or(start, |c| c.saturating_add(1));
                counters[level as usize] = Some(n);
                for deeper in counters.iter_mut().skip(level as usize + 1) {
                    *deeper = None;
                }
                Some(n)
            } else {
                None
            };
            return ParagraphKind::ListItem {
                level,
                ordered,
                number,
            };
        }
        let s = squash(&name);
        if s.contains("quote") {
            return ParagraphKind::Quote;
        }
        if s == "code" || s.contains("codeblock") || s.contains("preformatted") || s == "sourcecode"
        {
            return ParagraphKind::Code;
        }
        ParagraphKind::Normal
    }

    fn place(&mut self, paragraphs: Vec<Paragraph>) {
        if let Some(outer) = self.paras.last_mut() {
            outer.nested.extend(paragraphs);
        } else if let Some(t) = self.tables.last_mut() {
            t.cell
                .get_or_insert_with(Cell::default)
                .paragraphs
                .extend(paragraphs);
        } else {
            self.blocks
                .extend(paragraphs.into_iter().map(Block::Paragraph));
        }
    }

    fn push_text(&mut self, s: &str) {
        if let Some(p) = self.paras.last_mut() {
            match p.runs.last_mut() {
                Some(r) => r.text.push_str(s),
                None => p.runs.push(Run {
                    text: s.to_owned(),
                    ..Run::default()
                }),
            }
        }
    }

    fn resolve_run(&self, props: &RunProps) -> (bool, bool) {
        let from_style = |f: fn(&StyleDef) -> Option<bool>| {
            props
                .style
                .as_deref()
                .and_then(|s| self.styles.find(s, |_, d| f(d)))
        };
        let bold = props
            .bold
            .or_else(|| from_style(|d| d.bold))
            .unwrap_or(false);
        let italic = props
            .italic
            .or_else(|| from_style(|d| d.italic))
            .unwrap_or(false);
        (bold, italic)
    }
}

fn parse_document(
    xml: &str,
    part: &str,
    styles: &Styles,
    numbering: &Numbering,
) -> Result<Document> {
    let mut reader = Reader::from_str(xml);
    let mut b = Builder {
        styles,
        numbering,
        counters: HashMap::new(),
        blocks: Vec::new(),
        paras: Vec::new(),
        tables: Vec::new(),
    };
    let mut in_text = false;
    let mut ppr_depth = 0usize;
    let mut in_run_props = false;
    let mut run_props: Option<RunProps> = None;
    loop {
        let ev = reader
            .read_event()
            .map_err(|e| Error::xml(part, &reader, e))?;
        match ev {
            Event::Start(e) => {
                let local = e.local_name();
                match local.as_ref() {
                    "p" => {
                        if b.paras.len() >= MAX_NESTING {
                            return Err(Error::Xml {
                                part: part.to_owned(),
                                detail: "paragraphs nested too deeply".into(),
                            });
                        }
                        b.paras.push(ParaBuilder::default());
                    }
                    "tbl" => {
                        if b.tables.len() >= MAX_NESTING {
                            return Err(Error::Xml {
                                part: part.to_owned(),
                                detail: "tables nested too deeply".into(),
                            });
                        }
                        b.tables.push(TableBuilder::default());
                    }
                    "tr" => {
                        if let Some(t) = b.tables.last_mut() {
                            t.row = Some(Vec::new());
                        }
                    }
                    "tc" => {
                        if let Some(t) = b.tables.last_mut() {
                            t.cell = Some(Cell::default());
                        }
                    }
                    "pPr" => ppr_depth += 1,
                    "r" if ppr_depth == 0 => {
                        run_props = Some(RunProps::default());
                        if let Some(p) = b.paras.last_mut() {
                            p.runs.push(Run::default());
                        }
                    }
                    "rPr" if ppr_depth == 0 && run_props.is_some() => in_run_props = true,
                    "t" => in_text = ppr_depth == 0,
                    // Alternative renderings, tracked formatting changes and section
                    // properties hold no body text of their own.
                    "Fallback" | "rPrChange" | "pPrChange" | "sectPr" | "tblPrChange"
                    | "trPrChange" | "tcPrChange" => {
                        reader
                            .read_to_end(e.name())
                            .map_err(|er| Error::xml(part, &reader, er))?;
                    }
                    _ => element(&mut b, &e, ppr_depth, in_run_props, &mut run_props),
                }
            }
            Event::Empty(e) => match e.local_name().as_ref() {
                "p" => {
                    let paragraphs = b.finish_paragraph(ParaBuilder::default());
                    b.place(paragraphs);
                }
                "tc" => {
                    if let Some(t) = b.tables.last_mut()
                        && let Some(row) = t.row.as_mut()
                    {
                        row.push(Cell::default());
                    }
                }
                _ => element(&mut b, &e, ppr_depth, in_run_props, &mut run_props),
            },
            Event::Text(t) if in_text => b.push_text(&t.xml10_content()),
            Event::CData(t) if in_text => b.push_text(&t.xml10_content()),
            Event::GeneralRef(r) if in_text => {
                if let Some(s) = opc::resolve_ref(&r) {
                    b.push_text(&s);
                }
            }
            Event::End(e) => match e.local_name().as_ref() {
                "t" => in_text = false,
                "pPr" => ppr_depth = ppr_depth.saturating_sub(1),
                "rPr" if in_run_props => {
                    in_run_props = false;
                    if let Some(props) = &run_props {
                        let (bold, italic) = b.resolve_run(props);
                        if let Some(r) = b.paras.last_mut().and_then(|p| p.runs.last_mut()) {
                            r.bold = bold;
                            r.italic = italic;
                        }
                    }
                }
                "r" if ppr_depth == 0 => run_props = None,
                "p" => {
                    if let Some(p) = b.paras.pop() {
                        let mut p = p;
                        p.runs.retain(|r| !r.text.is_empty());
                        let paragraphs = b.finish_paragraph(p);
                        b.place(paragraphs);
                    }
                }
                "tc" => {
                    if let Some(t) = b.tables.last_mut() {
                        let cell = t.cell.take().unwrap_or_default();
                        t.row.get_or_insert_with(Vec::new).push(cell);
                    }
                }
                "tr" => {
                    if let Some(t) = b.tables.last_mut()
                        && let Some(row) = t.row.take()
                    {
                        t.rows.push(row);
                    }
                }
                "tbl" => {
                    if let Some(t) = b.tables.pop() {
                        let table = Table { rows: t.rows };
                        if b.tables.is_empty() && b.paras.is_empty() {
                            b.blocks.push(Block::Table(table));
                        } else {
                            // A table inside a cell (or a text box): one line per row.
                            let lines: Vec<Paragraph> = table
                                .rows
                                .iter()
                                .map(|row| Paragraph {
                                    runs: vec![Run {
                                        text: row
                                            .iter()
                                            .map(Cell::text)
                                            .collect::<Vec<_>>()
                                            .join(" | "),
                                        ..Run::default()
                                    }],
                                    ..Paragraph::default()
                                })
                                .collect();
                            b.place(lines);
                        }
                    }
                }
                _ => {}
            },
            Event::DocType(_) => {
                return Err(Error::Doctype {
                    part: part.to_owned(),
                });
            }
            Event::Eof => break,
            _ => {}
        }
    }
    // Unclosed elements in a truncated part: keep what was read.
    while let Some(p) = b.paras.pop() {
        let paragraphs = b.finish_paragraph(p);
        b.place(paragraphs);
    }
    Ok(Document {
        title: None,
        blocks: b.blocks,
    })
}

/// Elements that matter whether written as `<x/>` or `<x>..</x>`.
fn element(
    b: &mut Builder<'_>,
    e: &BytesStart<'_>,
    ppr_depth: usize,
    in_run_props: bool,
    run_props: &mut Option<RunProps>,
) {
    let local = e.local_name();
    match local.as_ref() {
        "pStyle" if ppr_depth > 0 => {
            if let Some(p) = b.paras.last_mut() {
                p.style = attr(e, "val");
            }
        }
        "numId" if ppr_depth > 0 => {
            if let Some(p) = b.paras.last_mut() {
                p.num_id = parse_u32(e);
            }
        }
        "ilvl" if ppr_depth > 0 => {
            if let Some(p) = b.paras.last_mut() {
                p.ilvl = parse_u32(e).map(|l| l.min(8) as u8);
            }
        }
        "outlineLvl" if ppr_depth > 0 => {
            if let Some(p) = b.paras.last_mut() {
                p.outline = parse_u32(e).filter(|l| *l < 9).map(|l| l as u8 + 1);
            }
        }
        "b" if in_run_props => {
            if let Some(r) = run_props.as_mut() {
                r.bold = Some(on_off(e));
            }
        }
        "i" if in_run_props => {
            if let Some(r) = run_props.as_mut() {
                r.italic = Some(on_off(e));
            }
        }
        "rStyle" if in_run_props => {
            if let Some(r) = run_props.as_mut() {
                r.style = attr(e, "val");
            }
        }
        "tab" if ppr_depth == 0 && run_props.is_some() => b.push_text("\t"),
        // Page and column breaks are layout; text wrapping breaks are new lines.
        "br" if ppr_depth == 0
            && !matches!(attr(e, "type").as_deref(), Some("page" | "column")) =>
        {
            b.push_text("\n")
        }
        "cr" if ppr_depth == 0 => b.push_text("\n"),
        "noBreakHyphen" if ppr_depth == 0 => b.push_text("-"),
        _ => {}
    }
}
