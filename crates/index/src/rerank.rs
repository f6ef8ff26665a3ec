//! Second-stage ranking of BM25's best candidates (EXPERIMENT).

use std::collections::BTreeMap;

use tantivy::postings::Postings;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocAddress, DocSet, Searcher, TERMINATED, Term};

pub(crate) struct Knobs {
    pub depth: usize,
    pub prox: f32,
    pub cov: f32,
    pub hw: usize,
    pub anc: usize,
    pub rescore: bool,
    pub k1: f32,
    pub b: f32,
    pub lead: f32,
    pub lead_n: u32,
    pub text_first: bool,
    pub lead_tf: f32,
    pub lead_mode: u32,
}

pub(crate) fn knobs() -> &'static Knobs {
    static K: std::sync::OnceLock<Knobs> = std::sync::OnceLock::new();
    K.get_or_init(|| {
        let f = |k: &str, d: f32| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        Knobs {
            depth: f("CAP_DEPTH", 0.0) as usize,
            prox: f("CAP_PROX", 0.0),
            cov: f("CAP_COV", 0.0),
            hw: f("CAP_HW", 2.0) as usize,
            anc: f("CAP_ANC", 99.0) as usize,
            rescore: f("CAP_RESCORE", 0.0) > 0.0,
            k1: f("CAP_K1", 1.2),
            b: f("CAP_B", 0.75),
            lead: f("CAP_LEAD", 0.0),
            lead_n: f("CAP_LEADN", 30.0) as u32,
            text_first: f("CAP_TEXTFIRST", 0.0) > 0.0,
            lead_tf: f("CAP_LEADTF", 0.0),
            lead_mode: f("CAP_LEADMODE", 0.0) as u32,
        }
    })
}

const K1: f32 = 1.2;
const B: f32 = 0.75;

pub(crate) fn rerank(
    searcher: &Searcher,
    field: Field,
    terms: &[Term],
    top: Vec<(f32, DocAddress)>,
    k: &Knobs,
) -> tantivy::Result<Vec<(f32, DocAddress)>> {
    if terms.len() < 2 || top.is_empty() {
        return Ok(top);
    }
    let n = searcher.num_docs().max(1) as f32;
    let mut idf = Vec::with_capacity(terms.len());
    for t in terms {
        let df = searcher.doc_freq(t)? as f32;
        idf.push((1.0 + (n - df + 0.5) / (df + 0.5)).ln());
    }
    let total_idf: f32 = idf.iter().sum();
    let mut tokens = 0u64;
    for seg in searcher.segment_readers() {
        tokens += seg.inverted_index(field)?.total_num_tokens();
    }
    let avgdl = (tokens as f32 / n).max(1.0);
    let mut by_seg: BTreeMap<u32, Vec<(u32, usize)>> = BTreeMap::new();
    for (i, (_, addr)) in top.iter().enumerate() {
        by_seg
            .entry(addr.segment_ord)
            .or_default()
            .push((addr.doc_id, i));
    }
    let mut out = top.clone();
    // positions[candidate] = (position, term index)
    let mut occ: Vec<Vec<(u32, usize)>> = vec![Vec::new(); top.len()];
    let mut matched: Vec<f32> = vec![0.0; top.len()];
    let mut tfs: Vec<Vec<(usize, u32)>> = vec![Vec::new(); top.len()];
    let mut dl: Vec<f32> = vec![avgdl; top.len()];
    let mut buf = Vec::new();
    for (seg_ord, mut docs) in by_seg {
        docs.sort_unstable();
        let seg = searcher.segment_reader(seg_ord);
        let inv = seg.inverted_index(field)?;
        let norms = seg.get_fieldnorms_reader(field)?;
        for &(doc, i) in &docs {
            dl[i] = norms.fieldnorm(doc) as f32;
        }
        for (ti, t) in terms.iter().enumerate() {
            let Some(mut postings) = inv.read_postings(t, IndexRecordOption::WithFreqsAndPositions)?
            else {
                continue;
            };
            for &(doc, i) in &docs {
                if postings.doc() == TERMINATED {
                    break;
                }
                if postings.doc() < doc && postings.seek(doc) != doc {
                    continue;
                }
                if postings.doc() != doc {
                    continue;
                }
                matched[i] += idf[ti];
                tfs[i].push((ti, postings.term_freq()));
                postings.positions(&mut buf);
                occ[i].extend(buf.iter().map(|&p| (p, ti)));
            }
        }
    }
    for (i, o) in occ.iter_mut().enumerate() {
        let mut score = top[i].0;
        if k.rescore {
            let kk = k.k1 * ((1.0 - k.b) + k.b * dl[i] / avgdl);
            let mut lead_tf = vec![0.0f32; terms.len()];
            for &(p, t) in o.iter() {
                if p < k.lead_n {
                    lead_tf[t] += 1.0;
                }
            }
            score = tfs[i]
                .iter()
                .map(|&(ti, tf)| {
                    let tf = tf as f32 + k.lead_tf * lead_tf[ti];
                    idf[ti] * tf * (k.k1 + 1.0) / (tf + kk)
                })
                .sum();
        }
        if k.prox > 0.0 {
            o.sort_unstable();
            let mut acc = vec![0.0f32; terms.len()];
            for w in o.windows(2) {
                let ((p1, t1), (p2, t2)) = (w[0], w[1]);
                if t1 == t2 {
                    continue;
                }
                let d = (p2 - p1).max(1) as f32;
                acc[t1] += idf[t2] / (d * d);
                acc[t2] += idf[t1] / (d * d);
            }
            let kk = K1 * ((1.0 - B) + B * dl[i] / avgdl);
            let prox: f32 = acc
                .iter()
                .zip(&idf)
                .map(|(a, w)| w.min(1.0) * a * (K1 + 1.0) / (a + kk))
                .sum();
            score += k.prox * prox;
        }
        if k.lead > 0.0 {
            let mut first = vec![u32::MAX; terms.len()];
            for &(p, t) in o.iter() {
                first[t] = first[t].min(p);
            }
            let lead: f32 = match k.lead_mode {
                1 => first
                    .iter()
                    .zip(&idf)
                    .filter(|(p, _)| **p < u32::MAX)
                    .map(|(p, w)| w * k.lead_n as f32 / (k.lead_n as f32 + *p as f32))
                    .sum(),
                2 => {
                    let l: f32 = first
                        .iter()
                        .zip(&idf)
                        .filter(|(p, _)| **p < k.lead_n)
                        .map(|(_, w)| *w)
                        .sum();
                    l * (1.0 + l / total_idf)
                }
                _ => first
                    .iter()
                    .zip(&idf)
                    .filter(|(p, _)| **p < k.lead_n)
                    .map(|(_, w)| *w)
                    .sum(),
            };
            score += k.lead * lead;
        }
        if k.cov > 0.0 && total_idf > 0.0 {
            score *= (matched[i] / total_idf).powf(k.cov);
        }
        out[i].0 = score;
    }
    out.sort_by(|a, b| b.0.total_cmp(&a.0));
    Ok(out)
}
