//! How an event's JSON is kept: without the fields its row already has.
//!
//! Every event envelope begins `{"seq":N,"run_id":"…","ts":"…",` (the protocol
//! serializes those three first), and the row keeps the same three values in
//! its own columns. Storing them twice was about 75 bytes of every event, an
//! eighth of a short run's events. So the stored text drops that prefix when it
//! is exactly the one the columns rebuild, and readers put it back: what they
//! return is the text as it was appended, byte for byte.
//!
//! The stored forms cannot be confused. JSON may begin with whitespace, envelopes
//! never do, so: a shortened envelope is stored as `" {"` and the rest; a text
//! that itself begins with whitespace is stored behind one tab, which the reader
//! removes; anything else (rows written before this, other JSON) as it is.

use std::borrow::Cow;

/// The prefix the columns rebuild, up to and including the comma after `ts`.
fn prefix(seq: u64, run_id: &str, ts: &str) -> Option<String> {
    let run_id = serde_json::to_string(run_id).ok()?;
    let ts = serde_json::to_string(ts).ok()?;
    Some(format!("{{\"seq\":{seq},\"run_id\":{run_id},\"ts\":{ts},"))
}

/// What to store for `json`, the envelope of event `seq` of `run_id` at `ts`.
pub(crate) fn stored<'a>(json: &'a str, seq: u64, run_id: &str, ts: &str) -> Cow<'a, str> {
    if json.starts_with(|c: char| c.is_ascii_whitespace()) {
        return Cow::Owned(format!("\t{json}"));
    }
    match prefix(seq, run_id, ts) {
        // A member must follow the comma: then the shortened text is valid JSON
        // exactly when the envelope was.
        Some(p) if json.starts_with(&p) && json[p.len()..].starts_with('"') => {
            Cow::Owned(format!(" {{{}", &json[p.len()..]))
        }
        _ => Cow::Borrowed(json),
    }
}

/// The text as it was appended, from a stored text and its row's columns.
pub(crate) fn envelope(stored: String, seq: u64, run_id: &str, ts: &str) -> String {
    if let Some(whole) = stored.strip_prefix('\t') {
        return whole.to_owned();
    }
    match (prefix(seq, run_id, ts), stored.strip_prefix(" {")) {
        (Some(p), Some(rest)) => p + rest,
        _ => stored,
    }
}

#[cfg(test)]
mod tests {
    use super::{envelope, stored};

    const RUN: &str = "run_abc";
    const TS: &str = "2026-11-27T21:03:02.638Z";

    fn round_trip(json: &str) -> String {
        envelope(stored(json, 7, RUN, TS).into_owned(), 7, RUN, TS)
    }

    #[test]
    fn the_prefix_goes_and_comes_back_byte_for_byte() {
        let json = r#"{"seq":7,"run_id":"run_abc","ts":"2026-11-27T21:03:02.638Z","type":"x","note":"{\"seq\":1}"}"#;
        assert_eq!(
            stored(json, 7, RUN, TS),
            r#" {"type":"x","note":"{\"seq\":1}"}"#
        );
        assert_eq!(round_trip(json), json);
    }

    #[test]
    fn anything_else_comes_back_as_it_was() {
        // Another seq, run or time than the row's, another field order, nothing
        // after ts, other JSON, JSON that begins with whitespace.
        for json in [
            r#"{"seq":8,"run_id":"run_abc","ts":"2026-11-27T21:03:02.638Z","type":"x"}"#,
            r#"{"seq":7,"run_id":"run_abd","ts":"2026-11-27T21:03:02.638Z","type":"x"}"#,
            r#"{"seq":7,"run_id":"run_abc","ts":"2026-11-27T21:03:02.639Z","type":"x"}"#,
            r#"{"run_id":"run_abc","seq":7,"ts":"2026-11-27T21:03:02.638Z","type":"x"}"#,
            r#"{"seq":7,"run_id":"run_abc","ts":"2026-11-27T21:03:02.638Z","#,
            r#"{"seq":7,"run_id":"run_abc","ts":"2026-11-27T21:03:02.638Z",}"#,
            r#"{"type":"x"}"#,
            "{}",
            r#" {"type":"x"}"#,
            "\t\t{}",
            "\n[1]",
        ] {
            assert_eq!(round_trip(json), json);
        }
        // Rows written before shortening existed are read as they are.
        let old = r#"{"seq":7,"run_id":"run_abc","ts":"2026-11-27T21:03:02.638Z","type":"x"}"#;
        assert_eq!(envelope(old.to_owned(), 7, RUN, TS), old);
    }
}
