//! Plain text and source code: blocks separated by blank lines, lines kept verbatim
//! (trailing whitespace trimmed). No headings; for code the chunker puts the path there.

use std::borrow::Cow;

use crate::chunk::{Block, Line};
use crate::lines::{line_no, split_lines};

pub(crate) fn paragraph_blocks(text: &str) -> Vec<Block<'_>> {
    let mut out = Vec::new();
    let mut cur: Vec<Line<'_>> = Vec::new();
    for (i, line) in split_lines(text).into_iter().enumerate() {
        let line = line.trim_end();
        if line.is_empty() {
            if !cur.is_empty() {
                out.push(Block::prose(std::mem::take(&mut cur)));
            }
        } else {
            cur.push((line_no(i), Cow::Borrowed(line)));
        }
    }
    if !cur.is_empty() {
        out.push(Block::prose(cur));
    }
    out
}
