//! Words of questions and passages. Matching uses crude stems ("keys" meets
//! "key"); anything people read (a search query in the feed) uses the words as
//! written, never the stems.

use std::collections::HashSet;
use std::sync::LazyLock;

pub const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "in", "is", "it", "me", "my", "of", "on", "or", "our", "should", "so", "that", "the",
    "their", "this", "to", "we", "what", "when", "where", "which", "who", "why", "will", "with",
    "you", "your", "please", "tell", "about", "there", "any", "all", "was", "were", "did", "has",
    "have", "if", "then", "than", "into", "us", "get", "use", "used", "using", "those", "these",
    "they", "them", "its", "must", "need", "needs", "would", "could", "may", "might", "one",
    "ones", "also", "else", "some", "am", "been", "being", "here", "i'm", "want", "know", "way",
    "since", "happen", "happens", "seem", "seems",
];

/// The words of a text as written, split at anything that is not part of a
/// word (hyphenated words and identifiers stay whole).
fn raw_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric() && c != '_' && c != '-' && c != '\'')
        .map(|w| w.trim_matches(|c| c == '-' || c == '\''))
}

fn is_content(lower: &str) -> bool {
    lower.chars().count() >= 2 && !is_stopword(lower)
}

/// One hash lookup, not a scan of [`STOPWORDS`]: every word of every passage
/// of every answer is asked.
fn is_stopword(lower: &str) -> bool {
    static SET: LazyLock<HashSet<&'static str>> =
        LazyLock::new(|| STOPWORDS.iter().copied().collect());
    SET.contains(lower)
}

/// Distinct content words, lower-cased and stemmed, in order of appearance.
pub fn keywords(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for stem in keywords_all(text) {
        if !out.contains(&stem) {
            out.push(stem);
        }
    }
    out
}

/// Every content word, stemmed, repeats kept.
pub fn keywords_all(text: &str) -> Vec<String> {
    raw_words(text)
        .map(str::to_lowercase)
        .filter(|w| is_content(w))
        .map(|w| stem(&w))
        .collect()
}

/// Distinct content words as written (lower-cased): what a broadened search
/// query is made of, so the feed shows words, not stems.
pub fn content_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in raw_words(text).map(str::to_lowercase) {
        if is_content(&w) && !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// Irregular forms the suffix rules cannot reach.
const IRREGULAR: &[(&str, &str)] = &[
    ("written", "writ"),
    ("wrote", "writ"),
    ("chosen", "choos"),
    ("chose", "choos"),
    ("taken", "tak"),
    ("took", "tak"),
    ("given", "giv"),
    ("gave", "giv"),
    ("broken", "brok"),
    ("broke", "brok"),
    ("known", "know"),
    ("knew", "know"),
    ("shown", "show"),
    ("ran", "run"),
    ("running", "run"),
    ("children", "child"),
    ("people", "person"),
];

pub fn stem(w: &str) -> String {
    if let Some((_, base)) = IRREGULAR.iter().find(|(form, _)| *form == w) {
        return base.to_string();
    }
    if let Some(base) = w.strip_suffix("ation").filter(|b| b.len() >= 3) {
        return format!("{base}at");
    }
    if let Some(base) = w.strip_suffix("ies").filter(|b| b.len() >= 3) {
        return format!("{base}y");
    }
    for suffix in ["ing", "ed", "es", "e", "s", "ly"] {
        if let Some(base) = w.strip_suffix(suffix)
            && base.len() >= 3
        {
            return base.to_string();
        }
    }
    w.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_drop_stopwords_and_stem() {
        assert_eq!(
            keywords("How do I rotate the signing keys?"),
            ["rotat", "sign", "key"]
        );
    }

    #[test]
    fn content_words_are_shown_as_written() {
        assert_eq!(
            content_words("How do I call paging for them?"),
            ["call", "paging"]
        );
    }
}
