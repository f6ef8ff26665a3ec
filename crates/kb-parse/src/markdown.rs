//! Markdown via pulldown-cmark's offset iterator: top-level blocks (and the items of
//! top-level lists) become blocks with their exact source lines; ATX and setext headings
//! become heading blocks (their lines, underline included, are dropped from passages).

use std::borrow::Cow;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use crate::chunk::{Block, Line};
use crate::lines::{LineIndex, split_lines};

struct Open {
    /// Depth at which the block's Start event was seen.
    depth: usize,
    start: usize,
    end: usize,
    heading: Option<u32>,
    code: bool,
    skip: bool,
}

pub(crate) fn blocks(text: &str) -> Vec<Block<'_>> {
    let index = LineIndex::new(text);
    let lines = split_lines(text);
    let opts = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS;
    let mut out = Vec::new();
    let mut depth = 0usize;
    // Depth of a top-level list whose items are blocks of their own (so a long list splits
    // between items rather than at arbitrary lines).
    let mut list_depth: Option<usize> = None;
    let mut open: Option<Open> = None;
    let mut title = String::new();
    for (event, range) in Parser::new_ext(text, opts).into_offset_iter() {
        match event {
            Event::Start(tag) => {
                let is_code = matches!(tag, Tag::CodeBlock(_));
                if open.is_none() {
                    if depth == 0 && matches!(tag, Tag::List(_)) {
                        list_depth = Some(depth);
                    } else if depth == 0 || list_depth.is_some_and(|d| depth == d + 1) {
                        title.clear();
                        open = Some(Open {
                            depth,
                            start: range.start,
                            end: range.end,
                            heading: match &tag {
                                Tag::Heading { level, .. } => Some(*level as u32),
                                _ => None,
                            },
                            code: is_code,
                            skip: matches!(tag, Tag::MetadataBlock(_)),
                        });
                    }
                } else if is_code && let Some(o) = open.as_mut() {
                    o.code = true;
                }
                depth += 1;
            }
            Event::End(tag) => {
                depth = depth.saturating_sub(1);
                if matches!(tag, TagEnd::List(_)) && list_depth == Some(depth) {
                    list_depth = None;
                }
                if let Some(o) = open.take_if(|o| o.depth == depth)
                    && let Some(b) = finish(&o, &title, &index, &lines)
                {
                    out.push(b);
                }
            }
            Event::Text(t) | Event::Code(t)
                if open.as_ref().is_some_and(|o| o.heading.is_some()) =>
            {
                title.push_str(&t);
            }
            Event::SoftBreak | Event::HardBreak
                if open.as_ref().is_some_and(|o| o.heading.is_some()) =>
            {
                title.push(' ');
            }
            _ => {}
        }
    }
    out
}

fn finish<'a>(o: &Open, title: &str, index: &LineIndex, lines: &[&'a str]) -> Option<Block<'a>> {
    if o.skip || o.end <= o.start {
        return None;
    }
    let first = index.line_of(o.start);
    if let Some(level) = o.heading {
        return Some(Block::heading(level, title, first));
    }
    let last = index.line_of(o.end - 1);
    let body: Vec<Line<'a>> = (first..=last)
        .filter_map(|n| {
            let l = lines.get(n as usize - 1)?;
            Some((n, Cow::Borrowed(l.trim_end())))
        })
        .collect();
    Some(if o.code {
        Block::code(body)
    } else {
        Block::prose(body)
    })
}
