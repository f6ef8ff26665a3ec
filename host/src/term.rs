//! The one door between Capstan and a terminal.
//!
//! Text Capstan prints comes largely from sources it does not trust: workspace
//! files (search snippets, passages), command output, a model's answer, MCP
//! results, plugin messages, and error messages quoting any of them. A terminal
//! acts on control characters in that text: `ESC]52;c;…` writes the clipboard,
//! `ESC[2J` clears the screen, `ESC]0;…` sets the window title, `\r` and
//! backspace overwrite what was shown, bidi overrides reorder it. So every line
//! Capstan prints for a person goes through [`print`] (the `outln!`/`errln!`
//! macros), which renders every such character visibly and inertly; the crate's
//! clippy.toml forbids `println!` and its kin so no path can bypass it.
//!
//! `--json` output goes through the same door unchanged in content: JSON
//! already escapes C0 controls, and [`json`] also escapes DEL, C1 controls and
//! bidi controls as `\uXXXX`, so the decoded strings are exact and the raw
//! bytes on the terminal are inert.
//!
//! A reader that goes away (`capstan search … | head -1`) ends the process
//! quietly with status 141, as a shell reports SIGPIPE; Capstan never panics
//! on a closed stdout or stderr.
//!
//! Capstan itself prints no colour: plain text reads the same on a terminal, in
//! a pipe and under `NO_COLOR`.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::io::Write;

/// Where a line goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Results: answers, search hits, JSON.
    Out,
    /// The feed, prompts, warnings and errors.
    Err,
}

/// Exit status when the reader of stdout or stderr has gone (128 + SIGPIPE).
pub const CLOSED_PIPE_EXIT: i32 = 141;

/// Bidirectional formatting controls: they reorder what a terminal shows
/// (a "Trojan Source" line reads differently from what it is).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A character a terminal would act on instead of showing, other than the
/// newline and tab every line of text may hold.
fn is_unsafe(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        c if (c as u32) < 0x20 || c == '\u{7F}' => true,
        '\u{80}'..='\u{9F}' => true,
        c => is_bidi_control(c),
    }
}

/// Text made safe for a terminal: C0 controls and DEL become their visible
/// Unicode pictures (`ESC` shows as `␛`, so an escape sequence shows as text
/// and does nothing), C1 controls and bidi controls become `<U+XXXX>`, a CRLF
/// line end becomes a newline. Newline and tab are kept. Text without any such
/// character is returned as is.
pub fn sanitize(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\u{7F}' => out.push('\u{2421}'),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {
                // U+2400..U+241F are the pictures of U+0000..U+001F, in order.
                out.push(char::from_u32(0x2400 + c as u32).unwrap_or('\u{FFFD}'));
            }
            c if is_unsafe(c) => {
                let _ = write!(out, "<U+{:04X}>", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A value as one line of JSON whose bytes are inert on a terminal: what
/// `serde_json` writes, with DEL, C1 and bidi controls also written as
/// `\uXXXX` escapes (those characters only ever occur inside JSON strings, so
/// the document decodes to exactly the same value).
pub fn json(value: &impl serde::Serialize) -> String {
    escape_json(serde_json::to_string(value).unwrap_or_default())
}

/// As [`json`], indented for reading.
pub fn json_pretty(value: &impl serde::Serialize) -> String {
    escape_json(serde_json::to_string_pretty(value).unwrap_or_default())
}

fn escape_json(text: String) -> String {
    if !text.chars().any(is_unsafe) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        // serde_json already escaped every C0 control; newlines and tabs left
        // here are the pretty printer's own whitespace.
        if is_unsafe(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// Print formatted text, sanitised, to stdout or stderr and flush it. A
/// reader that has gone ends the process quietly (see the module docs); any
/// other write error is ignored, as there is nowhere left to report it.
pub fn print(stream: Stream, args: fmt::Arguments<'_>) {
    let text = match args.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(args.to_string()),
    };
    let safe = sanitize(&text);
    let result = match stream {
        Stream::Out => {
            let mut out = std::io::stdout().lock();
            out.write_all(safe.as_bytes()).and_then(|()| out.flush())
        }
        Stream::Err => {
            let mut err = std::io::stderr().lock();
            err.write_all(safe.as_bytes()).and_then(|()| err.flush())
        }
    };
    if let Err(e) = result
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(CLOSED_PIPE_EXIT);
    }
}

/// A warning about what the user asked for (a refused config entry, an
/// approval that could not be recorded): one plain line on stderr.
pub fn warn(message: impl fmt::Display) {
    print(Stream::Err, format_args!("warning: {message}\n"));
}

/// The writer for `tracing` logs (`-v`, `RUST_LOG`): log lines quote plugin
/// and model text too, so they take the same door.
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        print(
            Stream::Err,
            format_args!("{}", String::from_utf8_lossy(buf)),
        );
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `println!`, through [`print`].
#[macro_export]
macro_rules! outln {
    () => { $crate::term::print($crate::term::Stream::Out, format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::term::print($crate::term::Stream::Out, format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!`, through [`print`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::term::print($crate::term::Stream::Out, format_args!($($arg)*)) };
}

/// `eprintln!`, through [`print`].
#[macro_export]
macro_rules! errln {
    () => { $crate::term::print($crate::term::Stream::Err, format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::term::print($crate::term::Stream::Err, format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!`, through [`print`].
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::term::print($crate::term::Stream::Err, format_args!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_become_visible_text() {
        let planted = "a\x1b]52;c;aGk=\x07b\x1b[2Jc\x1b]0;title\x07d";
        let safe = sanitize(planted);
        assert_eq!(safe, "a␛]52;c;aGk=␇b␛[2Jc␛]0;title␇d");
        assert!(!safe.chars().any(|c| (c as u32) < 0x20));
    }

    #[test]
    fn newline_and_tab_stay_and_crlf_becomes_a_newline() {
        assert_eq!(sanitize("a\tb\nc\r\nd"), "a\tb\nc\nd");
        assert_eq!(sanitize("ok\rrm -rf"), "ok␍rm -rf");
        assert!(matches!(sanitize("plain text ✓"), Cow::Borrowed(_)));
    }

    #[test]
    fn c1_del_and_bidi_controls_are_named() {
        assert_eq!(sanitize("x\u{9b}2Jy"), "x<U+009B>2Jy");
        assert_eq!(sanitize("a\u{7f}b"), "a␡b");
        assert_eq!(sanitize("if \u{202E}x\u{2066}"), "if <U+202E>x<U+2066>");
    }

    #[test]
    fn json_stays_exact_and_inert() {
        let value = serde_json::json!({"text": "a\x1b[2J\u{9b}\u{202E}\u{7f}é\n"});
        let line = json(&value);
        assert!(!line.chars().any(is_unsafe), "{line}");
        assert!(
            line.contains("\\u001b[2J\\u009b\\u202e\\u007fé\\n"),
            "{line}"
        );
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, value);
        let pretty = json_pretty(&value);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&pretty).unwrap(),
            value
        );
    }
}
