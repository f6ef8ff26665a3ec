//! Edits of an existing package: find-and-replace and appending Markdown.
//!
//! Both splice new bytes into the original text of the parts they change and copy every
//! other zip entry raw, so nothing they do not mean to touch changes.

use std::collections::{HashMap, HashSet};

use quick_xml::Reader;
use quick_xml::events::Event;

use crate::opc::{self, Error, Kind, Package, Result, attr};
use crate::read::{Parts, locate, parse_styles};
use crate::write::{self, ALL_STYLES, W_NS};

/// One `w:t` element of the main part.
struct Seg {
    /// Byte range of the whole element, start tag to end tag.
    start: usize,
    end: usize,
    /// The element's qualified name as written (`w:t`).
    qname: String,
    text: String,
    /// Inside `mc:Fallback` (a copy of text shown elsewhere): replaced, not counted.
    fallback: bool,
}

enum Piece {
    Seg(usize),
    /// A tab or break between runs: a match never spans it.
    Barrier,
}

/// Replaces every occurrence of `find` in the body text of the main part.
pub(crate) fn replace(bytes: &[u8], find: &str, with: &str) -> Result<(Vec<u8>, usize)> {
    if find.is_empty() {
        return Err(Error::InvalidInput("the text to find is empty".into()));
    }
    if find.contains('\0') {
        return Err(Error::InvalidInput(
            "the text to find contains a NUL character".into(),
        ));
    }
    let mut pkg = Package::open(bytes, Kind::Docx)?;
    let (main, xml) = pkg.main_xml()?;
    let (new_xml, count) = replace_in_xml(&xml, &main, find, with)?;
    if count == 0 && new_xml == xml {
        return Ok((bytes.to_vec(), 0));
    }
    let out = opc::rewrite(&mut pkg, &[(main, new_xml.into_bytes())], &[])?;
    Ok((out, count))
}

fn replace_in_xml(xml: &str, part: &str, find: &str, with: &str) -> Result<(String, usize)> {
    let mut reader = Reader::from_str(xml);
    let mut segs: Vec<Seg> = Vec::new();
    // Paragraphs in the order they close, each a list of pieces.
    let mut done: Vec<Vec<Piece>> = Vec::new();
    let mut open: Vec<Vec<Piece>> = Vec::new();
    let mut cur: Option<Seg> = None;
    let mut fallback = 0usize;
    loop {
        let before = reader.buffer_position() as usize;
        let ev = reader
            .read_event()
            .map_err(|e| Error::xml(part, &reader, e))?;
        match ev {
            Event::Start(e) => match e.local_name().as_ref() {
                "p" => open.push(Vec::new()),
                "t" if !open.is_empty() => {
                    cur = Some(Seg {
                        start: before,
                        end: before,
                        qname: e.name().as_ref().to_owned(),
                        text: String::new(),
                        fallback: fallback > 0,
                    });
                }
                "Fallback" => fallback += 1,
                _ => {}
            },
            Event::Empty(e) => match e.local_name().as_ref() {
                "tab" | "br" | "cr" => {
                    if let Some(p) = open.last_mut() {
                        p.push(Piece::Barrier);
                    }
                }
                "p" => done.push(Vec::new()),
                _ => {}
            },
            Event::Text(t) => {
                if let Some(s) = cur.as_mut() {
                    s.text.push_str(&t.xml10_content());
                }
            }
            Event::CData(t) => {
                if let Some(s) = cur.as_mut() {
                    s.text.push_str(&t.xml10_content());
                }
            }
            Event::GeneralRef(r) => {
                if let Some(s) = cur.as_mut()
                    && let Some(v) = opc::resolve_ref(&r)
                {
                    s.text.push_str(&v);
                }
            }
            Event::End(e) => match e.local_name().as_ref() {
                "t" => {
                    if let Some(mut s) = cur.take() {
                        s.end = reader.buffer_position() as usize;
                        if let Some(p) = open.last_mut() {
                            p.push(Piece::Seg(segs.len()));
                        }
                        segs.push(s);
                    }
                }
                "p" => {
                    if let Some(p) = open.pop() {
                        done.push(p);
                    }
                }
                "Fallback" => fallback = fallback.saturating_sub(1),
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
    let mut new_text: HashMap<usize, String> = HashMap::new();
    let mut count = 0usize;
    for pieces in &done {
        // The paragraph's text, with a NUL at each barrier.
        let mut concat = String::new();
        let mut offsets: Vec<(usize, usize)> = Vec::new(); // (seg index, start offset)
        for piece in pieces {
            match piece {
                Piece::Seg(i) => {
                    offsets.push((*i, concat.len()));
                    concat.push_str(&segs[*i].text);
                }
                Piece::Barrier => concat.push('\0'),
            }
        }
        let matches: Vec<usize> = concat.match_indices(find).map(|(i, _)| i).collect();
        if matches.is_empty() {
            continue;
        }
        // Bytes of the concatenation that a match removes, and where replacements go.
        let mut removed = vec![false; concat.len()];
        for &m in &matches {
            removed[m..m + find.len()]
                .iter_mut()
                .for_each(|r| *r = true);
        }
        for &(i, off) in &offsets {
            let seg = &segs[i];
            let mut text = String::with_capacity(seg.text.len());
            let mut touched = false;
            for (j, c) in seg.text.char_indices() {
                let at = off + j;
                if matches.binary_search(&at).is_ok() {
                    text.push_str(with);
                    touched = true;
                    if !seg.fallback {
                        count += 1;
                    }
                }
                if removed[at] {
                    touched = true;
                } else {
                    text.push(c);
                }
            }
            if touched {
                new_text.insert(i, text);
            }
        }
    }
    if new_text.is_empty() {
        return Ok((xml.to_owned(), 0));
    }
    let mut edits: Vec<(usize, usize, String)> = new_text
        .into_iter()
        .map(|(i, text)| {
            let s = &segs[i];
            let element = format!(
                "<{0} xml:space=\"preserve\">{1}</{0}>",
                s.qname,
                opc::escape_text(&text)
            );
            (s.start, s.end, element)
        })
        .collect();
    edits.sort_by_key(|e| e.0);
    Ok((splice(xml, &edits), count))
}

/// Applies sorted, non-overlapping `(start, end, replacement)` edits.
fn splice(text: &str, edits: &[(usize, usize, String)]) -> String {
    let mut out =
        String::with_capacity(text.len() + edits.iter().map(|e| e.2.len()).sum::<usize>());
    let mut at = 0;
    for (start, end, with) in edits {
        out.push_str(&text[at..*start]);
        out.push_str(with);
        at = *end;
    }
    out.push_str(&text[at..]);
    out
}

/// Where things go in a part: offsets found by one pass of the reader.
struct Layout {
    /// Whether the root element binds `w` to the WordprocessingML namespace.
    w_bound: bool,
    /// Start of the first top-level child with one of the given names, if any.
    first: Option<usize>,
    /// Start of the root's end tag.
    root_end: Option<usize>,
    /// Values of a numeric attribute on top-level children, by child name.
    max_ids: HashMap<String, u32>,
}

/// Scans the top level of a part: `before` names the children to find the first of,
/// `ids` the (child, attribute) pairs to take the maximum of.
fn layout(xml: &str, part: &str, before: &[&str], ids: &[(&str, &str)]) -> Result<Layout> {
    let mut reader = Reader::from_str(xml);
    let mut depth = 0usize;
    let mut out = Layout {
        w_bound: false,
        first: None,
        root_end: None,
        max_ids: HashMap::new(),
    };
    loop {
        let pos = reader.buffer_position() as usize;
        let ev = reader
            .read_event()
            .map_err(|e| Error::xml(part, &reader, e))?;
        match &ev {
            Event::Start(e) | Event::Empty(e) => {
                if depth == 0 {
                    out.w_bound = e
                        .attributes()
                        .flatten()
                        .any(|a| a.key.as_ref() == "xmlns:w" && a.value.as_ref() == W_NS);
                }
                if depth == 1 {
                    let local = e.local_name();
                    if out.first.is_none() && before.contains(&local.as_ref()) {
                        out.first = Some(pos);
                    }
                    for (child, attribute) in ids {
                        if local.as_ref() == *child
                            && let Some(v) = attr(e, attribute).and_then(|v| v.parse::<u32>().ok())
                        {
                            let m = out.max_ids.entry((*child).to_owned()).or_insert(0);
                            *m = (*m).max(v);
                        }
                    }
                }
                if matches!(ev, Event::Start(_)) {
                    depth += 1;
                }
            }
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    out.root_end = Some(pos);
                }
            }
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

/// Where the body's content ends: before the body-level `w:sectPr`, else before `</w:body>`.
fn body_insert_point(xml: &str, part: &str) -> Result<(usize, bool)> {
    let mut reader = Reader::from_str(xml);
    let mut depth = 0usize;
    let mut body_depth: Option<usize> = None;
    let mut w_bound = false;
    loop {
        let pos = reader.buffer_position() as usize;
        let ev = reader
            .read_event()
            .map_err(|e| Error::xml(part, &reader, e))?;
        match &ev {
            Event::Start(e) | Event::Empty(e) => {
                if depth == 0 {
                    w_bound = e
                        .attributes()
                        .flatten()
                        .any(|a| a.key.as_ref() == "xmlns:w" && a.value.as_ref() == W_NS);
                }
                let local = e.local_name();
                if body_depth == Some(depth) && local.as_ref() == "sectPr" {
                    return Ok((pos, w_bound));
                }
                if matches!(ev, Event::Start(_)) {
                    if local.as_ref() == "body" && body_depth.is_none() {
                        body_depth = Some(depth + 1);
                    }
                    depth += 1;
                }
            }
            Event::End(e) => {
                depth = depth.saturating_sub(1);
                if e.local_name().as_ref() == "body" && body_depth == Some(depth + 1) {
                    return Ok((pos, w_bound));
                }
            }
            Event::DocType(_) => {
                return Err(Error::Doctype {
                    part: part.to_owned(),
                });
            }
            Event::Eof => {
                return Err(Error::Xml {
                    part: part.to_owned(),
                    detail: "no w:body element".into(),
                });
            }
            _ => {}
        }
    }
}

fn insert_at(text: &str, at: usize, what: &str) -> String {
    let mut out = String::with_capacity(text.len() + what.len());
    out.push_str(&text[..at]);
    out.push_str(what);
    out.push_str(&text[at..]);
    out
}

fn unsupported_namespace(part: &str) -> Error {
    Error::InvalidInput(format!(
        "cannot append to this document: {part} does not use the usual `w` prefix for the WordprocessingML (transitional) namespace (a Strict Open XML document?); save it as a regular Word document"
    ))
}

/// Adds a relationship to `rels_xml` (or a new `.rels` part), returning the new text.
fn add_relationship(rels_xml: Option<&str>, rel_type: &str, target: &str) -> Result<String> {
    let base = rels_xml.unwrap_or(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\"></Relationships>",
    );
    let mut n = 1;
    while base.contains(&format!("Id=\"rIdCapstan{n}\"")) {
        n += 1;
    }
    let Some(pos) = base.rfind("</Relationships>") else {
        return Err(Error::Xml {
            part: "relationships".into(),
            detail: "no </Relationships> end tag".into(),
        });
    };
    Ok(insert_at(
        base,
        pos,
        &format!(
            "<Relationship Id=\"rIdCapstan{n}\" Type=\"{}\" Target=\"{}\"/>",
            opc::escape_attr(rel_type),
            opc::escape_attr(target)
        ),
    ))
}

const STYLES_TYPE: &str =
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles";
const NUMBERING_TYPE: &str =
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/numbering";
const STYLES_CT: &str = "application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml";
const NUMBERING_CT: &str =
    "application/vnd.openxmlformats-officedocument.wordprocessingml.numbering+xml";

/// Appends the Markdown's blocks to the end of the body (before its `w:sectPr`).
pub(crate) fn append(bytes: &[u8], markdown: &str) -> Result<Vec<u8>> {
    let mut pkg = Package::open(bytes, Kind::Docx)?;
    let Parts {
        main,
        styles,
        numbering,
        ..
    } = locate(&mut pkg)?;
    let (_, doc_xml) = pkg.main_xml()?;
    let dir = opc::part_dir(&main).to_owned();
    let styles_xml = match &styles {
        Some(p) => pkg.read_xml(p)?,
        None => None,
    };
    let numbering_xml = match &numbering {
        Some(p) => pkg.read_xml(p)?,
        None => None,
    };

    // Our style ids → the document's: the same id, else a style of the same name.
    let existing = match (&styles, &styles_xml) {
        (Some(p), Some(x)) => parse_styles(x, p)?,
        _ => Default::default(),
    };
    let by_name: HashMap<String, &String> = existing
        .defs
        .iter()
        .map(|(id, d)| (d.name.to_lowercase(), id))
        .collect();
    let mut style_map: HashMap<String, String> = HashMap::new();
    for id in ALL_STYLES {
        if existing.defs.contains_key(*id) {
            continue;
        }
        let ours = write::style_name(id);
        if let Some(theirs) = ours.and_then(|n| by_name.get(&n.to_lowercase())) {
            style_map.insert((*id).to_owned(), (*theirs).clone());
        }
    }

    let num_layout = match (&numbering, &numbering_xml) {
        (Some(p), Some(x)) => Some(layout(
            x,
            p,
            &["num", "numIdMacAtCleanup"],
            &[("abstractNum", "abstractNumId"), ("num", "numId")],
        )?),
        _ => None,
    };
    let first_num = num_layout
        .as_ref()
        .and_then(|l| l.max_ids.get("num").copied())
        .unwrap_or(0)
        + 1;
    let body = write::markdown_body(markdown, first_num, &style_map);
    if body.xml.is_empty() {
        return Err(Error::InvalidInput(
            "the Markdown to append has no content".into(),
        ));
    }

    let mut replace: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add: Vec<(String, Vec<u8>)> = Vec::new();
    let mut content_types: Option<String> = None;
    let mut doc_rels: Option<String> = None;
    let doc_rels_name = opc::rels_part_name(&main);

    // The body.
    let (at, w_bound) = body_insert_point(&doc_xml, &main)?;
    if !w_bound {
        return Err(unsupported_namespace(&main));
    }
    let mut fragment = body.xml.clone();
    if body.ends_with_table {
        fragment.push_str("<w:p/>");
    }
    replace.push((
        main.clone(),
        insert_at(&doc_xml, at, &fragment).into_bytes(),
    ));

    // Styles: add the ones used that the document lacks (and what they are based on).
    let mut needed: Vec<&str> = Vec::new();
    let mut seen = HashSet::new();
    let mut queue: Vec<&str> = body.styles.iter().copied().collect();
    while let Some(id) = queue.pop() {
        if !seen.insert(id) || style_map.contains_key(id) || existing.defs.contains_key(id) {
            continue;
        }
        needed.push(id);
        queue.extend(write::style_dependencies(id).iter().copied());
    }
    needed.sort_unstable();
    if !needed.is_empty() {
        match (&styles, &styles_xml) {
            (Some(p), Some(x)) => {
                let l = layout(x, p, &[], &[])?;
                if !l.w_bound {
                    return Err(unsupported_namespace(p));
                }
                let end = l.root_end.ok_or_else(|| Error::Xml {
                    part: p.clone(),
                    detail: "no end tag for w:styles".into(),
                })?;
                let defs: String = needed
                    .iter()
                    .filter_map(|id| write::style_xml(id))
                    .collect();
                replace.push((p.clone(), insert_at(x, end, &defs).into_bytes()));
            }
            _ => {
                let name = opc::resolve_target(&dir, "styles.xml");
                let rels = pkg.read_xml(&doc_rels_name)?;
                doc_rels = Some(add_relationship(
                    doc_rels.as_deref().or(rels.as_deref()),
                    STYLES_TYPE,
                    "styles.xml",
                )?);
                let types = pkg.require_xml("[Content_Types].xml")?;
                content_types = Some(opc::add_content_type_override(
                    content_types.as_deref().unwrap_or(&types),
                    &name,
                    STYLES_CT,
                )?);
                add.push((name, write::styles_xml().into_bytes()));
            }
        }
    }

    // Numbering for the appended lists.
    if !body.nums.is_empty() {
        match (&numbering, &numbering_xml, &num_layout) {
            (Some(p), Some(x), Some(l)) => {
                if !l.w_bound {
                    return Err(unsupported_namespace(p));
                }
                let max_abs = l.max_ids.get("abstractNum").copied();
                let bullet_abs = max_abs.map_or(0, |m| m + 1);
                let decimal_abs = bullet_abs + 1;
                let mut abstracts = String::new();
                if body.nums.iter().any(|n| !n.ordered) {
                    abstracts.push_str(&write::abstract_num_xml(bullet_abs, false));
                }
                if body.nums.iter().any(|n| n.ordered) {
                    abstracts.push_str(&write::abstract_num_xml(decimal_abs, true));
                }
                let nums = write::nums_xml(&body.nums, bullet_abs, decimal_abs);
                let end = l.root_end.ok_or_else(|| Error::Xml {
                    part: p.clone(),
                    detail: "no end tag for w:numbering".into(),
                })?;
                // abstractNum before the first num; num before numIdMacAtCleanup.
                let mac = x[..end].rfind("<w:numIdMacAtCleanup").unwrap_or(end);
                let first = l.first.unwrap_or(end).min(mac);
                let mut out = String::with_capacity(x.len() + abstracts.len() + nums.len());
                out.push_str(&x[..first]);
                out.push_str(&abstracts);
                out.push_str(&x[first..mac]);
                out.push_str(&nums);
                out.push_str(&x[mac..]);
                replace.push((p.clone(), out.into_bytes()));
            }
            _ => {
                let name = opc::resolve_target(&dir, "numbering.xml");
                if pkg.has(&name) {
                    return Err(Error::InvalidInput(format!(
                        "cannot append lists: {name} exists but is not related to {main}"
                    )));
                }
                let rels = pkg.read_xml(&doc_rels_name)?;
                doc_rels = Some(add_relationship(
                    doc_rels.as_deref().or(rels.as_deref()),
                    NUMBERING_TYPE,
                    "numbering.xml",
                )?);
                let types = pkg.require_xml("[Content_Types].xml")?;
                content_types = Some(opc::add_content_type_override(
                    content_types.as_deref().unwrap_or(&types),
                    &name,
                    NUMBERING_CT,
                )?);
                add.push((name, write::numbering_xml(&body.nums).into_bytes()));
            }
        }
    }

    if let Some(types) = content_types {
        replace.push(("[Content_Types].xml".into(), types.into_bytes()));
    }
    if let Some(rels) = doc_rels {
        if pkg.has(&doc_rels_name) {
            replace.push((doc_rels_name, rels.into_bytes()));
        } else {
            add.push((doc_rels_name, rels.into_bytes()));
        }
    }
    opc::rewrite(&mut pkg, &replace, &add)
}
