//! Text analysis pieces tantivy does not provide.

use std::hash::Hasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rustc_hash::FxHashSet;
use tantivy::tokenizer::{Token, TokenFilter, TokenStream, Tokenizer};

/// Separates the parts of the indexed `body` (text, leaf heading, heading path: see
/// `body_text`). Each one moves the next token to the next multiple of [`PART_POSITIONS`].
pub(crate) const FIELD_SEP: char = '\u{1f}';
/// [`FIELD_SEP`] as the byte the tokenizer compares (it is ASCII).
const FIELD_SEP_BYTE: u8 = 0x1f;
const _: () = assert!(FIELD_SEP as u32 == FIELD_SEP_BYTE as u32);

/// Positions per part of the `body`: far beyond any passage's text, so a position tells
/// which part a match is in (`position / PART_POSITIONS`), and words of two parts are never
/// adjacent for a phrase query.
pub(crate) const PART_POSITIONS: usize = 1 << 20;

/// Tokens of this many bytes or more are dropped (still taking a position), as tantivy's
/// `RemoveLongFilter::limit(40)` does: base64, hashes and long identifiers are not words.
pub(crate) const MAX_TOKEN_BYTES: usize = 40;

/// tantivy's `SimpleTokenizer` (runs of alphanumerics, positions counted per token)
/// followed by its `RemoveLongFilter::limit(40)` and `LowerCaser`, minus the names of
/// reStructuredText roles and directives: `class` in ``:class:`Foo` ``, `func` in
/// ``:py:func:`len` ``, `function` in `.. function:: len(s)`.
///
/// Why skip those names: they are markup, not content, and Sphinx documentation is full of
/// them. Indexed as words, every `.. method::` line matched a question about "methods" and
/// every ``:class:`…` `` one about "classes", burying the passages that discuss those words.
/// A skipped name takes no position, so the words around it stay adjacent for phrase
/// queries. The checks look only at the bytes around a token that ends or starts at a `:`,
/// so plain text costs one byte comparison per token.
///
/// Why one stage instead of tantivy's three: the token is lowercased as it is copied out
/// of the text, and ASCII (nearly all of documentation) is classified a byte at a time
/// instead of decoding every character. The same tokens (`same_tokens_as_tantivys_filters`)
/// in 18% less time: 147 instead of 180 ms over linux-doc's 31,188 passages.
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
    /// Byte offset where the search for the next token starts (always a char boundary).
    pos: usize,
    token: &'a mut Token,
}

/// Whether the non-ASCII character at byte `at` of `text` (a char boundary) is
/// alphanumeric, and its length in bytes.
#[cold]
fn non_ascii_class(text: &str, at: usize) -> (bool, usize) {
    text[at..]
        .chars()
        .next()
        .map_or((false, 1), |c| (c.is_alphanumeric(), c.len_utf8()))
}

impl TokenStream for MarkupTokenStream<'_> {
    fn advance(&mut self) -> bool {
        self.token.text.clear();
        let bytes = self.text.as_bytes();
        loop {
            // To the next alphanumeric, counting the part separators passed.
            let mut parts = 0usize;
            let mut from = self.pos;
            loop {
                let Some(&b) = bytes.get(from) else {
                    self.pos = bytes.len();
                    return false;
                };
                if b.is_ascii_alphanumeric() {
                    break;
                }
                if b.is_ascii() {
                    parts += usize::from(b == FIELD_SEP_BYTE);
                    from += 1;
                    continue;
                }
                let (alnum, n) = non_ascii_class(self.text, from);
                if alnum {
                    break;
                }
                from += n;
            }
            if parts > 0 {
                // The next token opens the next part (`usize::MAX` is "none yet").
                let next = self.token.position.wrapping_add(1);
                let part = next / PART_POSITIONS + parts;
                self.token.position = (part * PART_POSITIONS).wrapping_sub(1);
            }
            let mut to = from;
            let mut ascii = true;
            while let Some(&b) = bytes.get(to) {
                if b.is_ascii_alphanumeric() {
                    to += 1;
                    continue;
                }
                if b.is_ascii() {
                    break;
                }
                let (alnum, n) = non_ascii_class(self.text, to);
                if !alnum {
                    break;
                }
                ascii = false;
                to += n;
            }
            self.pos = to;
            if is_markup_name(self.text, from, to) {
                continue;
            }
            self.token.position = self.token.position.wrapping_add(1);
            if to - from >= MAX_TOKEN_BYTES {
                continue;
            }
            self.token.offset_from = from;
            self.token.offset_to = to;
            let word = &self.text[from..to];
            if ascii {
                self.token.text.push_str(word);
                self.token.text.make_ascii_lowercase();
            } else {
                // As tantivy's `LowerCaser`: per character, no final-sigma rule.
                for c in word.chars() {
                    self.token.text.extend(c.to_lowercase());
                }
            }
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

/// Words cached per analyzer instance before the cache starts over. Words are
/// Zipf-distributed, so most tokens are a few thousand words; but a large tree has many
/// more distinct ones (linux-doc's 24 MB: about 100,000), and a cache that kept starting
/// over dropped its frequent words too. linux-doc's words take about 2.5 MB (8-byte entries
/// and a control byte per slot, then the words' bytes); a full cache about 8 MB.
const MAX_CACHED_WORDS: usize = 1 << 18;

/// The same for a cache an analyzer's clones share (snippets): it lives as long as its
/// index (a server's), and a snippet's words are mostly common ones, so it stays under
/// about 0.5 MB.
const MAX_SHARED_CACHED_WORDS: usize = 1 << 14;

/// Drops English stop words and Snowball-stems the rest (the same output as tantivy's
/// `StopWordFilter` followed by `Stemmer(English)`), with one hash lookup per token.
///
/// Why not tantivy's two filters: the Snowball English stemmer allocates and runs its full
/// algorithm for every token and was the bottleneck of indexing (about 28 MB/s of text
/// through the analyzer, against 115 MB/s without it), and the stop-word filter adds a
/// SipHash lookup. Here one [`StemCache`] answers both: unseen words are stemmed once and
/// cached. Stems are a pure function of the word, so the cache changes no output.
///
/// Each clone of the analyzer (tantivy clones one per indexing thread and segment, per
/// query and per snippet) has its own cache, no locking, and starts with it empty: a clone
/// that copied the cache, even just the stop words as owned strings, cost 5% of a server's
/// CPU. The stop words are one shared set, asked when a word is not in the cache yet.
/// [`StopAndStem::shared`] makes an analyzer whose clones share one cache instead.
#[derive(Clone)]
pub(crate) struct StopAndStem {
    stop_words: Arc<FxHashSet<&'static str>>,
    shared: bool,
}

impl StopAndStem {
    pub(crate) fn english(stop_words: &'static [&'static str]) -> Self {
        Self {
            stop_words: Arc::new(stop_words.iter().copied().collect()),
            shared: false,
        }
    }

    /// The same filter, but every clone of the analyzer it builds shares one cache,
    /// locked while a text is tokenized. For snippets: tantivy tokenizes each passage it
    /// makes a snippet of with a fresh clone, so with caches of their own every word of
    /// every snippet was stemmed anew (about 4% of a server's CPU). Not for indexing threads,
    /// which would take turns at the lock.
    pub(crate) fn shared(self) -> Self {
        Self {
            shared: true,
            ..self
        }
    }
}

/// A filter's stem cache: its own, or one its analyzer's clones share.
enum Cache {
    Own(StemCache),
    Shared(Arc<Mutex<StemCache>>),
}

/// The cache a token stream uses, held (locked, if shared) for the stream's life.
enum CacheRef<'a> {
    Own(&'a mut StemCache),
    Shared(MutexGuard<'a, StemCache>),
}

impl std::ops::Deref for CacheRef<'_> {
    type Target = StemCache;

    fn deref(&self) -> &StemCache {
        match self {
            CacheRef::Own(c) => c,
            CacheRef::Shared(c) => c,
        }
    }
}

impl std::ops::DerefMut for CacheRef<'_> {
    fn deref_mut(&mut self) -> &mut StemCache {
        match self {
            CacheRef::Own(c) => c,
            CacheRef::Shared(c) => c,
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
            cache: if self.shared {
                Cache::Shared(Arc::default())
            } else {
                Cache::Own(StemCache::default())
            },
        }
    }
}

pub(crate) struct StopAndStemFilter<T> {
    inner: T,
    stemmer: frostem::Stemmer,
    stop_words: Arc<FxHashSet<&'static str>>,
    cache: Cache,
}

impl<T: Clone> Clone for StopAndStemFilter<T> {
    /// A clone with an empty cache, or the shared one: the same output (see
    /// [`StopAndStem`]).
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            stemmer: self.stemmer,
            stop_words: Arc::clone(&self.stop_words),
            cache: match &self.cache {
                Cache::Own(_) => Cache::Own(StemCache::default()),
                Cache::Shared(c) => Cache::Shared(Arc::clone(c)),
            },
        }
    }
}

impl<T: Tokenizer> Tokenizer for StopAndStemFilter<T> {
    type TokenStream<'a> = StopAndStemStream<'a, T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        let Self {
            inner,
            stemmer,
            stop_words,
            cache,
        } = self;
        let (mut cache, max) = match cache {
            Cache::Own(c) => (CacheRef::Own(c), MAX_CACHED_WORDS),
            // A panic mid-insert leaves at worst a word's bytes without its entry.
            Cache::Shared(c) => (
                CacheRef::Shared(c.lock().unwrap_or_else(PoisonError::into_inner)),
                MAX_SHARED_CACHED_WORDS,
            ),
        };
        if cache.entries.len() >= max {
            *cache = StemCache::default();
        }
        StopAndStemStream {
            tail: inner.token_stream(text),
            stemmer: *stemmer,
            stop_words,
            cache,
        }
    }
}

/// What a word becomes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stemmed {
    /// A stop word: dropped.
    Stop,
    /// Its own stem: the token stays as it is.
    Same,
    /// Stemmed to the `len` bytes stored after the word.
    To { len: u8 },
}

/// One cached word: where its bytes are in [`StemCache::words`] (its stem, if it differs,
/// right after them).
#[derive(Clone, Copy)]
struct CachedWord {
    offset: u32,
    len: u8,
    stemmed: Stemmed,
}

/// word → [`Stemmed`], for the words of the texts an analyzer has seen.
///
/// Why not a `HashMap<String, Option<String>>`: a lookup then followed a pointer to the
/// key's bytes and another to the stem's, each a likely cache miss once the map outgrew
/// the CPU's caches, and every hit copied the stem. Here entries are 8 bytes, a word's stem
/// sits next to it, and a word that is its own stem is not copied at all. Over linux-doc's
/// passages the filter's share of the analyzer went from 160 to 118 ms.
#[derive(Default)]
struct StemCache {
    entries: hashbrown::HashTable<CachedWord>,
    /// Every cached word's bytes, each followed by its stem when that differs.
    words: String,
}

fn hash_word(word: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    h.write(word.as_bytes());
    h.finish()
}

impl StemCache {
    fn word<'w>(words: &'w str, e: &CachedWord) -> &'w str {
        let from = e.offset as usize;
        &words[from..from + usize::from(e.len)]
    }

    fn get(&self, word: &str, hash: u64) -> Option<(Stemmed, &str)> {
        let e = self
            .entries
            .find(hash, |e| Self::word(&self.words, e) == word)?;
        let stem = match e.stemmed {
            Stemmed::To { len } => {
                let from = e.offset as usize + usize::from(e.len);
                &self.words[from..from + usize::from(len)]
            }
            Stemmed::Stop | Stemmed::Same => "",
        };
        Some((e.stemmed, stem))
    }

    /// Remembers what `word` becomes: `None` for a stop word, else its stem. A word or
    /// stem too long for the compact entry (a tokenizer that keeps long tokens) is simply
    /// not cached.
    fn insert(&mut self, word: &str, hash: u64, stem: Option<&str>) {
        let (stemmed, stem) = match stem {
            None => (Stemmed::Stop, ""),
            Some(s) if s == word => (Stemmed::Same, ""),
            Some(s) => match u8::try_from(s.len()) {
                Ok(len) => (Stemmed::To { len }, s),
                Err(_) => return,
            },
        };
        let (Ok(len), Ok(offset), Ok(_)) = (
            u8::try_from(word.len()),
            u32::try_from(self.words.len()),
            u32::try_from(self.words.len() + word.len() + stem.len()),
        ) else {
            return;
        };
        self.words.push_str(word);
        self.words.push_str(stem);
        let Self { entries, words } = self;
        entries.insert_unique(
            hash,
            CachedWord {
                offset,
                len,
                stemmed,
            },
            |e| hash_word(Self::word(words, e)),
        );
    }
}

pub(crate) struct StopAndStemStream<'a, S> {
    tail: S,
    stemmer: frostem::Stemmer,
    stop_words: &'a FxHashSet<&'static str>,
    cache: CacheRef<'a>,
}

impl<S: TokenStream> TokenStream for StopAndStemStream<'_, S> {
    fn advance(&mut self) -> bool {
        while self.tail.advance() {
            let token = self.tail.token_mut();
            let hash = hash_word(&token.text);
            match self.cache.get(&token.text, hash) {
                Some((Stemmed::Stop, _)) => continue,
                Some((Stemmed::Same, _)) => {}
                Some((Stemmed::To { .. }, stem)) => {
                    // Reuse the token's buffer: no allocation on a hit.
                    token.text.clear();
                    token.text.push_str(stem);
                }
                None => {
                    let stop = self.stop_words.contains(token.text.as_str());
                    let stem = (!stop).then(|| self.stemmer.stem(&token.text));
                    self.cache.insert(&token.text, hash, stem.as_deref());
                    match stem {
                        None => continue,
                        Some(stem) if *stem != *token.text => token.text = stem.into_owned(),
                        Some(_) => {}
                    }
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
        Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter,
        TextAnalyzer, TokenStream,
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
                assert_eq!(text[from..to].to_lowercase(), w);
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
            "use foo and len see 8"
        );
        assert_eq!(
            w(".. function:: len(s)\n\n   .. py:method:: Foo.bar()\n.. note::"),
            "len s foo bar"
        );
        // Not markup: C++ and Rust paths, a colon in prose, a literal block marker, a
        // directive-looking name inside a line.
        assert_eq!(w("std::vector a::b"), "std vector a b");
        assert_eq!(w("Note: the class: `x`"), "note the class x");
        assert_eq!(w("Example::\n\n  x"), "example x");
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

    /// tantivy's own chain that [`MarkupTokenizer`] and [`StopAndStem`] stand for.
    fn tantivys(stop: &[&str]) -> TextAnalyzer {
        TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .filter(StopWordFilter::remove(stop.iter().map(|w| (*w).to_owned())))
            .filter(Stemmer::new(Language::English))
            .build()
    }

    /// No markup names, so tantivy's tokens are the expected ones: mixed case, digits,
    /// non-ASCII letters and digits (lowercasing that changes a word's length, a final
    /// sigma), tokens at and over the 40-byte limit, separators of every kind.
    const PROSE: &str = "How is the rotating of keys regularly limiting a damage; rotated KEYS, \
        rotation, generously running runners ran. Rotating again: keys keys keys. \
        ÉCOLE Straße İstanbul ΟΔΟΣ naïve 東京 ٣٤ x86_64 IPv6 0xDEADBEEF \
        abcdefghijklmnopqrstuvwxyzabcdefghijklm abcdefghijklmnopqrstuvwxyzabcdefghijklmn \
        ééééééééééééééééééé éééééééééééééééééééé end\t\r\nnext—word «quoted» a-b a.b";

    #[test]
    fn same_tokens_as_tantivys_filters() {
        const STOP: &[&str] = &["the", "a", "is", "how"];
        let mut ours = TextAnalyzer::builder(MarkupTokenizer::default())
            .filter(StopAndStem::english(STOP))
            .build();
        let mut theirs = tantivys(STOP);
        // Twice: the second pass is served from the cache.
        for _ in 0..2 {
            assert_eq!(tokens(&mut ours, PROSE), tokens(&mut theirs, PROSE));
        }
        assert_eq!(tokens(&mut ours, "the rotating")[0].0, "rotat");
        assert_eq!(tokens(&mut ours, "the rotating")[0].1, 1);
        assert!(tokens(&mut ours, "the a is").is_empty());
        // A clone (tantivy's per query and per snippet) starts with an empty
        // cache and gives the same tokens.
        let mut clone = ours.clone();
        for _ in 0..2 {
            assert_eq!(tokens(&mut clone, PROSE), tokens(&mut theirs, PROSE));
        }
        // Without stop words and stemming: tantivy's tokenizer, long-token filter and
        // lower-caser.
        let mut plain = TextAnalyzer::builder(MarkupTokenizer::default()).build();
        let mut theirs = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .build();
        assert_eq!(tokens(&mut plain, PROSE), tokens(&mut theirs, PROSE));
        let long = tokens(&mut plain, PROSE);
        assert!(long.iter().any(|t| t.0.len() == 39), "{long:?}");
        assert!(
            long.iter()
                .all(|t| t.0 != "abcdefghijklmnopqrstuvwxyzabcdefghijklmn")
        );
    }

    #[test]
    fn clones_of_a_shared_analyzer_share_one_cache_and_give_the_same_tokens() {
        const STOP: &[&str] = &["the", "a", "is", "how"];
        let shared = TextAnalyzer::builder(MarkupTokenizer::default())
            .filter(StopAndStem::english(STOP).shared())
            .build();
        let expected = tokens(&mut tantivys(STOP), PROSE);
        // Clones tokenizing at once on four threads (the lock is per text).
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let mut a = shared.clone();
                std::thread::spawn(move || (0..50).map(|_| tokens(&mut a, PROSE)).collect())
            })
            .collect();
        for t in threads {
            let runs: Vec<_> = t.join().unwrap();
            assert!(runs.iter().all(|r| *r == expected));
        }
        // What one clone learns, the filter and its other clones hold.
        let filter = StopAndStem::english(STOP)
            .shared()
            .transform(MarkupTokenizer::default());
        let mut clone = filter.clone();
        let mut stream = clone.token_stream("rotating keys");
        while stream.advance() {}
        drop(stream);
        let cached = |f: &StopAndStemFilter<MarkupTokenizer>| match &f.cache {
            Cache::Shared(c) => c.lock().unwrap().entries.len(),
            Cache::Own(c) => c.entries.len(),
        };
        assert_eq!((cached(&filter), cached(&filter.clone())), (2, 2));
        // Not so without `shared`: each clone has a cache of its own.
        let own = StopAndStem::english(STOP).transform(MarkupTokenizer::default());
        let mut clone = own.clone();
        let mut stream = clone.token_stream("rotating keys");
        while stream.advance() {}
        drop(stream);
        assert_eq!((cached(&own), cached(&clone)), (0, 2));
    }

    #[test]
    fn the_stem_cache_starts_over_when_full_and_skips_what_does_not_fit() {
        let mut ours = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(StopAndStem::english(&["the"]))
            .build();
        let mut theirs = tantivys(&["the"]);
        // More distinct words than the cache holds, each twice (a hit once cached).
        let text: String = (0..MAX_CACHED_WORDS + 1000)
            .map(|i| format!("w{i}ing the w{i}ing "))
            .collect();
        assert_eq!(tokens(&mut ours, &text), tokens(&mut theirs, &text));
        assert_eq!(tokens(&mut ours, &text), tokens(&mut theirs, &text));
        // A word whose stem is over 255 bytes (no long-token filter here) is stemmed, not
        // cached.
        let mut unlimited = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(LowerCaser)
            .filter(StopWordFilter::remove(vec!["the".to_owned()]))
            .filter(Stemmer::new(Language::English))
            .build();
        let long = format!("{}ing", "ba".repeat(150));
        for _ in 0..2 {
            let t = tokens(&mut ours, &long);
            assert_eq!(t, tokens(&mut unlimited, &long));
            assert!(t[0].0.len() > 255 && t[0].0 != long, "{t:?}");
        }
    }
}
