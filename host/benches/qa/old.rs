//! The offline answerer as it was before issue 15 (passages pasted under a
//! "From file › heading [n]:" header), kept only so the eval can print old and
//! new side by side. It answers questions only: the eval plans nothing.

use async_trait::async_trait;
use capstan::run::model::{
    FinalInput, HostContext, HostModel, ModelFailure, Passage, Step, TokenSink,
};
use capstan_protocol::{Citation, Usage};
use tokio_util::sync::CancellationToken;

pub struct OldOfflineModel;

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "in", "is", "it", "me", "my", "of", "on", "or", "our", "should", "so", "that", "the",
    "their", "this", "to", "we", "what", "when", "where", "which", "who", "why", "will", "with",
    "you", "your", "please", "tell", "about", "there", "any", "all", "was", "were", "did", "has",
    "have", "if", "then", "than", "into", "us", "get", "use", "used", "using",
];

/// Lower-cased content words, crudely stemmed so "keys" meets "key".
fn keywords(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric() && c != '_' && c != '-') {
        let w = word.trim_matches('-').to_lowercase();
        if w.len() < 2 || STOPWORDS.contains(&w.as_str()) {
            continue;
        }
        let stem = stem(&w);
        if !out.contains(&stem) {
            out.push(stem);
        }
    }
    out
}

fn stem(w: &str) -> String {
    if let Some(base) = w.strip_suffix("ation").filter(|b| b.len() >= 3) {
        return format!("{base}at");
    }
    for suffix in ["ing", "ed", "es", "e", "s"] {
        if let Some(base) = w.strip_suffix(suffix)
            && base.len() >= 3
        {
            return base.to_string();
        }
    }
    w.to_string()
}

fn decide(ctx: &HostContext) -> Step {
    if ctx.workspace.is_none()
        || !ctx
            .capabilities
            .iter()
            .any(|c| c.kind == "local_kb_retrieval")
    {
        return Step::Answer {
            reason: "no knowledge base to search".into(),
        };
    }
    if ctx.last_retrieval_sufficient == Some(true) {
        return Step::Answer {
            reason: "retrieved context is sufficient".into(),
        };
    }
    let words = keywords(&ctx.message);
    let (query, variants) = match ctx.retrievals {
        0 => (ctx.message.clone(), vec![words.join(" ")]),
        1 => (words.join(" "), vec![words.join(" OR ")]),
        _ => (words.join(" OR "), words.clone()),
    };
    let reason = if ctx.retrievals == 0 {
        "an informational question: search the knowledge base".to_string()
    } else {
        format!(
            "retrieval {} was insufficient: broaden the query",
            ctx.retrievals
        )
    };
    Step::Retrieve {
        query,
        variants,
        reason,
        rewritten_from: None,
    }
}

/// Sentences (and list items) of a passage.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("```") {
            continue;
        }
        let mut current = String::new();
        let chars: Vec<char> = line.chars().collect();
        for (i, c) in chars.iter().enumerate() {
            current.push(*c);
            let boundary =
                matches!(c, '.' | '?' | '!') && chars.get(i + 1).is_none_or(|n| n.is_whitespace());
            if boundary
                && current.trim().len() > 1
                && !current
                    .trim()
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '.')
            {
                out.push(current.trim().to_string());
                current.clear();
            }
        }
        if !current.trim().is_empty() {
            out.push(current.trim().to_string());
        }
    }
    out
}

fn overlap(words: &[String], text: &str) -> usize {
    let have = keywords(text);
    words.iter().filter(|w| have.contains(w)).count()
}

fn mentions(words: &[String], text: &str) -> usize {
    keywords_all(text)
        .iter()
        .filter(|w| words.contains(w))
        .count()
}

/// Every content word, repeats kept.
fn keywords_all(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '_' && c != '-')
        .map(|w| w.trim_matches('-').to_lowercase())
        .filter(|w| w.len() >= 2 && !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

/// The extractive answer: per cited passage, its best sentences in order.
fn extract(message: &str, passages: &[Passage]) -> (String, Vec<Citation>) {
    let words = keywords(message);
    // Distinct keywords matched first (heading and text), then how often the
    // text mentions them; ties keep retrieval order (the sort is stable).
    let mut ranked: Vec<((usize, usize), &Passage)> = passages
        .iter()
        .map(|p| {
            (
                (
                    overlap(&words, &format!("{} {}", p.heading, p.text)),
                    mentions(&words, &p.text),
                ),
                p,
            )
        })
        .filter(|((score, _), _)| *score > 0)
        .collect();
    ranked.sort_by_key(|r| std::cmp::Reverse(r.0));
    let mut text = String::new();
    let mut citations = Vec::new();
    for (_, p) in ranked.into_iter().take(2) {
        let n = citations.len() as u32 + 1;
        let all = sentences(&p.text);
        let chosen: Vec<&String> = if p.text.len() <= 700 {
            all.iter().collect()
        } else {
            let mut scored: Vec<(usize, usize)> = all
                .iter()
                .enumerate()
                .map(|(i, s)| (overlap(&words, s), i))
                .collect();
            scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut keep: Vec<usize> = scored
                .iter()
                .filter(|(s, _)| *s > 0)
                .take(4)
                .map(|(_, i)| *i)
                .collect();
            keep.sort();
            keep.iter().map(|i| &all[*i]).collect()
        };
        if chosen.is_empty() {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        let where_ = if p.heading.is_empty() {
            p.path.clone()
        } else {
            format!("{} › {}", p.path, p.heading)
        };
        text.push_str(&format!("From {where_} [{n}]:\n"));
        for s in chosen {
            text.push_str(s);
            text.push('\n');
        }
        citations.push(Citation {
            n,
            path: p.path.clone(),
            heading: p.heading.clone(),
            line_start: p.line_start,
            line_end: p.line_end,
        });
    }
    // The sources are not repeated in the text: every frontend shows the
    // citations themselves (the terminal after the answer, the web chat as a
    // list), as they do for a real model's answer.
    (text.trim_end().to_string(), citations)
}

fn write_final(input: &FinalInput) -> (String, Vec<Citation>) {
    let ctx = &input.ctx;
    if let Some((reason, message)) = &input.failure {
        let (found, citations) = extract(&ctx.message, &ctx.passages);
        let mut text = format!("I could not complete this: {message} ({reason}).");
        if !found.is_empty() {
            text.push_str("\n\nThe closest passages I found:\n\n");
            text.push_str(&found);
        }
        return (text, citations);
    }
    if ctx.workspace.is_none() {
        return (
            "No workspace is bound, so I have nothing to search. Pass --workspace DIR to answer from a folder's \
             documents, or configure a model in capstan.toml."
                .into(),
            vec![],
        );
    }
    let (text, citations) = extract(&ctx.message, &ctx.passages);
    if text.is_empty() {
        return (
            "I found nothing in the workspace that answers this.".into(),
            vec![],
        );
    }
    (text, citations)
}

#[async_trait]
impl HostModel for OldOfflineModel {
    fn id(&self) -> String {
        "capstan-offline-old".into()
    }

    fn reads_operation_schemas(&self) -> bool {
        false
    }

    async fn step(
        &self,
        ctx: &HostContext,
        _cancel: &CancellationToken,
    ) -> Result<(Step, Usage), ModelFailure> {
        Ok((decide(ctx), Usage::default()))
    }

    async fn finalize(
        &self,
        input: &FinalInput,
        _cancel: &CancellationToken,
        on_token: TokenSink<'_>,
    ) -> Result<(String, Vec<Citation>, Usage), ModelFailure> {
        let (text, citations) = write_final(input);
        on_token(&text);
        Ok((text, citations, Usage::default()))
    }
}
