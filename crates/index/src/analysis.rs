//! Text analysis pieces tantivy does not provide.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};
use tantivy::tokenizer::{Token, TokenFilter, TokenStream, Tokenizer};

/// Separates the parts of the indexed `body` (text, leaf heading, heading path: see
/// `body_text`). Each one moves the next token to the next multiple of [`PART_POSITIONS`].
pub(crate) const FIELD_SEP: char = '\u{1f}';

/// Positions per part of the `body`: far beyond any passage's text, so a position tells
/// which part a match is in (`position / PART_POSITIONS`), and words of two parts are never
/// adjacent for a phrase query.
pub(crate) const PART_POSITIONS: usize = 1 << 20;

/// tantivy's `SimpleTokenizer` (runs of alphanumerics, positions counted per token), minus
/// the names of reStructuredText roles and directives: `class` in ``:class:`Foo` ``, `func`
/// in ``:py:func:`len` ``, `function` in `.. function:: len(s)`.
///
/// Why: they are markup, not content, and Sphinx documentation is full of them. Indexed as
/// words, every `.. method::` line matched a question about "methods" and every
/// ``:class:`…` `` one about "classes", burying the passages that discuss those words. A
/// skipped name takes no position, so the words around it stay adjacent for phrase queries.
/// The checks look only at the bytes around a token that ends or starts at a `:`, so plain
/// text costs one byte comparison per token.
#[derive(Clone, Default)]
pub(crate) struct MarkupTokenizer {
    token: Token,
}

impl Tokenizer for MarkupTokenizer {
    type TokenStream<'a> = MarkupTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> MarkupTokenStream<'a> {
        self.token.reset();
        MarkupTokenStream {
            text,
            pos: 0,
            token: &mut self.token,
        }
    }
}

pub(crate) struct MarkupTokenStream<'a> {
    text: &'a str,
    /// Byte offset where the search for the next token starts.
    pos: usize,
    token: &'a mut Token,
}

impl TokenStream for MarkupTokenStream<'_> {
    fn advance(&mut self) -> bool {
        self.token.text.clear();
        loop {
            let rest = &self.text[self.pos..];
            let Some(start) = rest.find(char::is_alphanumeric) else {
                self.pos = self.text.len();
                return false;
            };
            let parts = rest[..start].matches(FIELD_SEP).count();
            if parts > 0 {
                // The next token opens the next part (`usize::MAX` is "none yet").
                let next = self.token.position.wrapping_add(1);
                let part = next / PART_POSITIONS + parts;
                self.token.position = (part * PART_POSITIONS).wrapping_sub(1);
            }
            let from = self.pos + start;
            let to = self.text[from..]
                .find(|c: char| !c.is_alphanumeric())
                .map_or(self.text.len(), |n| from + n);
            self.pos = to;
            if is_markup_name(self.text, from, to) {
                continue;
            }
            self.token.position = self.token.position.wrapping_add(1);
            self.token.offset_from = from;
            self.token.offset_to = to;
            self.token.text.push_str(&self.text[from..to]);
            return true;
        }
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

/// Whether `text[from..to]` (a run of alphanumerics) names an rST role or directive.
fn is_markup_name(text: &str, from: usize, to: usize) -> bool {
    let bytes = text.as_bytes();
    if bytes.get(to) != Some(&b':') {
        return false;
    }
    // The rest of the name (`:func` of `py:func`) and what follows it.
    let after = &text[to..];
    let name_end = after
        .find(|c: char| !(c.is_alphanumeric() || c == ':' || c == '-'))
        .unwrap_or(after.len());
    let name_rest = &after[..name_end];
    // Role: `:name:` (or `:domain:name:`) directly followed by a backquote.
    if from > 0 && bytes[from - 1] == b':' && after[name_end..].starts_with('`') {
        return name_rest.ends_with(':') && !name_rest.ends_with("::");
    }
    // Directive: a line `.. name:: argument` (or `.. domain:name::`).
    if !name_rest.ends_with("::") {
        return false;
    }
    let line_start = text[..from].rfind('\n').map_or(0, |i| i + 1);
    let before = text[line_start..from].trim_start();
    let Some(prefix) = before.strip_prefix("..") else {
        return false;
    };
    prefix.starts_with(' ')
        && prefix
            .trim_start()
            .chars()
            .all(|c| c.is_alphanumeric() || c == ':' || c == '-')
}

/// Stems cached per analyzer instance before the cache starts over. Words are
/// Zipf-distributed: a few thousand distinct words cover most tokens, so a bounded cache
/// that is emptied when full keeps nearly all of the benefit with a few MB at most.
const MAX_CACHED_STEMS: usize = 50_000;

/// Drops English stop words and Snowball-stems the rest (the same output as tantivy's
/// `StopWordFilter` followed by `Stemmer(English)`), with one hash lookup per token.
///
/// Why not tantivy's two filters: the Snowball English stemmer allocates and runs its full
/// algorithm for every token and was the bottleneck of indexing (about 28 MB/s of text
/// through the analyzer, against 115 MB/s without it), and the stop-word filter adds a
/// SipHash lookup. Here a single `FxHashMap` answers both: a word maps to `None` (a stop
/// word) or `Some(stem)`; unseen words are stemmed once and cached. Stems are a pure
/// function of the word, so the cache changes no output.
///
/// Each clone of the analyzer (tantivy clones one per indexing thread, per query and per
/// snippet) has its own map, no locking, and starts with it empty: a clone that copied the
/// cache, even just the stop words as owned strings, cost 5% of a server's CPU. The stop
/// words are one shared set, asked when a word is not in the cache yet.
#[derive(Clone)]
pub(crate) struct StopAndStem {
    stop_words: Arc<FxHashSet<&'static str>>,
}

impl StopAndStem {
    pub(crate) fn english(stop_words: &'static [&'static str]) -> Self {
        Self {
            stop_words: Arc::new(stop_words.iter().copied().collect()),
        }
    }
}

impl TokenFilter for StopAndStem {
    type Tokenizer<T: Tokenizer> = StopAndStemFilter<T>;

    fn transform<T: Tokenizer>(self, tokenizer: T) -> StopAndStemFilter<T> {
        StopAndStemFilter {
            inner: tokenizer,
            stemmer: frostem::Stemmer::new(frostem::Algorithm::English),
            stop_words: self.stop_words,
            map: FxHashMap::default(),
        }
    }
}

pub(crate) struct StopAndStemFilter<T> {
    inner: T,
    stemmer: frostem::Stemmer,
    stop_words: Arc<FxHashSet<&'static str>>,
    /// word → `None` for a stop word, `Some(stem)` otherwise.
    map: FxHashMap<String, Option<String>>,
}

impl<T: Clone> Clone for StopAndStemFilter<T> {
    /// A clone with an empty cache: the same output (see [`StopAndStem`]).
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            stemmer: self.stemmer,
            stop_words: Arc::clone(&self.stop_words),
            map: FxHashMap::default(),
        }
    }
}

impl<T: Tokenizer> Tokenizer for StopAndStemFilter<T> {
    type TokenStream<'a> = StopAndStemStream<'a, T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        if self.map.len() >= MAX_CACHED_STEMS {
            self.map.clear();
        }
        let Self {
            inner,
            stemmer,
            stop_words,
            map,
        } = self;
        StopAndStemStream {
            tail: inner.token_stream(text),
            stemmer: *stemmer,
            stop_words,
            map,
        }
    }
}

pub(crate) struct StopAndStemStream<'a, S> {
    tail: S,
    stemmer: frostem::Stemmer,
    stop_words: &'a FxHashSet<&'static str>,
    map: &'a mut FxHashMap<String, Option<String>>,
}

impl<S: TokenStream> TokenStream for StopAndStemStream<'_, S> {
    fn advance(&mut self) -> bool {
        while self.tail.advance() {
            let token = self.tail.token_mut();
            match self.map.get(token.text.as_str()) {
                Some(None) => continue,
                Some(Some(stem)) => {
                    // Reuse the token's buffer: no allocation on a hit.
                    token.text.clear();
                    token.text.push_str(stem);
                }
                None if self.stop_words.contains(token.text.as_str()) => {
                    self.map.insert(token.text.clone(), None);
                    continue;
                }
                None => {
                    let stem = self.stemmer.stem(&token.text).into_owned();
                    let word = std::mem::replace(&mut token.text, stem.clone());
                    self.map.insert(word, Some(stem));
                }
            }
            return true;
        }
        false
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

#[cfg(test)]
mod tests {
    use tantivy::tokenizer::{
        Language, LowerCaser, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer, TokenStream,
    };

    use super::*;

    fn tokens(a: &mut TextAnalyzer, text: &str) -> Vec<(String, usize, usize, usize)> {
        let mut out = Vec::new();
        let mut s = a.token_stream(text);
        while s.advance() {
            let t = s.token();
            out.push((t.text.clone(), t.position, t.offset_from, t.offset_to));
        }
        out
    }

    fn words(text: &str) -> Vec<(String, usize)> {
        let mut a = TextAnalyzer::builder(MarkupTokenizer::default()).build();
        tokens(&mut a, text)
            .into_iter()
            .map(|(w, p, from, to)| {
                assert_eq!(&text[from..to], w);
                (w, p)
            })
            .collect()
    }

    #[test]
    fn markup_names_are_not_words() {
        let w = |text| {
            words(text)
                .into_iter()
                .map(|(w, _)| w)
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            w("Use :class:`Foo` and :py:func:`len`, see :pep:`8`."),
            "Use Foo and len see 8"
        );
        assert_eq!(
            w(".. function:: len(s)\n\n   .. py:method:: Foo.bar()\n.. note::"),
            "len s Foo bar"
        );
        // Not markup: C++ and Rust paths, a colon in prose, a literal block marker, a
        // directive-looking name inside a line.
        assert_eq!(w("std::vector a::b"), "std vector a b");
        assert_eq!(w("Note: the class: `x`"), "Note the class x");
        assert_eq!(w("Example::\n\n  x"), "Example x");
        assert_eq!(w("see the foo:: bar"), "see the foo bar");
        // Positions count words only: the words around a role stay adjacent.
        assert_eq!(
            words("a :meth:`b` c"),
            [("a".into(), 0), ("b".into(), 1), ("c".into(), 2)]
        );
        assert_eq!(words("héllo wörld")[1], ("wörld".into(), 1));
        // Each separator starts the next part at the next multiple of PART_POSITIONS.
        let p = PART_POSITIONS;
        assert_eq!(
            words("a b\u{1f}c\u{1f}\u{1f}d"),
            [
                ("a".into(), 0),
                ("b".into(), 1),
                ("c".into(), p),
                ("d".into(), 3 * p)
            ]
        );
        assert_eq!(words("\u{1f}x")[0], ("x".into(), p));
    }

    #[test]
    fn same_tokens_as_tantivys_filters() {
        const STOP: &[&str] = &["the", "a", "is", "how"];
        let mut ours = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(LowerCaser)
            .filter(StopAndStem::english(STOP))
            .build();
        let mut theirs = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(LowerCaser)
            .filter(StopWordFilter::remove(STOP.iter().map(|w| (*w).to_owned())))
            .filter(Stemmer::new(Language::English))
            .build();
        let text = "How is the rotating of keys regularly limiting a damage; rotated KEYS, \
                    rotation, generously running runners ran. Rotating again: keys keys keys.";
        // Twice: the second pass is served from the cache.
        for _ in 0..2 {
            assert_eq!(tokens(&mut ours, text), tokens(&mut theirs, text));
        }
        assert_eq!(tokens(&mut ours, "the rotating")[0].0, "rotat");
        assert_eq!(tokens(&mut ours, "the rotating")[0].1, 1);
        assert!(tokens(&mut ours, "the a is").is_empty());
        // A clone (tantivy's per query and per snippet) starts with an empty
        // cache and gives the same tokens.
        let mut clone = ours.clone();
        for _ in 0..2 {
            assert_eq!(tokens(&mut clone, text), tokens(&mut theirs, text));
        }
    }
}
