//! Line bookkeeping shared by the text formats.
//!
//! A line ends at `\n`, `\r\n` or a lone `\r` (as in CommonMark), so line numbers agree
//! with editors and with pulldown-cmark's view of the same text.

/// Byte offsets of line starts, for mapping parser offsets to 1-based line numbers.
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> Self {
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => starts.push(i + 1),
                b'\r' if bytes.get(i + 1) == Some(&b'\n') => {
                    starts.push(i + 2);
                    i += 1;
                }
                b'\r' => starts.push(i + 1),
                _ => {}
            }
            i += 1;
        }
        Self { starts }
    }

    /// The 1-based line holding byte `offset` (offsets past the end map to the last line).
    pub(crate) fn line_of(&self, offset: usize) -> u32 {
        // `starts[0] == 0`, so the partition point is at least 1.
        let line = self.starts.partition_point(|&s| s <= offset);
        u32::try_from(line).unwrap_or(u32::MAX)
    }
}

/// The lines of `text` without their terminators. A final terminator does not start an
/// extra (empty) line, matching [`LineIndex`] numbering for every returned line.
pub(crate) fn split_lines(text: &str) -> Vec<&str> {
    // memchr finds terminators a word at a time: a byte loop here was 4% of indexing.
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() / 40 + 1);
    let mut start = 0;
    let mut skip_lf = false;
    for i in memchr::memchr2_iter(b'\n', b'\r', bytes) {
        if skip_lf {
            skip_lf = false;
            if bytes[i] == b'\n' && i == start {
                start = i + 1;
                continue;
            }
        }
        out.push(&text[start..i]);
        start = i + 1;
        skip_lf = bytes[i] == b'\r';
    }
    if start < bytes.len() {
        out.push(&text[start..]);
    }
    out
}

/// Converts a 0-based index into a 1-based line number, saturating.
pub(crate) fn line_no(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_endings() {
        let t = "a\nb\r\nc\rd";
        assert_eq!(split_lines(t), ["a", "b", "c", "d"]);
        let idx = LineIndex::new(t);
        assert_eq!(idx.line_of(0), 1);
        assert_eq!(idx.line_of(2), 2);
        assert_eq!(idx.line_of(4), 2); // the '\n' of "\r\n"
        assert_eq!(idx.line_of(5), 3);
        assert_eq!(idx.line_of(7), 4);
        assert_eq!(idx.line_of(100), 4);
        assert_eq!(split_lines("x\n"), ["x"]);
        assert_eq!(split_lines("x\n\n"), ["x", ""]);
        assert!(split_lines("").is_empty());
        assert_eq!(split_lines("a\r\rb"), ["a", "", "b"]);
        assert_eq!(split_lines("a\r\n\r\nb"), ["a", "", "b"]);
        assert_eq!(split_lines("\n"), [""]);
        assert_eq!(split_lines("\r\n"), [""]);
        assert_eq!(split_lines("\n\r\n\r"), ["", "", ""]);
    }
}
