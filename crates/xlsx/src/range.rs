//! A1 references and ranges.

use crate::Error;

/// Excel's limits.
pub const MAX_ROWS: u32 = 1_048_576;
pub const MAX_COLS: u32 = 16_384;

/// An inclusive, 1-based rectangle of cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellRange {
    /// Top row, 1-based.
    pub first_row: u32,
    /// Left column, 1-based (1 = A).
    pub first_col: u32,
    /// Bottom row, inclusive.
    pub last_row: u32,
    /// Right column, inclusive.
    pub last_col: u32,
}

impl CellRange {
    /// Whether the 1-based cell (`row`, `col`) lies inside the range.
    pub fn contains(&self, row: u32, col: u32) -> bool {
        (self.first_row..=self.last_row).contains(&row)
            && (self.first_col..=self.last_col).contains(&col)
    }
}

/// 1 → `A`, 27 → `AA`.
pub fn column_name(mut col: u32) -> String {
    let mut out = Vec::new();
    while col > 0 {
        let rem = (col - 1) % 26;
        out.push(b'A' + rem as u8);
        col = (col - 1) / 26;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// `B7` → (row 7, col 2); `$B$7` too. Either part may be missing (`B`, `7`).
fn parse_ref(s: &str) -> Option<(Option<u32>, Option<u32>)> {
    let s = s.trim();
    let s = s.strip_prefix('$').unwrap_or(s);
    let letters = s.bytes().take_while(u8::is_ascii_alphabetic).count();
    let (col, rest) = s.split_at(letters);
    let rest = rest.strip_prefix('$').unwrap_or(rest);
    if col.is_empty() && rest.is_empty() {
        return None;
    }
    let col = if col.is_empty() {
        None
    } else {
        if col.len() > 3 {
            return None;
        }
        let n = col.bytes().fold(0u32, |n, b| {
            n * 26 + u32::from(b.to_ascii_uppercase() - b'A' + 1)
        });
        if n > MAX_COLS {
            return None;
        }
        Some(n)
    };
    let row = if rest.is_empty() {
        None
    } else {
        if !rest.bytes().all(|b| b.is_ascii_digit()) || rest.len() > 7 {
            return None;
        }
        let n: u32 = rest.parse().ok()?;
        if n == 0 || n > MAX_ROWS {
            return None;
        }
        Some(n)
    };
    Some((row, col))
}

/// A cell reference as written in `<c r="B7">`: (row, col), both 1-based.
pub(crate) fn parse_cell_ref(s: &str) -> Option<(u32, u32)> {
    match parse_ref(s)? {
        (Some(r), Some(c)) => Some((r, c)),
        _ => None,
    }
}

/// `Sheet2!A1:B3` → (`Sheet2`, `A1:B3`); `'My sheet'!A1` → (`My sheet`, `A1`).
pub(crate) fn split_sheet(s: &str) -> (Option<String>, &str) {
    match s.rsplit_once('!') {
        Some((sheet, range)) => {
            let sheet = sheet.trim();
            let name = match sheet.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
                Some(quoted) => quoted.replace("''", "'"),
                None => sheet.to_owned(),
            };
            (Some(name), range)
        }
        None => (None, s),
    }
}

/// `A1:C10`, `C3`, `B:D` (whole columns), `2:5` (whole rows), with or without `$`.
pub fn parse_range(s: &str) -> Result<CellRange, Error> {
    let bad = || {
        Error::InvalidInput(format!(
            "invalid range \"{s}\": expected A1 notation such as \"A1:C10\", \"B:D\", \"2:5\" or \"C3\""
        ))
    };
    let (a, b) = match s.split_once(':') {
        Some((a, b)) => (a, b),
        None => (s, s),
    };
    let (r0, c0) = parse_ref(a).ok_or_else(bad)?;
    let (r1, c1) = parse_ref(b).ok_or_else(bad)?;
    // Both sides must be of the same shape: cells, columns or rows.
    if r0.is_some() != r1.is_some() || c0.is_some() != c1.is_some() {
        return Err(bad());
    }
    let (r0, r1) = (r0.unwrap_or(1), r1.unwrap_or(MAX_ROWS));
    let (c0, c1) = (c0.unwrap_or(1), c1.unwrap_or(MAX_COLS));
    Ok(CellRange {
        first_row: r0.min(r1),
        last_row: r0.max(r1),
        first_col: c0.min(c1),
        last_col: c0.max(c1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns() {
        assert_eq!(column_name(1), "A");
        assert_eq!(column_name(26), "Z");
        assert_eq!(column_name(27), "AA");
        assert_eq!(column_name(16_384), "XFD");
        for c in [1, 26, 27, 52, 53, 702, 703, 16_384] {
            assert_eq!(
                parse_cell_ref(&format!("{}1", column_name(c))),
                Some((1, c))
            );
        }
    }

    #[test]
    fn ranges() {
        let r = parse_range("b2:$D$10").unwrap();
        assert_eq!(
            (r.first_row, r.first_col, r.last_row, r.last_col),
            (2, 2, 10, 4)
        );
        let r = parse_range("C3").unwrap();
        assert_eq!(
            (r.first_row, r.first_col, r.last_row, r.last_col),
            (3, 3, 3, 3)
        );
        let r = parse_range("B:D").unwrap();
        assert_eq!(
            (r.first_row, r.last_row, r.first_col, r.last_col),
            (1, MAX_ROWS, 2, 4)
        );
        let r = parse_range("2:5").unwrap();
        assert_eq!(
            (r.first_row, r.last_row, r.first_col, r.last_col),
            (2, 5, 1, MAX_COLS)
        );
        let r = parse_range("D10:B2").unwrap();
        assert_eq!(
            (r.first_row, r.first_col, r.last_row, r.last_col),
            (2, 2, 10, 4)
        );
        for bad in [
            "",
            "A0",
            "A1:B",
            "XFE1",
            "1A",
            "A1:C1048577",
            "A-1",
            "AAAA1",
        ] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
        assert_eq!(split_sheet("'It''s'!A1"), (Some("It's".to_owned()), "A1"));
        assert_eq!(split_sheet("A1"), (None, "A1"));
    }
}
