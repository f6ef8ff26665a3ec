//! What a `local_kb_retrieval` search answers, from the index's hits: the query
//! and its variants each searched, fused by reciprocal rank, overlapping
//! passages of one file dropped, and whether the best passage covers the query.
//! The kb-retrieval plugin answers with it; so does the host's `capstan search`
//! when the index is current and the plugin has nothing to refresh. One
//! implementation for both, so the two answers are the same bytes.

use std::collections::HashMap;

use serde_json::json;

/// One passage the index returned for one query.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// Workspace-relative, `/`-separated.
    pub path: String,
    /// The passage's heading path.
    pub heading: String,
    /// The passage's full text.
    pub text: String,
    /// First source line, 1-based.
    pub line_start: u32,
    /// Last source line, 1-based and inclusive.
    pub line_end: u32,
    /// BM25, comparable within one list only.
    pub score: f32,
    /// HTML, matches in `<b>…</b>`.
    pub snippet: String,
}

/// Reciprocal-rank fusion constant: 60 is the value from Cormack et al. that
/// most systems use; it damps the head of each list without flattening it.
pub const RRF_K: f32 = 60.0;

/// Passages a search returns at most (its `limit` is clamped to 1..=this).
pub const MAX_LIMIT: u32 = 50;

/// A search's answer: the task's summary and data.
#[derive(Debug, Clone)]
pub struct Answer {
    /// One line: how many passages, and whether they suffice.
    pub summary: String,
    /// `passages`, `sufficient`, `coverage`, `queries`, `index`.
    pub data: serde_json::Value,
    /// How many passages `data` holds.
    pub passages: usize,
}

/// The query first, then each distinct non-blank variant.
pub fn queries(query: &str, variants: &[String]) -> Vec<String> {
    let mut queries = vec![query.to_string()];
    for v in variants {
        if !v.trim().is_empty() && !queries.contains(v) {
            queries.push(v.clone());
        }
    }
    queries
}

/// Searches the query and each variant with `search(query, n)` (`n` hits
/// asked per query: twice the clamped `limit`) and builds the answer. `index`
/// is the refresh's report when one ran first.
pub fn answer<E>(
    query: &str,
    variants: &[String],
    limit: u32,
    index: Option<serde_json::Value>,
    mut search: impl FnMut(&str, u32) -> Result<Vec<Hit>, E>,
) -> Result<Answer, E> {
    let limit = limit.clamp(1, MAX_LIMIT);
    let queries = queries(query, variants);
    // Fuse by (path, lines); keep the best-ranked copy of each passage.
    let mut fused: HashMap<(String, u32, u32), (f32, Hit)> = HashMap::new();
    for q in &queries {
        for (rank, hit) in search(q, limit * 2)?.into_iter().enumerate() {
            let key = (hit.path.clone(), hit.line_start, hit.line_end);
            let entry = fused.entry(key).or_insert((0.0, hit));
            entry.0 += 1.0 / (RRF_K + rank as f32 + 1.0);
        }
    }
    let mut ranked: Vec<(f32, Hit)> = fused.into_values().collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.path.cmp(&b.1.path)));
    // Drop passages that overlap a better one in the same file (chunk overlap).
    let mut kept: Vec<(f32, Hit)> = Vec::new();
    for (score, hit) in ranked {
        let overlaps = kept.iter().any(|(_, k)| {
            k.path == hit.path && k.line_start <= hit.line_end && hit.line_start <= k.line_end
        });
        if !overlaps {
            kept.push((score, hit));
        }
        if kept.len() as u32 >= limit {
            break;
        }
    }
    let keywords = keywords(query);
    let coverage = kept.first().map(|(_, h)| {
        let words = keywords_of(&format!("{} {}", h.heading, h.text));
        let found = keywords.iter().filter(|k| words.contains(k)).count();
        if keywords.is_empty() {
            1.0
        } else {
            found as f32 / keywords.len() as f32
        }
    });
    // Sufficient when the best passage holds most of what was asked about.
    let sufficient = coverage.is_some_and(|c| c >= 0.6);
    let passages: Vec<serde_json::Value> = kept
        .iter()
        .map(|(score, h)| {
            json!({
                "path": h.path, "heading": h.heading, "line_start": h.line_start, "line_end": h.line_end,
                "score": score, "bm25": h.score, "snippet": h.snippet, "text": h.text,
            })
        })
        .collect();
    let summary = format!(
        "{} passages for \"{}\"{}",
        passages.len(),
        query,
        if sufficient { "" } else { " (insufficient)" }
    );
    let count = passages.len();
    let data = json!({
        "passages": passages,
        "sufficient": sufficient,
        "coverage": coverage.unwrap_or(0.0),
        "queries": queries,
        "index": index,
    });
    Ok(Answer {
        summary,
        data,
        passages: count,
    })
}

/// The `kb.searched` activity's message.
pub fn searched_message(query: &str, passages: usize) -> String {
    format!("searched the knowledge base for \"{query}\": {passages} passages")
}

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "in", "is", "it", "me", "my", "of", "on", "or", "our", "should", "so", "that", "the",
    "this", "to", "we", "what", "when", "where", "which", "who", "why", "will", "with", "you",
    "your", "not",
];

fn stem(w: &str) -> String {
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(base) = w.strip_suffix(suffix)
            && base.len() >= 3
        {
            return base.to_string();
        }
    }
    w.to_string()
}

fn keywords_of(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .map(|w| w.to_lowercase())
        .filter(|w| w.len() > 1 && !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

fn keywords(text: &str) -> Vec<String> {
    let mut out = keywords_of(text);
    out.retain(|w| w != "or" && w != "and");
    out.dedup();
    let mut seen = Vec::new();
    out.retain(|w| {
        let new = !seen.contains(w);
        seen.push(w.clone());
        new
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(path: &str, start: u32, end: u32, text: &str) -> Hit {
        Hit {
            path: path.into(),
            heading: String::new(),
            text: text.into(),
            line_start: start,
            line_end: end,
            score: 1.0,
            snippet: String::new(),
        }
    }

    #[test]
    fn variants_fuse_and_overlaps_go() {
        let lists: HashMap<&str, Vec<Hit>> = HashMap::from([
            (
                "rotate keys",
                vec![
                    hit("a.md", 1, 10, "rotate the signing keys"),
                    hit("a.md", 8, 20, "overlap"),
                    hit("b.md", 1, 5, "keys"),
                ],
            ),
            (
                "key rotation",
                vec![hit("b.md", 1, 5, "keys"), hit("c.md", 1, 2, "other")],
            ),
        ]);
        let variants = vec![String::new(), "key rotation".into(), "rotate keys".into()];
        let asked = std::cell::RefCell::new(Vec::new());
        let a = answer("rotate keys", &variants, 99, None, |q, n| {
            asked.borrow_mut().push((q.to_string(), n));
            Ok::<_, ()>(lists[q].clone())
        })
        .unwrap();
        assert_eq!(
            asked.into_inner(),
            [
                ("rotate keys".to_string(), 100),
                ("key rotation".to_string(), 100)
            ]
        );
        let paths: Vec<(&str, u64)> = a.data["passages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["path"].as_str().unwrap(),
                    p["line_start"].as_u64().unwrap(),
                )
            })
            .collect();
        // b.md is in both lists, so first; a.md 8-20 overlaps a.md 1-10.
        assert_eq!(paths, [("b.md", 1), ("a.md", 1), ("c.md", 1)]);
        assert_eq!(a.passages, 3);
        assert_eq!(a.data["sufficient"], false, "b.md's text lacks `rotate`");
        assert_eq!(a.summary, "3 passages for \"rotate keys\" (insufficient)");
        assert!(a.data["index"].is_null());
    }

    #[test]
    fn nothing_found_is_insufficient_and_errors_pass_through() {
        let a = answer("x", &[], 0, None, |_, n| {
            assert_eq!(n, 2, "limit 0 is clamped to 1");
            Ok::<_, ()>(vec![])
        })
        .unwrap();
        assert_eq!(a.data["coverage"], 0.0);
        assert_eq!(a.data["sufficient"], false);
        assert_eq!(
            answer("x", &[], 6, None, |_, _| Err::<Vec<Hit>, _>("down")).unwrap_err(),
            "down"
        );
    }
}
