//! The second stage of [`WorkspaceIndex::search`](crate::WorkspaceIndex::search): BM25's
//! best candidates re-scored with two signals BM25 cannot see, both read from the positions
//! already in the postings (no stored document is fetched).
//!
//! * Proximity (BM25TP, Büttcher, Clarke & Lushman, SIGIR 2006): query terms that occur
//!   close together. For each pair of neighbouring occurrences of two different query terms
//!   at distance `d`, each term accumulates the other's IDF / `d²`; the accumulator is then
//!   saturated and length-normalised like a BM25 term frequency and added to the score.
//! * Lead: query terms that occur early in the passage's text. A section's opening
//!   sentences say what it is about (a FAQ answer restates its question, a reference entry
//!   starts with its definition); a word only mentioned in passing appears anywhere. Each
//!   matched term adds its IDF × `LEAD_SCALE / (LEAD_SCALE + first position)`: the full IDF
//!   for the first word, half at about the 50th.
//!
//! Why not a phrase-query boost or an ordinary field for the lead: phrase clauses for every
//! query-term pair multiply the postings tantivy scans for every matching document, and a
//! lead field would index the opening words a second time; here only the candidates'
//! postings are read, once per query term, which stays a fraction of the first stage's cost.
//!
//! Measured on the Python FAQ benchmark (benches/kb.rs, docs/BENCHMARKS.md): nDCG@10 0.331
//! with BM25 alone (same index), 0.352 with proximity, 0.365 with the lead, 0.385 with both.
//! The weights (1 and 1) and the lead's scale (50) are the best of a small grid; moving
//! one of them (proximity 0.5 or 2, lead 0.7 or 1.5, scale 25 or 100) cost 0.002 to 0.013.

use std::collections::BTreeMap;

use tantivy::postings::Postings;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocAddress, DocSet, Score, Searcher, TERMINATED, Term};

use crate::analysis::PART_POSITIONS;

/// Second-stage ranking of [`WorkspaceIndex::search`](crate::WorkspaceIndex::search). The
/// default is what the benchmark measured best; `Rerank::off()` is plain BM25.
#[derive(Debug, Clone, PartialEq)]
pub struct Rerank {
    /// How many of BM25's best passages are re-scored (at least twice the search's `limit`,
    /// so passages just below the cut can rise into it). 0 turns the second stage off.
    pub depth: usize,
    /// Weight of the proximity score (0: off). Must be finite and >= 0.
    pub proximity: f32,
    /// Weight of the lead score (0: off). Must be finite and >= 0.
    pub lead: f32,
}

impl Default for Rerank {
    fn default() -> Self {
        Self {
            // nDCG@10 on the benchmark: 0.364 re-ranking the 10 hits returned only, 0.385
            // the top 30, 0.387 the top 100; query p50 on linux-doc: about +0.03, +0.08 and
            // +0.19 ms over BM25 alone (BM25's block-max pruning works with a lower bar when
            // it keeps more candidates).
            depth: 30,
            proximity: 1.0,
            lead: 1.0,
        }
    }
}

impl Rerank {
    /// BM25 only.
    pub fn off() -> Self {
        Self {
            depth: 0,
            proximity: 0.0,
            lead: 0.0,
        }
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        for (name, v) in [("proximity", self.proximity), ("lead", self.lead)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!(
                    "rerank.{name} must be finite and not negative, got {v}"
                ));
            }
        }
        Ok(())
    }

    fn active(&self) -> bool {
        self.depth > 0 && (self.proximity > 0.0 || self.lead > 0.0)
    }

    /// How many candidates the first stage should return for `limit` hits.
    pub(crate) fn candidates(&self, limit: usize) -> usize {
        if self.active() {
            self.depth.max(limit.saturating_mul(2))
        } else {
            limit
        }
    }

    /// Re-scores `top` (BM25 score, address), best first. `terms` are the query's terms in
    /// `field` (duplicates are ignored).
    pub(crate) fn apply(
        &self,
        searcher: &Searcher,
        field: Field,
        terms: &[Term],
        mut top: Vec<(Score, DocAddress)>,
    ) -> tantivy::Result<Vec<(Score, DocAddress)>> {
        if !self.active() || terms.is_empty() || top.is_empty() {
            return Ok(top);
        }
        let mut unique: Vec<&Term> = Vec::with_capacity(terms.len());
        for t in terms {
            if !unique.contains(&t) {
                unique.push(t);
            }
        }
        let n = searcher.num_docs().max(1) as f32;
        let mut idf = Vec::with_capacity(unique.len());
        for t in &unique {
            let df = searcher.doc_freq(t)? as f32;
            // BM25's IDF, as tantivy computes it.
            idf.push((1.0 + (n - df + 0.5) / (df + 0.5)).ln());
        }
        let mut tokens = 0u64;
        for seg in searcher.segment_readers() {
            tokens += seg.inverted_index(field)?.total_num_tokens();
        }
        let avgdl = (tokens as f32 / n).max(1.0);

        // Candidates per segment, in doc order, so each term's postings are read forward once.
        let mut by_segment: BTreeMap<u32, Vec<(u32, usize)>> = BTreeMap::new();
        for (i, (_, addr)) in top.iter().enumerate() {
            by_segment
                .entry(addr.segment_ord)
                .or_default()
                .push((addr.doc_id, i));
        }
        // Per candidate: (position, term index) of every query-term occurrence, and length.
        let mut occurrences: Vec<Vec<(u32, usize)>> = vec![Vec::new(); top.len()];
        let mut length: Vec<f32> = vec![avgdl; top.len()];
        let mut positions = Vec::new();
        for (segment_ord, mut docs) in by_segment {
            docs.sort_unstable();
            let segment = searcher.segment_reader(segment_ord);
            let inverted = segment.inverted_index(field)?;
            let norms = segment.get_fieldnorms_reader(field)?;
            for &(doc, i) in &docs {
                length[i] = norms.fieldnorm(doc) as f32;
            }
            for (ti, term) in unique.iter().enumerate() {
                let Some(mut postings) =
                    inverted.read_postings(term, IndexRecordOption::WithFreqsAndPositions)?
                else {
                    continue;
                };
                for &(doc, i) in &docs {
                    if postings.doc() < doc {
                        postings.seek(doc);
                    }
                    if postings.doc() == TERMINATED {
                        break;
                    }
                    if postings.doc() == doc {
                        postings.positions(&mut positions);
                        occurrences[i].extend(positions.iter().map(|&p| (p, ti)));
                    }
                }
            }
        }
        let mut acc = vec![0.0f32; unique.len()];
        let mut first = vec![u32::MAX; unique.len()];
        for (i, occ) in occurrences.iter_mut().enumerate() {
            occ.sort_unstable();
            let mut bonus = 0.0;
            if self.proximity > 0.0 {
                bonus += self.proximity * proximity(occ, &idf, &mut acc, length[i] / avgdl);
            }
            if self.lead > 0.0 {
                bonus += self.lead * lead(occ, &idf, &mut first);
            }
            top[i].0 += bonus;
        }
        // Stable: equal scores keep BM25's order.
        top.sort_by(|a, b| b.0.total_cmp(&a.0));
        Ok(top)
    }
}

/// tantivy's BM25 parameters (not exported), reused to saturate the proximity accumulator.
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// Positions at which the lead score of a term has halved.
const LEAD_SCALE: f32 = 50.0;

/// BM25TP's proximity score of one passage. `occ` is sorted by position; `rel_len` is the
/// passage's length over the average.
fn proximity(occ: &[(u32, usize)], idf: &[f32], acc: &mut [f32], rel_len: f32) -> f32 {
    acc.fill(0.0);
    for w in occ.windows(2) {
        let ((p1, t1), (p2, t2)) = (w[0], w[1]);
        // Parts of the body are PART_POSITIONS apart: never neighbours in effect.
        if t1 == t2 {
            continue;
        }
        let d = (p2 - p1).max(1) as f32;
        acc[t1] += idf[t2] / (d * d);
        acc[t2] += idf[t1] / (d * d);
    }
    let k = K1 * ((1.0 - B) + B * rel_len);
    acc.iter()
        .zip(idf)
        .map(|(a, w)| w.min(1.0) * a * (K1 + 1.0) / (a + k))
        .sum()
}

/// The lead score of one passage: each term's IDF, decayed by its first position in the
/// text. A match in the passage's own heading counts as the first word (the title is what
/// the passage is about); one only in its ancestors' headings adds nothing (they are about
/// the whole document).
fn lead(occ: &[(u32, usize)], idf: &[f32], first: &mut [u32]) -> f32 {
    first.fill(u32::MAX);
    for &(p, t) in occ {
        let p = match p as usize / PART_POSITIONS {
            0 => p,
            1 => 0,
            _ => continue,
        };
        first[t] = first[t].min(p);
    }
    first
        .iter()
        .zip(idf)
        .filter(|(p, _)| **p < u32::MAX)
        .map(|(p, w)| w * LEAD_SCALE / (LEAD_SCALE + *p as f32))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proximity_rewards_close_pairs_only() {
        let idf = [2.0, 3.0];
        let mut acc = [0.0; 2];
        let near = proximity(&[(0, 0), (1, 1)], &idf, &mut acc, 1.0);
        let far = proximity(&[(0, 0), (10, 1)], &idf, &mut acc, 1.0);
        let same = proximity(&[(0, 0), (1, 0)], &idf, &mut acc, 1.0);
        let apart = proximity(&[(3, 0), (PART_POSITIONS as u32, 1)], &idf, &mut acc, 1.0);
        assert!(near > far && far > 0.0, "{near} {far}");
        assert_eq!(same, 0.0, "one term repeated is not proximity");
        assert!(apart < 1e-9, "text and heading are never close: {apart}");
        // Longer passages saturate less quickly.
        assert!(proximity(&[(0, 0), (1, 1)], &idf, &mut acc, 4.0) < near);
    }

    #[test]
    fn lead_decays_with_the_first_position() {
        let idf = [2.0, 3.0];
        let mut first = [0; 2];
        let opening = lead(&[(0, 0), (2, 1), (400, 0)], &idf, &mut first);
        assert!((opening - (2.0 + 3.0 * 50.0 / 52.0)).abs() < 1e-5);
        let halfway = lead(&[(50, 0)], &idf, &mut first);
        assert!((halfway - 1.0).abs() < 1e-6);
        let own = PART_POSITIONS as u32;
        let ancestors = 2 * PART_POSITIONS as u32;
        assert_eq!(lead(&[(own + 3, 1)], &idf, &mut first), 3.0);
        let heading_only = lead(&[(ancestors + 1, 1)], &idf, &mut first);
        assert_eq!(heading_only, 0.0);
    }
}
