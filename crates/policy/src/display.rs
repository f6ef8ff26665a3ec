//! Rendering commands inside human-readable reasons.

/// Longest rendering of a command or word in a reason, in characters.
const MAX_SHOWN: usize = 80;

/// Shortens `s` for display, marking the cut, and flattens newlines so a
/// reason always stays on one line.
pub(crate) fn clip(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if flat.chars().count() <= MAX_SHOWN {
        flat
    } else {
        let mut out: String = flat.chars().take(MAX_SHOWN - 1).collect();
        out.push('…');
        out
    }
}

/// Renders an argv for a reason: words joined by spaces, words containing
/// spaces or quotes shown single-quoted, then clipped.
pub(crate) fn argv<S: AsRef<str>>(words: &[S]) -> String {
    let joined = words
        .iter()
        .map(|w| {
            let w = w.as_ref();
            if w.is_empty() {
                "''".to_owned()
            } else if w
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, '\'' | '"' | ';' | '|' | '&'))
            {
                format!("'{}'", w.replace('\'', "'\\''"))
            } else {
                w.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    clip(&joined)
}
