//! HTML through html5ever's spec tokenizer (no tree building: the text and its source
//! lines are all we need, and a token stream gives the line of every character).
//!
//! * `h1`..`h6` give heading blocks; their text is the title;
//! * block-level elements (`p`, `div`, `li`, `tr`, ...) separate blocks; `<pre>` is code;
//! * `script`, `style`, `template`, `noscript`, `svg`, `math`, `head` content, `nav` and
//!   `iframe`/`object` are dropped. Raw-text elements are switched into their raw tokenizer
//!   state as the spec says, so markup inside a script never leaks out as text;
//! * entities are decoded by the tokenizer; whitespace outside `<pre>` is collapsed within
//!   each source line; block lines keep their source line numbers.
//!
//! HTML has no "malformed": the tokenizer recovers from every error, as browsers do.

use std::borrow::Cow;
use std::cell::RefCell;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};

use crate::chunk::{Block, Line};

/// Elements whose content is not retrievable text.
const SKIP: &[&str] = &[
    "script", "style", "template", "noscript", "svg", "math", "head", "nav", "iframe", "object",
    "select", "button", "textarea", "title", "noembed", "noframes",
];

/// Elements that end the current block (on their start and end tags).
const BLOCK: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "caption",
    "dd",
    "details",
    "dialog",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "header",
    "hr",
    "html",
    "legend",
    "li",
    "main",
    "ol",
    "p",
    "section",
    "summary",
    "table",
    "tbody",
    "tfoot",
    "thead",
    "tr",
    "ul",
];

#[derive(Default)]
struct State {
    out: Vec<Block<'static>>,
    /// Lines of the block being built: (line number, text).
    lines: Vec<(u32, String)>,
    /// A space is due before the next character on the current line.
    space: bool,
    /// Nesting depth of skipped elements, by name, so `</script>` only closes `<script>`.
    skip: Vec<String>,
    pre: usize,
    heading: Option<u32>,
}

impl State {
    fn flush(&mut self) {
        let pre = self.pre > 0 && self.heading.is_none();
        let lines: Vec<Line<'static>> = std::mem::take(&mut self.lines)
            .into_iter()
            .map(|(n, mut l)| {
                l.truncate(l.trim_end().len());
                (n, Cow::<str>::Owned(l))
            })
            // Empty lines inside <pre> are part of the code; elsewhere they are nothing.
            .filter(|(_, l)| pre || !l.is_empty())
            .collect();
        self.space = false;
        if lines.iter().all(|(_, l)| l.is_empty()) {
            return;
        }
        if let Some(level) = self.heading {
            let title: Vec<&str> = lines.iter().map(|(_, l)| &**l).collect();
            let title = title.join(" ");
            // Permalink anchors that generators append to headings (Sphinx, mdBook).
            let title = title.trim_end_matches(['¶', '§', '🔗', ' ']);
            self.out.push(Block::heading(level, title, lines[0].0));
        } else if self.pre > 0 {
            self.out.push(Block::code(lines));
        } else {
            self.out.push(Block::prose(lines));
        }
    }

    fn push_char(&mut self, c: char, line: u32) {
        let pre = self.pre > 0 && self.heading.is_none();
        if c == '\n' {
            if pre {
                // Keep empty lines inside <pre> so the code block's lines stay contiguous.
                self.lines.push((line + 1, String::new()));
            }
            self.space = true;
            return;
        }
        if c.is_whitespace() && !pre {
            self.space = true;
            return;
        }
        match self.lines.last_mut() {
            Some((n, l)) if *n == line => {
                if self.space && !l.is_empty() && !pre {
                    l.push(' ');
                }
                l.push(c);
            }
            _ => self.lines.push((line, c.to_string())),
        }
        self.space = false;
    }

    fn text(&mut self, text: &str, line_after: u64) {
        if !self.skip.is_empty() {
            return;
        }
        // `line_after` is the tokenizer's line once the text is consumed: a character's line
        // is that minus the newlines at and after it.
        let mut remaining = text.matches('\n').count() as u64;
        for c in text.chars() {
            let line = line_after.saturating_sub(remaining).max(1);
            let line = u32::try_from(line).unwrap_or(u32::MAX);
            if c == '\n' {
                remaining = remaining.saturating_sub(1);
                // The newline itself sits on the line it ends.
                self.push_char(c, line);
                continue;
            }
            self.push_char(c, line);
        }
    }
}

struct Sink {
    state: RefCell<State>,
}

impl TokenSink for Sink {
    type Handle = ();

    fn process_token(&self, token: Token, line: u64) -> TokenSinkResult<()> {
        let mut s = self.state.borrow_mut();
        match token {
            Token::CharacterTokens(t) => s.text(&t, line),
            Token::TagToken(tag) => {
                let name: &str = &tag.name;
                let start = tag.kind == TagKind::StartTag;
                // The tokenizer only knows raw-text elements when told (a tree builder
                // would): without this `<script>a<b</script>` would yield a `b` tag.
                let raw = match name {
                    "script" => Some(TokenSinkResult::RawData(RawKind::ScriptData)),
                    "style" | "xmp" | "iframe" | "noembed" | "noframes" | "noscript" => {
                        Some(TokenSinkResult::RawData(RawKind::Rawtext))
                    }
                    "textarea" | "title" => Some(TokenSinkResult::RawData(RawKind::Rcdata)),
                    "plaintext" => Some(TokenSinkResult::Plaintext),
                    _ => None,
                };
                if SKIP.contains(&name) {
                    if start && (!tag.self_closing || raw.is_some()) {
                        s.skip.push(name.to_owned());
                    } else if !start && let Some(p) = s.skip.iter().rposition(|n| n == name) {
                        s.skip.truncate(p);
                    }
                    if start && let Some(r) = raw {
                        return r;
                    }
                    return TokenSinkResult::Continue;
                }
                if !s.skip.is_empty() {
                    return TokenSinkResult::Continue;
                }
                let heading_level = match name {
                    "h1" => Some(1),
                    "h2" => Some(2),
                    "h3" => Some(3),
                    "h4" => Some(4),
                    "h5" => Some(5),
                    "h6" => Some(6),
                    _ => None,
                };
                if let Some(level) = heading_level {
                    s.flush();
                    s.heading = start.then_some(level);
                } else if name == "pre" || name == "listing" {
                    s.flush();
                    if start {
                        s.pre += 1;
                    } else {
                        s.pre = s.pre.saturating_sub(1);
                    }
                } else if BLOCK.contains(&name) {
                    s.flush();
                } else if name == "br" {
                    s.space = true;
                    let l = u32::try_from(line).unwrap_or(u32::MAX);
                    // Break the line: the next text starts a new entry.
                    s.lines.push((l, String::new()));
                } else if (name == "td" || name == "th") && start {
                    s.space = true;
                }
                if start && let Some(r) = raw {
                    return r;
                }
            }
            Token::EOFToken => s.flush(),
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

pub(crate) fn blocks(text: &str) -> Vec<Block<'static>> {
    let sink = Sink {
        state: RefCell::new(State::default()),
    };
    let tokenizer = Tokenizer::new(sink, TokenizerOpts::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(text));
    // Without a tree builder nothing ever asks the tokenizer to pause (`Script` results),
    // so one feed consumes everything.
    let _ = tokenizer.feed(&input);
    tokenizer.end();
    let mut state = tokenizer.sink.state.into_inner();
    state.flush();
    state.out
}
