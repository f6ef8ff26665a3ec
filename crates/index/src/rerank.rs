//! The second stage of [`WorkspaceIndex::search`](crate::WorkspaceIndex::search): BM25's
//! best candidates re-scored, from the positions and lengths already in the index (no stored
//! document is fetched).
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
//! * Length normalisation: tantivy's BM25 normalises term frequencies with `b = 0.75` (fixed
//!   in tantivy). The candidates' term scores are re-normalised with [`Rerank::length_norm`]
//!   (default 1): each query term's BM25 term score is recomputed from its frequency in the
//!   passage with both `b`s, and the difference is added to tantivy's score rather than
//!   replacing it, so what tantivy scores beyond single terms (phrase clauses, repeated
//!   query words) stays in. Why stronger normalisation here: a
//!   passage is a chunk of one section, cut by capstan-kb-parse to a bounded size, so a long
//!   passage is long because it covers more (an API listing, a table, several
//!   sub-topics: Robertson's "scope" case, for which BM25's `b` is 1), not because it says
//!   one thing more verbosely.
//!
//! Why not a phrase-query boost or an ordinary field for the lead: phrase clauses for every
//! query-term pair multiply the postings tantivy scans for every matching document, and a
//! lead field would index the opening words a second time; here only the candidates'
//! postings are read, once per query term, which stays a fraction of the first stage's cost.
//!
//! After re-scoring, [`Rerank::same_file`] diversifies the hits (see
//! `WorkspaceIndex::search`).
//!
//! Measured on the Python FAQ benchmark (benches/kb.rs, docs/BENCHMARKS.md), nDCG@10:
//! 0.331 with BM25 alone (same index); over the top 30, 0.352 with proximity, 0.365 with
//! the lead, 0.385 with both, 0.400 with `b = 1` as well; the default (top 40, same-file
//! factor too) 0.406. The weights (1 and 1) and the lead's scale (50) are the best of a
//! small grid; moving one of them (proximity 0.5 or 2, lead 0.7 or 1.5, scale 25 or 100)
//! cost 0.002 to 0.013. `b` 0.9 instead of 1 costs 0.009; same-file factors 0.6 to 0.9
//! measured 0.403 to 0.407.

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
    /// BM25's `b` (length normalisation, 0 to 1) the candidates are re-scored with; 0.75 is
    /// tantivy's own and changes nothing.
    pub length_norm: f32,
    /// Factor applied to a passage's score for each better passage of the same file already
    /// among the hits, in (0, 1]; 1 turns it off. Sibling passages share their file's
    /// heading path and vocabulary, so one file matching the query well would otherwise fill
    /// the whole list; the n-th passage of a file has to beat other files' passages by
    /// `1 / same_file^n` to stay ahead of them.
    pub same_file: f32,
}

impl Default for Rerank {
    fn default() -> Self {
        Self {
            // nDCG@10 on the benchmark (all other settings default): 0.393 re-ranking the
            // top 20, 0.400 the top 30, 0.406 the top 40, 0.411 the top 100. Query p50 on
            // linux-doc grows with depth (BM25's block-max pruning works with a lower bar
            // when it keeps more candidates): about +0.08 ms for the top 30 and +0.19 ms
            // for the top 100 over BM25 alone; 40 costs a few hundredths more than 30.
            depth: 40,
            proximity: 1.0,
            lead: 1.0,
            length_norm: 1.0,
            same_file: 0.8,
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
            length_norm: B,
            same_file: 1.0,
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
        if !(0.0..=1.0).contains(&self.length_norm) {
            return Err(format!(
                "rerank.length_norm (BM25's b) must be between 0 and 1, got {}",
                self.length_norm
            ));
        }
        if !(self.same_file > 0.0 && self.same_file <= 1.0) {
            return Err(format!(
                "rerank.same_file must be above 0 and at most 1, got {}",
                self.same_file
            ));
        }
        Ok(())
    }

    fn active(&self) -> bool {
        self.depth > 0 && (self.proximity > 0.0 || self.lead > 0.0 || self.length_norm != B)
    }

    /// The factor for a passage with `better` passages of its file ranked above it, if
    /// hits are diversified at all.
    pub(crate) fn same_file_factor(&self, better: u32) -> Option<f32> {
        (self.depth > 0 && self.same_file < 1.0).then(|| {
            self.same_file
                .powi(i32::try_from(better).unwrap_or(i32::MAX))
        })
    }

    /// How many candidates the first stage should return for `limit` hits.
    pub(crate) fn candidates(&self, limit: usize) -> usize {
        if self.active() || self.same_file_factor(1).is_some() {
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
        let mut tf = vec![0u32; unique.len()];
        for (i, occ) in occurrences.iter_mut().enumerate() {
            occ.sort_unstable();
            let mut bonus = 0.0;
            if self.length_norm != B {
                bonus += renormalise(occ, &idf, &mut tf, length[i] / avgdl, self.length_norm);
            }
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

/// tantivy's BM25 parameters (not exported): its term scores are re-normalised from these,
/// and they saturate the proximity accumulator.
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// What re-normalising the passage's BM25 term scores with `b` instead of tantivy's [`B`]
/// adds to its score (negative for passages longer than average when `b > B`).
fn renormalise(occ: &[(u32, usize)], idf: &[f32], tf: &mut [u32], rel_len: f32, b: f32) -> f32 {
    tf.fill(0);
    for &(_, t) in occ {
        tf[t] += 1;
    }
    let k_new = K1 * ((1.0 - b) + b * rel_len);
    let k_old = K1 * ((1.0 - B) + B * rel_len);
    tf.iter()
        .zip(idf)
        .filter(|(f, _)| **f > 0)
        .map(|(&f, w)| {
            let f = f as f32;
            w * (K1 + 1.0) * (f / (f + k_new) - f / (f + k_old))
        })
        .sum()
}

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
    fn renormalising_favours_short_passages_only_when_b_grows() {
        let idf = [2.0, 3.0];
        let mut tf = [0; 2];
        let occ = [(0, 0), (5, 0), (9, 1)];
        // tantivy's own b changes nothing, at any length.
        for rel_len in [0.5, 1.0, 3.0] {
            assert!(renormalise(&occ, &idf, &mut tf, rel_len, B).abs() < 1e-6);
        }
        // At the average length, b does not matter either.
        assert!(renormalise(&occ, &idf, &mut tf, 1.0, 1.0).abs() < 1e-6);
        assert!(renormalise(&occ, &idf, &mut tf, 0.5, 1.0) > 0.0);
        assert!(renormalise(&occ, &idf, &mut tf, 3.0, 1.0) < 0.0);
        assert_eq!(renormalise(&[], &idf, &mut tf, 3.0, 1.0), 0.0);
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
