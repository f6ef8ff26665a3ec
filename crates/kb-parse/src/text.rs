//! Plain text and source code: blocks separated by blank lines, lines kept verbatim
//! (trailing whitespace trimmed). No headings; for code the chunker puts the path there.

use crate::chunk::Block;
use crate::lines::{line_no, split_lines};

pub(crate) fn paragraph_blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut cur: Vec<(u32, String)> = Vec::new();
    for (i, line) in split_lines(text).into_iter().enumerate() {
        let line = line.trim_end();
        if line.is_empty() {
            if !cur.is_empty() {
                out.push(Block::prose(std::mem::take(&mut cur)));
            }
        } else {
            cur.push((line_no(i), line.to_owned()));
        }
    }
    if !cur.is_empty() {
        out.push(Block::prose(cur));
    }
    out
}
