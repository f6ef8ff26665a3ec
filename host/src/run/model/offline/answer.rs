//! The extractive answerer: finds the sentence, list item or table row that
//! answers the question (not the passage), says whether one does, and writes
//! the answer from the source's own words with a citation per passage used.

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher as _, Hash as _, Hasher as _, RandomState};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use super::followup::Reading;
use super::question::{Wants, bears};
use super::segment::{Unit, UnitKind, units};
use super::words::keywords;
use crate::run::model::Passage;
use capstan_protocol::Citation;

/// One candidate unit and how well it answers.
#[derive(Debug, Clone)]
pub struct Pick {
    /// Index of its passage in the passages given.
    pub passage: usize,
    pub unit: Unit,
    pub score: f32,
    /// Share of the question's (weighted) topic words found in the unit or
    /// its heading path.
    pub coverage: f32,
    /// Whether it holds the kind of thing asked for (a duration, a reason...).
    pub bears: bool,
    /// Whether the unit's own text holds a word of the question's focus.
    pub on_focus: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Finding {
    /// Best first.
    pub picks: Vec<Pick>,
    /// Whether the best pick answers the question (the sufficiency signal).
    pub answered: bool,
}

/// Coverage at or above which a unit is about what was asked.
const COVERAGE_NEEDED: f32 = 0.6;
/// Weight of a word carried over from the previous question, relative to the
/// message's own words.
const CARRIED_WEIGHT: f32 = 0.35;
/// A lead longer than this is cut to the clause that answers, if one does.
const LONG_LEAD: usize = 180;

/// [`find`], kept for the last [`RECENT_FINDINGS`] inputs: a run asks twice
/// with the same reading and passages (whether retrieval sufficed, then for the
/// answer), and each call segments and analyses every passage (about 8% of a
/// served run's CPU, measured). Keyed by a hash of everything `find` reads, with
/// the process's random SipHash keys, so no input can be made to collide with
/// another on purpose.
pub fn find_recent(reading: &Reading, passages: &[Passage]) -> Arc<Finding> {
    static RECENT: LazyLock<Mutex<RecentFindings>> = LazyLock::new(|| {
        Mutex::new(RecentFindings {
            keys: RandomState::new(),
            kept: VecDeque::new(),
        })
    });
    let recent = || RECENT.lock().unwrap_or_else(PoisonError::into_inner);
    let keys = recent().keys.clone();
    let key = {
        let mut h = keys.build_hasher();
        reading.hash(&mut h);
        for p in passages {
            (&p.path, &p.heading, p.line_start, p.line_end, &p.text).hash(&mut h);
            p.score.to_bits().hash(&mut h);
        }
        passages.len().hash(&mut h);
        h.finish()
    };
    let kept = recent()
        .kept
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, f)| f.clone());
    if let Some(finding) = kept {
        return finding;
    }
    let finding = Arc::new(find(reading, passages));
    let mut recent = recent();
    if recent.kept.len() >= RECENT_FINDINGS {
        recent.kept.pop_front();
    }
    recent.kept.push_back((key, finding.clone()));
    finding
}

/// [`find_recent`]'s memory: the hash keys, and the findings by input hash,
/// oldest first.
struct RecentFindings {
    keys: RandomState,
    kept: VecDeque<(u64, Arc<Finding>)>,
}

/// How many findings [`find_recent`] keeps: more than the runs a server has
/// between two questions of one run.
const RECENT_FINDINGS: usize = 64;

/// Score every unit of `passages` against the question.
fn find(reading: &Reading, passages: &[Passage]) -> Finding {
    let cut: Vec<Vec<Unit>> = passages.iter().map(|p| units(&p.text)).collect();
    // How rare each topic word is among the units retrieved: a word every
    // unit has tells little, a word no unit has is what is missing.
    let all_units = cut.iter().map(Vec::len).sum::<usize>().max(1) as f32;
    let unit_words: Vec<Vec<HashSet<String>>> = cut
        .iter()
        .map(|us| {
            us.iter()
                .map(|u| {
                    keywords(&format!("{} {}", u.text, u.context))
                        .into_iter()
                        .collect()
                })
                .collect()
        })
        .collect();
    let mut weights: Vec<(String, f32, bool)> = Vec::new();
    for (k, base, focus) in reading
        .focus
        .iter()
        .map(|k| (k, 1.0, true))
        .chain(reading.carried.iter().map(|k| (k, CARRIED_WEIGHT, false)))
    {
        if weights.iter().any(|(w, ..)| w == k) {
            continue;
        }
        // A word no unit holds weighs as much as one a single unit holds: it
        // counts against coverage, but a generic verb the documents happen not
        // to use ("run") must not outweigh every rare word they do hold.
        let df = unit_words
            .iter()
            .flatten()
            .filter(|s| s.contains(k))
            .count()
            .max(1) as f32;
        let idf = 1.0 + ((all_units + 1.0) / (df + 1.0)).ln();
        weights.push((k.clone(), base * idf, focus));
    }
    let total: f32 = weights.iter().map(|(_, w, _)| w).sum();
    let focus_total: f32 = weights
        .iter()
        .filter(|(_, _, f)| *f)
        .map(|(_, w, _)| w)
        .sum();
    let mut picks = Vec::new();
    for (pi, passage) in passages.iter().enumerate() {
        let head: HashSet<String> = keywords(&passage.heading).into_iter().collect();
        // The section's own title: in question-and-answer documents it is the
        // question, and the section's first sentences are its answer.
        let title = passage.heading.rsplit(" > ").next().unwrap_or("");
        let title_words = keywords(title);
        let title_cover = if focus_total > 0.0 {
            weights
                .iter()
                .filter(|(k, _, f)| *f && title_words.contains(k))
                .map(|(_, w, _)| w)
                .sum::<f32>()
                / focus_total
        } else {
            0.0
        };
        let title_order = in_order(&reading.focus, &title_words);
        let opens_section = !passages.iter().any(|q| {
            q.path == passage.path
                && q.heading == passage.heading
                && q.line_start < passage.line_start
        });
        let head_covers_all = !weights.is_empty()
            && weights
                .iter()
                .filter(|(_, _, focus)| *focus)
                .all(|(k, ..)| head.contains(k))
            && weights.iter().any(|(_, _, focus)| *focus);
        let why_heading = passage
            .heading
            .rsplit(" > ")
            .next()
            .is_some_and(|h| h.trim().to_lowercase().starts_with("why"));
        for (ui, unit) in cut[pi].iter().enumerate() {
            let own = &unit_words[pi][ui];
            let mut in_text = 0.0;
            let mut in_head = 0.0;
            let mut on_focus = false;
            for (k, w, focus) in &weights {
                if own.contains(k) {
                    in_text += w;
                    on_focus |= *focus;
                } else if head.contains(k) {
                    in_head += w;
                }
            }
            let coverage = if total > 0.0 {
                (in_text + in_head) / total
            } else {
                0.0
            };
            let holds = bears(reading.wants, &unit.text, &passage.heading);
            let mut score = in_text + 0.6 * in_head;
            if holds && reading.wants != Wants::Other {
                score += 1.5;
            }
            if head_covers_all {
                score += 1.0;
            }
            if why_heading && reading.wants == Wants::Reason {
                score += 1.0;
            }
            if title_cover >= 0.6 && opens_section {
                score += match unit.index {
                    0 => 3.0 * title_cover,
                    1 => 1.0 * title_cover,
                    _ => 0.0,
                };
            }
            score += title_order;
            if reading.wants == Wants::Definition && defines(&unit.text, &reading.focus) {
                score += 1.0;
            }
            if unit.index == 0 {
                score += 0.2;
            }
            if reading.wants == Wants::Procedure
                && unit.kind == UnitKind::ListItem
                && unit.item == 0
            {
                score += 0.5;
            }
            if unit.kind == UnitKind::Code && reading.wants != Wants::Procedure {
                score -= 2.0;
            }
            if unit.text.chars().count() > 300 {
                score -= 0.5;
            }
            // Retrieval's order breaks near-ties.
            score += 0.3 / (1.0 + pi as f32);
            picks.push(Pick {
                passage: pi,
                unit: unit.clone(),
                score,
                coverage,
                bears: holds,
                on_focus: on_focus || (head_covers_all && in_text > 0.0),
            });
        }
    }
    picks.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.passage.cmp(&b.passage))
            .then(a.unit.index.cmp(&b.unit.index))
    });
    let answered = picks.first().is_some_and(|p| answers(reading, p));
    Finding { picks, answered }
}

/// Share of the question's consecutive topic-word pairs that the heading
/// holds in the same order: "convert a string to a number" is not "convert a
/// number to a string".
fn in_order(focus: &[String], title: &[String]) -> f32 {
    if focus.len() < 2 {
        return 0.0;
    }
    let pairs: Vec<(&String, &String)> = focus.iter().zip(focus.iter().skip(1)).collect();
    let theirs: Vec<(&String, &String)> = title.iter().zip(title.iter().skip(1)).collect();
    pairs.iter().filter(|p| theirs.contains(p)).count() as f32 / pairs.len() as f32
}

/// "Python is an interpreted ... language": a sentence whose subject is the
/// thing asked about and whose verb defines it.
fn defines(text: &str, focus: &[String]) -> bool {
    let words = keywords(text);
    let lower = text.to_lowercase();
    words.first().is_some_and(|w| focus.contains(w))
        && [" is ", " are ", " means "]
            .iter()
            .any(|v| lower.contains(v))
}

/// The sufficiency test for one unit: about the question's topic, holding
/// some of its words itself, and of the kind asked for.
fn answers(reading: &Reading, p: &Pick) -> bool {
    let kind_ok = match reading.wants {
        // What these ask for has no surface mark to look for.
        Wants::Other | Wants::Definition | Wants::Procedure | Wants::Place => true,
        _ => p.bears,
    };
    let focus_ok = reading.focus.is_empty() || p.on_focus || p.coverage >= 0.99;
    p.coverage >= COVERAGE_NEEDED && kind_ok && focus_ok
}

/// A unit as people read it.
fn shown(unit: &Unit) -> String {
    match unit.kind {
        UnitKind::TableRow => {
            let header: Vec<&str> = unit.context.split(" | ").collect();
            let cells: Vec<&str> = unit.text.split(" | ").collect();
            if header.len() == cells.len() && !unit.context.is_empty() {
                header
                    .iter()
                    .zip(&cells)
                    .map(|(h, c)| format!("{h}: {c}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            } else {
                unit.text.clone()
            }
        }
        UnitKind::Code if !unit.text.contains('\n') => format!("`{}`", unit.text.trim()),
        UnitKind::Code => {
            let lines: Vec<&str> = unit.text.lines().take(6).collect();
            format!("\n```\n{}\n```\n", lines.join("\n"))
        }
        UnitKind::Sentence | UnitKind::ListItem => unit.text.clone(),
    }
}

/// The clause of a long sentence that answers, as a sentence of its own:
/// "Acknowledge within 15 minutes; escalate after 30 minutes." asked how
/// quickly to acknowledge gives "Acknowledge within 15 minutes."
fn clause(reading: &Reading, text: &str) -> Option<String> {
    if text.chars().count() <= LONG_LEAD {
        return None;
    }
    let parts: Vec<&str> = text.split("; ").collect();
    if parts.len() < 2 {
        return None;
    }
    let words: Vec<&String> = reading.focus.iter().chain(&reading.carried).collect();
    let best = parts
        .iter()
        .filter(|p| p.chars().count() >= 20)
        .filter(|p| reading.wants == Wants::Other || bears(reading.wants, p, ""))
        .max_by_key(|p| {
            let have = keywords(p);
            words.iter().filter(|w| have.contains(w)).count()
        })?;
    let body = best.trim().trim_end_matches(['.', ';', ':', ',']);
    let mut chars = body.chars();
    let first = chars.next()?;
    Some(format!("{}{}.", first.to_uppercase(), chars.as_str()))
}

fn cite(passages: &[Passage], citations: &mut Vec<Citation>, pi: usize) -> u32 {
    let p = &passages[pi];
    if let Some(c) = citations
        .iter()
        .find(|c| c.path == p.path && c.line_start == p.line_start)
    {
        return c.n;
    }
    let n = citations.len() as u32 + 1;
    citations.push(Citation {
        n,
        path: p.path.clone(),
        heading: p.heading.clone(),
        line_start: p.line_start,
        line_end: p.line_end,
    });
    n
}

/// The answer: one or two units that answer, each with its citation marker;
/// a unit cut to its answering clause is followed by the whole sentence as
/// the supporting quote. Only the passages used are cited.
pub fn compose(
    reading: &Reading,
    finding: &Finding,
    passages: &[Passage],
) -> (String, Vec<Citation>) {
    let Some(best) = finding.picks.first() else {
        return (String::new(), vec![]);
    };
    let mut used = vec![best];
    // "There are several advantages." needs the sentence after it.
    let follows = finding.picks.iter().find(|p| {
        p.passage == best.passage
            && p.unit.index == best.unit.index + 1
            && p.unit.kind != UnitKind::Code
            && p.unit.text.chars().count() <= 260
    });
    if let Some(next) = follows.filter(|_| best.unit.text.chars().count() < 60) {
        used.push(next);
    } else
    // A second unit joins when it carries on the first (the next sentence or
    // item of the same passage) or answers a part of the question the first
    // leaves out, and the answer stays short.
    if let Some(second) = finding.picks.iter().skip(1).find(|p| {
        let next_to = p.passage == best.passage && p.unit.index == best.unit.index + 1;
        let best_words: HashSet<String> = keywords(&best.unit.text).into_iter().collect();
        let adds = reading
            .focus
            .iter()
            .any(|k| !best_words.contains(k) && keywords(&p.unit.text).contains(k));
        (next_to || adds)
            && p.score >= 0.8 * best.score
            && answers(reading, p)
            && best.unit.text.chars().count() + p.unit.text.chars().count() <= 220
    }) {
        used.push(second);
    }
    let mut citations = Vec::new();
    let mut lead: Vec<String> = Vec::new();
    let mut quotes: Vec<String> = Vec::new();
    for pick in used {
        let n = cite(passages, &mut citations, pick.passage);
        let text = shown(&pick.unit);
        match clause(reading, &text) {
            Some(short) => {
                lead.push(format!("{short} [{n}]"));
                quotes.push(format!("[{n}] “{text}”"));
            }
            None => lead.push(format!("{} [{n}]", text.trim_end())),
        }
    }
    let mut out = lead.join(" ");
    if !quotes.is_empty() {
        out.push_str("\n\n");
        out.push_str(&quotes.join("\n"));
    }
    (out, citations)
}

/// When nothing answers: one sentence saying so and what was searched, then
/// the closest units (whole, cited), never anything else.
pub fn not_found(
    reading: &Reading,
    finding: &Finding,
    passages: &[Passage],
    searched: &[String],
) -> (String, Vec<Citation>) {
    let searched = match searched {
        [] => "I did not search it".to_string(),
        [one] => format!("I searched it for “{one}”"),
        many => format!(
            "I searched it for {}",
            many.iter()
                .map(|q| format!("“{q}”"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut text = format!(
        "The workspace does not say: nothing in it answers “{}” ({searched}).",
        reading.query.trim()
    );
    let mut citations = Vec::new();
    let mut closest = Vec::new();
    let mut seen = HashSet::new();
    for pick in finding.picks.iter().filter(|p| p.coverage > 0.0) {
        if !seen.insert(pick.passage) || pick.unit.kind == UnitKind::Code {
            continue;
        }
        let n = cite(passages, &mut citations, pick.passage);
        closest.push(format!("- {} [{n}]", shown(&pick.unit)));
        if closest.len() == 2 {
            break;
        }
    }
    if !closest.is_empty() {
        text.push_str("\n\nThe closest passages:\n");
        text.push_str(&closest.join("\n"));
    }
    (text, citations)
}

#[cfg(test)]
mod tests {
    use super::super::followup::read;
    use super::*;

    fn passage(path: &str, heading: &str, text: &str) -> Passage {
        Passage {
            path: path.into(),
            heading: heading.into(),
            line_start: 1,
            line_end: 9,
            text: text.into(),
            score: 1.0,
        }
    }

    fn ledger() -> Vec<Passage> {
        vec![
            passage(
                "ledger.md",
                "Ledger",
                "The ledger is append-only and lives in the vault. Entries are signed.",
            ),
            passage(
                "ledger.md",
                "Ledger > Why the ledger is append-only",
                "Auditors must be able to replay every change, so nothing is ever rewritten.",
            ),
            passage(
                "keys.md",
                "Keys",
                "New keys use ed25519; old keys used RSA-4096 and stay valid until they expire.",
            ),
        ]
    }

    #[test]
    fn a_why_question_is_answered_from_the_why_section() {
        let ps = ledger();
        let r = read("Why is the ledger append-only?", &[]);
        let f = find(&r, &ps);
        assert!(f.answered, "{:?}", f.picks.first());
        let (text, cites) = compose(&r, &f, &ps);
        assert!(
            text.starts_with("Auditors must be able to replay"),
            "{text}"
        );
        assert_eq!(cites.len(), 1, "{cites:?}");
        assert_eq!(cites[0].heading, "Ledger > Why the ledger is append-only");
    }

    #[test]
    fn the_sentence_holding_the_fact_is_sufficient() {
        let ps = ledger();
        let r = read("Which algorithm is used for new keys?", &[]);
        let f = find(&r, &ps);
        assert!(f.answered, "{:?}", f.picks.first());
        let (text, _) = compose(&r, &f, &ps);
        assert!(text.contains("ed25519"), "{text}");
    }

    #[test]
    fn an_unanswered_question_says_so_and_invents_nothing() {
        let ps = ledger();
        let r = read("Who approves the travel budget?", &[]);
        let f = find(&r, &ps);
        assert!(!f.answered, "{:?}", f.picks.first());
        let (text, _) = not_found(&r, &f, &ps, &["approves travel budget".into()]);
        assert!(text.starts_with("The workspace does not say"), "{text}");
        assert!(text.contains("“approves travel budget”"), "{text}");
    }

    #[test]
    fn a_recent_finding_is_reused_only_for_the_same_reading_and_passages() {
        let ps = ledger();
        let r = read("Which algorithm is used for new keys?", &[]);
        let first = find_recent(&r, &ps);
        let again = find_recent(&r, &ps);
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same inputs are not analysed twice"
        );
        assert_eq!(first.answered, find(&r, &ps).answered);

        // Any change to what `find` reads is a different finding.
        let mut changed = ps.clone();
        changed[2].text = "New keys use the vault's HSM.".into();
        let other = find_recent(&r, &changed);
        assert!(!Arc::ptr_eq(&first, &other));
        let mut rescored = ps.clone();
        rescored[0].score = 0.5;
        assert!(!Arc::ptr_eq(&first, &find_recent(&r, &rescored)));
        let asked_otherwise = read("Why is the ledger append-only?", &[]);
        let why = find_recent(&asked_otherwise, &ps);
        assert!(!Arc::ptr_eq(&first, &why));
        assert!(why.answered);
        assert_eq!(why.picks.len(), find(&asked_otherwise, &ps).picks.len());
    }
}
