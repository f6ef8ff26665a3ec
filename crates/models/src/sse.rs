//! A small Server-Sent Events parser (the WHATWG `text/event-stream` rules that model
//! servers use), fed with arbitrary byte chunks.
//!
//! Written here rather than pulled in because it is ~100 lines, the crates that do this
//! are thin and rarely released, and we need two things they do not give: a hard cap on
//! buffered bytes (a hostile server must not grow our memory without bound) and a lenient
//! end of stream (some servers omit the final blank line).

use crate::ModelError;

/// One dispatched event: the `event:` field (if any) and the joined `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` when the event had none.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Incremental parser. Invariant: `line` never holds a line terminator, and never grows
/// past `max_bytes` (that is a [`ModelError::Protocol`]).
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    event: Option<String>,
    data: String,
    has_data: bool,
    /// The previous chunk ended in `\r`: a `\n` starting the next chunk belongs to it.
    after_cr: bool,
    at_start: bool,
    max_bytes: usize,
}

/// Default cap on one line and on one event's data: far above any real chunk.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with the [`MAX_EVENT_BYTES`] cap.
    pub fn new() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }

    /// A parser whose lines and event data may not pass `max_bytes`.
    pub fn with_limit(max_bytes: usize) -> Self {
        Self {
            line: Vec::new(),
            event: None,
            data: String::new(),
            has_data: false,
            after_cr: false,
            at_start: true,
            max_bytes,
        }
    }

    /// Feed the next bytes; complete events are appended to `out`.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), ModelError> {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while let Some(pos) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.push_bytes(&chunk[..pos])?;
            let terminator = chunk[pos];
            chunk = &chunk[pos + 1..];
            if terminator == b'\r' {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out)?;
        }
        self.push_bytes(chunk)
    }

    /// The body ended: dispatch a pending line or event, even without its blank line.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), ModelError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out)?;
        }
        self.dispatch(out);
        Ok(())
    }

    fn push_bytes(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        if self.line.len() + bytes.len() > self.max_bytes {
            return Err(ModelError::Protocol(format!(
                "an SSE line is longer than {} bytes",
                self.max_bytes
            )));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), ModelError> {
        let mut line = std::str::from_utf8(line)
            .map_err(|_| ModelError::Protocol("the event stream is not valid UTF-8".into()))?;
        if self.at_start {
            self.at_start = false;
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(()); // comment / keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                if self.data.len() + value.len() + 1 > self.max_bytes {
                    return Err(ModelError::Protocol(format!(
                        "an SSE event is larger than {} bytes",
                        self.max_bytes
                    )));
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id`, `retry` and unknown fields do not matter for one-shot model streams.
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if self.has_data {
            self.has_data = false;
            out.push(SseEvent {
                event,
                data: std::mem::take(&mut self.data),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out).unwrap();
        }
        p.finish(&mut out).unwrap();
        out
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn basic_events_and_event_names() {
        let out = parse_chunks(&[b"event: a\ndata: 1\n\ndata: 2\n\n"]);
        assert_eq!(out, vec![ev(Some("a"), "1"), ev(None, "2")]);
    }

    #[test]
    fn split_anywhere_gives_the_same_events() {
        let input: &[u8] =
            b": ping\r\nevent: x\r\ndata:{\"a\":1}\r\ndata: two\r\n\r\ndata: [DONE]\r\n\r\n";
        let whole = parse_chunks(&[input]);
        assert_eq!(
            whole,
            vec![ev(Some("x"), "{\"a\":1}\ntwo"), ev(None, "[DONE]")]
        );
        for i in 0..input.len() {
            let (a, b) = input.split_at(i);
            assert_eq!(parse_chunks(&[a, b]), whole, "split at {i}");
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(parse_chunks(&bytes), whole);
    }

    #[test]
    fn lone_cr_terminates_lines() {
        assert_eq!(
            parse_chunks(&[b"data: a\r\rdata: b\r\r"]),
            vec![ev(None, "a"), ev(None, "b")]
        );
    }

    #[test]
    fn lenient_end_without_blank_line() {
        assert_eq!(parse_chunks(&[b"data: [DONE]"]), vec![ev(None, "[DONE]")]);
        assert_eq!(parse_chunks(&[b"data: x\n"]), vec![ev(None, "x")]);
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        assert_eq!(parse_chunks(&[b"event: ping\n\n"]), vec![]);
    }

    #[test]
    fn oversized_line_is_a_protocol_error() {
        let mut p = SseParser::with_limit(16);
        let mut out = Vec::new();
        let err = p.feed(&[b'a'; 32], &mut out).unwrap_err();
        assert!(matches!(err, ModelError::Protocol(_)));
    }

    #[test]
    fn invalid_utf8_is_a_protocol_error() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        assert!(matches!(
            p.feed(b"data: \xff\n\n", &mut out),
            Err(ModelError::Protocol(_))
        ));
    }
}
