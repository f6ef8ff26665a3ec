//! `.docx` (Office Open XML): the main document part of the zip, read with quick-xml.
//!
//! * one block per paragraph (`w:p`), text from `w:t` runs (tabs and breaks kept); deleted
//!   text (`w:delText`) and field codes are not text;
//! * a paragraph whose style is a heading (`styles.xml` name `heading N` or style id
//!   `HeadingN`, or an outline level) is a heading block; `Title` is above level 1;
//! * a "line" is the 1-based index of a paragraph in document order, counting every `w:p`.
//!
//! Untrusted input: the zip is read from memory; each decompressed part is capped (both
//! the declared and the actual size, against zip bombs); XML entities other than the five
//! predefined ones and character references are never expanded (quick-xml does not expand
//! DTD entities, and unknown references are dropped), so entity bombs cannot grow; nesting
//! of paragraphs (text boxes) is bounded. Every failure is a [`ParseError`], never a panic.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{Cursor, Read};

use quick_xml::Reader;
use quick_xml::XmlVersion;
use quick_xml::escape::resolve_xml_entity;
use quick_xml::events::{BytesStart, Event};
use zip::ZipArchive;
use zip::result::ZipError;

use crate::ParseError;
use crate::chunk::Block;

/// Text boxes nest paragraphs inside paragraphs; real documents stay far below this.
const MAX_PARAGRAPH_NESTING: usize = 64;

fn malformed(detail: impl Into<String>) -> ParseError {
    ParseError::Malformed {
        format: "docx",
        detail: detail.into(),
    }
}

type Zip<'a> = ZipArchive<Cursor<&'a [u8]>>;

/// Reads one part as UTF-8 text, `None` if the archive has no such part.
fn read_part(zip: &mut Zip<'_>, name: &str, cap: u64) -> Result<Option<String>, ParseError> {
    let file = match zip.by_name(name) {
        Ok(f) => f,
        Err(ZipError::FileNotFound) => return Ok(None),
        Err(e) => return Err(malformed(format!("{name}: {e}"))),
    };
    if file.size() > cap {
        return Err(ParseError::TooLarge {
            size: file.size(),
            limit: cap,
        });
    }
    let mut buf = Vec::new();
    // The declared size can lie: never read more than the cap, whatever it says.
    file.take(cap.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| malformed(format!("{name}: {e}")))?;
    let len = buf.len() as u64;
    if len > cap {
        return Err(ParseError::TooLarge {
            size: len,
            limit: cap,
        });
    }
    let buf = buf.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&buf).to_vec();
    String::from_utf8(buf)
        .map(Some)
        .map_err(|e| malformed(format!("{name}: not UTF-8 ({e})")))
}

fn attr(e: &BytesStart<'_>, local: &str) -> Option<String> {
    e.attributes().flatten().find_map(|a| {
        (a.key.local_name().as_ref() == local)
            .then(|| {
                a.normalized_value(XmlVersion::Implicit1_0)
                    .ok()
                    .map(|v| v.into_owned())
            })
            .flatten()
    })
}

fn xml_error(part: &str, reader: &Reader<&[u8]>, e: &quick_xml::Error) -> ParseError {
    malformed(format!(
        "{part}: invalid XML at byte {}: {e}",
        reader.error_position()
    ))
}

/// The main document part named by `_rels/.rels` (usually `word/document.xml`).
fn main_part(zip: &mut Zip<'_>, cap: u64) -> Result<String, ParseError> {
    const DEFAULT: &str = "word/document.xml";
    let Some(rels) = read_part(zip, "_rels/.rels", cap)? else {
        return Ok(DEFAULT.to_owned());
    };
    let mut reader = Reader::from_str(&rels);
    loop {
        match reader.read_event() {
            Ok(Event::Start(e) | Event::Empty(e))
                if e.local_name().as_ref() == "Relationship"
                    && attr(&e, "Type").is_some_and(|t| t.ends_with("/officeDocument")) =>
            {
                if let Some(target) = attr(&e, "Target") {
                    return Ok(target.trim_start_matches('/').to_owned());
                }
            }
            Ok(Event::Eof) => return Ok(DEFAULT.to_owned()),
            Ok(_) => {}
            Err(e) => return Err(xml_error("_rels/.rels", &reader, &e)),
        }
    }
}

/// Heading level from a style name or id: `heading N` / `HeadingN` → N, `Title` → 0.
fn level_from_style_name(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase().replace(' ', "");
    if lower == "title" {
        return Some(0);
    }
    let n: u32 = lower.strip_prefix("heading")?.parse().ok()?;
    (1..=9).contains(&n).then_some(n)
}

/// Style id → heading level, from `styles.xml` (names or outline levels).
fn heading_styles(xml: &str) -> Result<HashMap<String, u32>, String> {
    let mut out = HashMap::new();
    let mut reader = Reader::from_str(xml);
    let mut cur: Option<(String, Option<u32>)> = None;
    loop {
        match reader.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) => match e.local_name().as_ref() {
                "style" => cur = attr(&e, "styleId").map(|id| (id, None)),
                "name" => {
                    if let Some((_, level)) = cur.as_mut()
                        && let Some(l) = attr(&e, "val").and_then(|v| level_from_style_name(&v))
                    {
                        *level = Some(l);
                    }
                }
                "outlineLvl" => {
                    if let Some((_, level @ None)) = cur.as_mut()
                        && let Some(l) = attr(&e, "val").and_then(|v| v.parse::<u32>().ok())
                        && l < 9
                    {
                        *level = Some(l + 1);
                    }
                }
                _ => {}
            },
            Ok(Event::End(e)) if e.local_name().as_ref() == "style" => {
                if let Some((id, Some(level))) = cur.take() {
                    out.insert(id, level);
                }
            }
            Ok(Event::Eof) => return Ok(out),
            Ok(_) => {}
            Err(e) => return Err(format!("at byte {}: {e}", reader.error_position())),
        }
    }
}

#[derive(Default)]
struct Para {
    index: u32,
    text: String,
    style: Option<String>,
    outline: Option<u32>,
}

pub(crate) fn blocks(bytes: &[u8], cap: u64) -> Result<Vec<Block<'static>>, ParseError> {
    let mut zip =
        ZipArchive::new(Cursor::new(bytes)).map_err(|e| malformed(format!("not a zip: {e}")))?;
    let part = main_part(&mut zip, cap)?;
    let xml = read_part(&mut zip, &part, cap)?
        .ok_or_else(|| malformed(format!("no main document part ({part})")))?;
    let dir = part.rsplit_once('/').map_or("", |(d, _)| d);
    let styles_part = if dir.is_empty() {
        "styles.xml".to_owned()
    } else {
        format!("{dir}/styles.xml")
    };
    // Styles only refine headings: a broken styles part degrades to style-id matching.
    let styles = match read_part(&mut zip, &styles_part, cap) {
        Ok(Some(s)) => heading_styles(&s).unwrap_or_default(),
        _ => HashMap::new(),
    };
    document_blocks(&xml, &part, &styles)
}

fn document_blocks(
    xml: &str,
    part: &str,
    styles: &HashMap<String, u32>,
) -> Result<Vec<Block<'static>>, ParseError> {
    let mut reader = Reader::from_str(xml);
    let mut out = Vec::new();
    let mut stack: Vec<Para> = Vec::new();
    let mut count = 0u32;
    let mut in_text = false;
    let mut in_ppr = 0usize;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| xml_error(part, &reader, &e))?;
        let empty = matches!(event, Event::Empty(_));
        match event {
            Event::Start(e) | Event::Empty(e) => {
                match e.local_name().as_ref() {
                    // An empty paragraph still takes its index.
                    "p" if empty => count = count.saturating_add(1),
                    "p" => {
                        if stack.len() >= MAX_PARAGRAPH_NESTING {
                            return Err(malformed(format!("{part}: paragraphs nested too deeply")));
                        }
                        count = count.saturating_add(1);
                        stack.push(Para {
                            index: count,
                            ..Para::default()
                        });
                    }
                    "t" => in_text = !empty,
                    "pPr" if !empty => in_ppr += 1,
                    "pStyle" if in_ppr > 0 => {
                        if let Some(p) = stack.last_mut() {
                            p.style = attr(&e, "val");
                        }
                    }
                    "outlineLvl" if in_ppr > 0 => {
                        if let Some(p) = stack.last_mut() {
                            p.outline = attr(&e, "val")
                                .and_then(|v| v.parse::<u32>().ok())
                                .filter(|l| *l < 9)
                                .map(|l| l + 1);
                        }
                    }
                    // Tab stops and breaks inside paragraph properties are layout, not text.
                    "tab" if in_ppr == 0 => push_text(&mut stack, "\t"),
                    "br" | "cr" if in_ppr == 0 => push_text(&mut stack, "\n"),
                    _ => {}
                }
            }
            Event::Text(t) if in_text => push_text(&mut stack, &t.xml10_content()),
            Event::CData(t) if in_text => {
                push_text(&mut stack, &t.into_inner());
            }
            Event::GeneralRef(r) if in_text => {
                // Character references and the five predefined entities only: custom
                // entities are never expanded.
                if r.is_char_ref() {
                    if let Ok(Some(c)) = r.resolve_char_ref() {
                        push_text(&mut stack, c.encode_utf8(&mut [0; 4]));
                    }
                } else if let Some(s) = resolve_xml_entity(&r) {
                    push_text(&mut stack, s);
                }
            }
            Event::End(e) => match e.local_name().as_ref() {
                "t" => in_text = false,
                "pPr" => in_ppr = in_ppr.saturating_sub(1),
                "p" => {
                    if let Some(p) = stack.pop()
                        && let Some(b) = finish(p, styles)
                    {
                        out.push(b);
                    }
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(out)
}

fn push_text(stack: &mut [Para], s: &str) {
    if let Some(p) = stack.last_mut() {
        p.text.push_str(s);
    }
}

fn finish(p: Para, styles: &HashMap<String, u32>) -> Option<Block<'static>> {
    let text = p.text.trim();
    if text.is_empty() {
        return None;
    }
    let level = p.outline.or_else(|| {
        let id = p.style.as_deref()?;
        styles
            .get(id)
            .copied()
            .or_else(|| level_from_style_name(id))
    });
    Some(match level {
        Some(level) => Block::heading(level, text, p.index),
        None => Block::prose(
            text.lines()
                .map(|l| (p.index, Cow::Owned(l.trim_end().to_owned())))
                .collect(),
        ),
    })
}
