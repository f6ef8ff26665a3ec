//! Combining and cleaning result lists.

use std::collections::HashMap;

use crate::Hit;

/// Reciprocal-rank fusion of several ranked lists (e.g. BM25 and a second retriever):
/// each hit scores `Σ 1 / (k + rank)` over the lists it appears in (rank from 1), and the
/// result is sorted by that score, best first.
///
/// Hits are identified by `(path, line_start, line_end)`; the fields of a hit (text,
/// snippet) come from its best-ranked occurrence; `score` is replaced by the fused score.
/// Ties keep the order of first appearance (earlier lists, then higher ranks). `k` is
/// usually 60; a non-finite or negative `k` is treated as 0 (every rank still counts,
/// `1 / rank`).
pub fn rrf(lists: &[Vec<Hit>], k: f32) -> Vec<Hit> {
    let k = if k.is_finite() && k > 0.0 { k } else { 0.0 };
    // key -> (index in `out`, best rank seen)
    let mut seen: HashMap<(&str, u32, u32), (usize, usize)> = HashMap::new();
    let mut out: Vec<Hit> = Vec::new();
    let mut scores: Vec<f64> = Vec::new();
    for list in lists {
        for (i, hit) in list.iter().enumerate() {
            let rank = i + 1;
            let add = 1.0 / (f64::from(k) + rank as f64);
            let key = (hit.path.as_str(), hit.line_start, hit.line_end);
            match seen.get_mut(&key) {
                Some((idx, best)) => {
                    scores[*idx] += add;
                    if rank < *best {
                        *best = rank;
                        out[*idx] = hit.clone();
                    }
                }
                None => {
                    seen.insert(key, (out.len(), rank));
                    out.push(hit.clone());
                    scores.push(add);
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..out.len()).collect();
    // Stable sort: ties keep first-appearance order.
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut slots: Vec<Option<Hit>> = out.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|i| {
            let mut hit = slots[i].take()?;
            hit.score = scores[i] as f32;
            Some(hit)
        })
        .collect()
}

/// Drops every hit whose line range overlaps (shares at least one line with) a hit ranked
/// before it in the same file. Order is kept. Useful because neighbouring chunks of one
/// section share their overlap and often match together.
pub fn drop_overlapping(hits: Vec<Hit>) -> Vec<Hit> {
    let mut kept: Vec<Hit> = Vec::with_capacity(hits.len());
    for hit in hits {
        let clash = kept.iter().any(|k| {
            k.path == hit.path && k.line_start <= hit.line_end && hit.line_start <= k.line_end
        });
        if !clash {
            kept.push(hit);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(path: &str, a: u32, b: u32) -> Hit {
        Hit {
            path: path.into(),
            heading: String::new(),
            text: format!("{path}:{a}-{b}"),
            line_start: a,
            line_end: b,
            score: 0.0,
            snippet: String::new(),
        }
    }

    fn keys(hits: &[Hit]) -> Vec<(String, u32, u32)> {
        hits.iter()
            .map(|h| (h.path.clone(), h.line_start, h.line_end))
            .collect()
    }

    #[test]
    fn rrf_rewards_agreement() {
        let a = vec![hit("x", 1, 5), hit("y", 1, 5), hit("z", 1, 5)];
        let b = vec![hit("y", 1, 5), hit("w", 1, 5), hit("x", 1, 5)];
        let fused = rrf(&[a, b], 60.0);
        assert_eq!(
            keys(&fused),
            [
                ("y".into(), 1, 5), // 1/62 + 1/61
                ("x".into(), 1, 5), // 1/61 + 1/63
                ("w".into(), 1, 5), // 1/62
                ("z".into(), 1, 5), // 1/63
            ]
        );
        let expected = 1.0 / 62.0 + 1.0 / 61.0;
        assert!((fused[0].score - expected as f32).abs() < 1e-6);
        // Same path, different lines: different documents.
        let fused = rrf(&[vec![hit("x", 1, 5)], vec![hit("x", 6, 9)]], 60.0);
        assert_eq!(fused.len(), 2);
        assert!(rrf(&[], 60.0).is_empty());
        // k = 0 and ties keep first appearance.
        let fused = rrf(&[vec![hit("a", 1, 1)], vec![hit("b", 1, 1)]], f32::NAN);
        assert_eq!(keys(&fused)[0].0, "a");
        assert_eq!(fused[0].score, 1.0);
    }

    #[test]
    fn drop_overlapping_keeps_the_better_hit() {
        let hits = vec![
            hit("a", 10, 20),
            hit("a", 18, 30), // overlaps the first (18..20)
            hit("b", 10, 20), // other file
            hit("a", 21, 25), // touches neither kept a-range... 21..25 vs 10..20: no overlap
            hit("a", 20, 20), // overlaps 10..20 at line 20
            hit("a", 1, 9),
        ];
        assert_eq!(
            keys(&drop_overlapping(hits)),
            [
                ("a".into(), 10, 20),
                ("b".into(), 10, 20),
                ("a".into(), 21, 25),
                ("a".into(), 1, 9),
            ]
        );
    }
}
