//! The embedded offline model: deterministic, no network, so a fresh install
//! answers questions about a workspace at once.
//!
//! - Plans `terminal_exec` when the message asks to run an explicit command (in
//!   backticks, or after the word "run"), `docx` / `xlsx` when it names such a file.
//! - Otherwise retrieves: the message first, then its keywords, then each keyword,
//!   until retrieval says the context is sufficient (the orchestrator stops it
//!   after three attempts).
//! - Answers by extracting the sentences of the retrieved passages that share the
//!   most keywords with the question, each with a numbered citation.

use async_trait::async_trait;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{
    FinalInput, HostContext, HostModel, ModelFailure, Passage, Step, TaskReport, TokenSink,
};
use crate::protocol::{Citation, PlanTask, Usage};

pub struct OfflineModel;

pub const ID: &str = "capstan-offline";

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "in", "is", "it", "me", "my", "of", "on", "or", "our", "should", "so", "that", "the",
    "their", "this", "to", "we", "what", "when", "where", "which", "who", "why", "will", "with",
    "you", "your", "please", "tell", "about", "there", "any", "all", "was", "were", "did", "has",
    "have", "if", "then", "than", "into", "us", "get", "use", "used", "using",
];

/// Lower-cased content words, crudely stemmed so "keys" meets "key".
pub fn keywords(text: &str) -> Vec<String> {
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

/// Commands the message asks to run: `backticked` spans, or what follows "run".
pub fn explicit_commands(message: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut rest = message;
    while let Some(start) = rest.find('`') {
        let after = &rest[start + 1..];
        // ```fenced``` blocks hold one command per line.
        if let Some(body) = after.strip_prefix("``") {
            let Some(end) = body.find("```") else { break };
            let block = &body[..end];
            let block = block
                .split_once('\n')
                .map(|(first, tail)| {
                    if first.trim().chars().all(|c| c.is_alphanumeric()) {
                        tail
                    } else {
                        block
                    }
                })
                .unwrap_or(block);
            commands.extend(
                block
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from),
            );
            rest = &body[end + 3..];
            continue;
        }
        let Some(end) = after.find('`') else { break };
        let cmd = after[..end].trim();
        if !cmd.is_empty() {
            commands.push(cmd.to_string());
        }
        rest = &after[end + 1..];
    }
    if !commands.is_empty() {
        return commands;
    }
    let lower = message.to_lowercase();
    // "How do I run the tests?" asks about running, it does not ask to run.
    if lower.trim_end().ends_with('?') {
        return commands;
    }
    let words: Vec<&str> = lower.split_whitespace().collect();
    if let Some(pos) = words.iter().position(|w| *w == "run" || *w == "execute") {
        let original: Vec<&str> = message.split_whitespace().collect();
        let mut cmd: Vec<&str> = Vec::new();
        for (i, word) in original.iter().enumerate().skip(pos + 1) {
            let lw = words[i];
            if ["and", "then", "to", "so"].contains(&lw) && !cmd.is_empty() {
                break;
            }
            let end = word.ends_with(['.', '?', '!', ',', ';']);
            cmd.push(word.trim_end_matches(['.', '?', '!', ',', ';']));
            if end {
                break;
            }
        }
        let cmd = cmd.join(" ");
        let first = cmd.split_whitespace().next().unwrap_or("").to_lowercase();
        if !cmd.is_empty()
            && ![
                "the", "a", "an", "it", "this", "these", "my", "our", "tests",
            ]
            .contains(&first.as_str())
        {
            commands.push(cmd);
        }
    }
    commands
}

/// Files with one of these extensions the message names.
fn named_files(message: &str, ext: &str) -> Vec<String> {
    message
        .split(|c: char| c.is_whitespace() || "`'\"(),;".contains(c))
        .map(|w| w.trim_end_matches(['.', '?', '!', ':']))
        .filter(|w| w.to_lowercase().ends_with(ext) && w.len() > ext.len())
        .map(String::from)
        .collect()
}

fn has_capability(ctx: &HostContext, kind: &str) -> bool {
    ctx.capabilities.iter().any(|c| c.kind == kind)
}

fn document_task(message: &str, kind: &str, path: String, n: usize) -> PlanTask {
    let lower = message.to_lowercase();
    let (operation, input) =
        if lower.contains("create") || lower.contains("new ") || lower.contains("write ") {
            let content = message
                .split_once(':')
                .map(|(_, c)| c.trim().to_string())
                .unwrap_or_default();
            ("create", json!({"path": path, "markdown": content}))
        } else if lower.contains("info") || lower.contains("how many") || lower.contains("count") {
            ("info", json!({"path": path}))
        } else {
            ("read", json!({"path": path}))
        };
    PlanTask {
        id: format!("t{n}"),
        kind: kind.into(),
        operation: operation.into(),
        input,
        depends_on: vec![],
        title: format!("{operation} {}", input_path(kind, &path)),
    }
}

fn input_path(_kind: &str, path: &str) -> String {
    path.to_string()
}

/// `use mcp:<server>/<tool> with {json}` (or `with key=value ...`): the
/// external MCP tools the message names that the registry has, with their
/// arguments (an empty object when none are given).
fn mcp_tasks(ctx: &HostContext) -> Vec<(String, serde_json::Value)> {
    let message = &ctx.message;
    let mut found = Vec::new();
    for (at, _) in message.match_indices("mcp:") {
        let kind: String = message[at..]
            .chars()
            .take_while(|c| !c.is_whitespace() && !"`'\",;".contains(*c))
            .collect();
        if !has_capability(ctx, &kind) {
            continue;
        }
        let rest = &message[at + kind.len()..];
        let args = rest
            .trim_start()
            .strip_prefix("with")
            .map(str::trim)
            .map(|a| {
                // A JSON object as written; else `key=value` words up to the next `mcp:`.
                serde_json::Deserializer::from_str(a)
                    .into_iter::<serde_json::Value>()
                    .next()
                    .and_then(Result::ok)
                    .filter(serde_json::Value::is_object)
                    .unwrap_or_else(|| {
                        let pairs = a
                            .split_whitespace()
                            .take_while(|w| !w.starts_with("mcp:"))
                            .filter_map(|w| w.split_once('='))
                            .map(|(k, v)| {
                                let v = v.trim_end_matches(',');
                                // Numbers and booleans as such; anything else as text.
                                let value = serde_json::from_str(v)
                                    .unwrap_or_else(|_| json!(v.trim_matches(['"', '\''])));
                                (k.to_string(), value)
                            });
                        serde_json::Value::Object(pairs.collect())
                    })
            })
            .unwrap_or_else(|| json!({}));
        found.push((kind, args));
    }
    found
}

fn plan_for(ctx: &HostContext) -> Option<Vec<PlanTask>> {
    let mut tasks = Vec::new();
    for (kind, input) in mcp_tasks(ctx) {
        tasks.push(PlanTask {
            id: format!("t{}", tasks.len() + 1),
            title: format!("call {kind}"),
            kind,
            operation: crate::mcp::client::OPERATION.into(),
            input,
            depends_on: vec![],
        });
    }
    let commands = explicit_commands(&ctx.message);
    if !commands.is_empty() {
        tasks.push(PlanTask {
            id: format!("t{}", tasks.len() + 1),
            kind: "terminal_exec".into(),
            operation: "run".into(),
            title: format!(
                "run {}",
                commands
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            input: json!({"commands": commands}),
            depends_on: vec![],
        });
    }
    for (ext, kind) in [(".docx", "docx"), (".xlsx", "xlsx")] {
        for path in named_files(&ctx.message, ext) {
            if has_capability(ctx, kind) || tasks.is_empty() {
                let n = tasks.len() + 1;
                tasks.push(document_task(&ctx.message, kind, path, n));
            }
        }
    }
    (!tasks.is_empty()).then_some(tasks)
}

fn decide(ctx: &HostContext) -> Step {
    if let Some(tasks) = plan_for(ctx) {
        return Step::Plan {
            reason: "the message asks for local actions".into(),
            tasks,
        };
    }
    if ctx.workspace.is_none() || !has_capability(ctx, "local_kb_retrieval") {
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

fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn report_task(r: &TaskReport) -> String {
    let mut out = String::new();
    match r.status.as_str() {
        "completed" => out.push_str(&format!("✓ {}: {}\n", r.task.title, r.summary)),
        "skipped" => out.push_str(&format!("– {}: skipped ({})\n", r.task.title, r.summary)),
        _ => out.push_str(&format!(
            "✗ {} failed ({}): {}\n",
            r.task.title,
            r.reason.map(|x| x.to_string()).unwrap_or_default(),
            r.summary
        )),
    }
    if let Some(steps) = r.data.get("steps").and_then(|s| s.as_array()) {
        for step in steps {
            let cmd = step["command"].as_str().unwrap_or("");
            let status = match (step["exit_code"].as_i64(), step["signal"].as_i64()) {
                (Some(code), _) => format!("exit {code}"),
                (None, Some(sig)) => format!("signal {sig}"),
                _ => step["error"].as_str().unwrap_or("did not run").to_string(),
            };
            out.push_str(&format!("  $ {cmd}   ({status})\n"));
            let output = format!(
                "{}{}",
                step["stdout"].as_str().unwrap_or(""),
                step["stderr"].as_str().unwrap_or("")
            );
            if !output.trim().is_empty() {
                for line in tail_lines(&output, 12).lines() {
                    out.push_str(&format!("    {line}\n"));
                }
            }
        }
    } else if let Some(text) = r
        .data
        .get("markdown")
        .or_else(|| r.data.get("text"))
        .and_then(|t| t.as_str())
    {
        for line in tail_lines(text, 40).lines() {
            out.push_str(&format!("    {line}\n"));
        }
    }
    out
}

fn write_final(input: &FinalInput) -> (String, Vec<Citation>) {
    let ctx = &input.ctx;
    if !input.reports.is_empty() {
        let mut text = String::new();
        for r in &input.reports {
            text.push_str(&report_task(r));
        }
        if let Some((reason, message)) = &input.failure {
            text.push_str(&format!("\nThe run stopped: {message} ({reason}).\n"));
        }
        return (text.trim_end().to_string(), vec![]);
    }
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

fn estimate_tokens(s: &str) -> u64 {
    (s.len() as u64).div_ceil(4).max(1)
}

#[async_trait]
impl HostModel for OfflineModel {
    fn id(&self) -> String {
        ID.into()
    }

    /// It plans by kind (`has_capability`), so plugins load only when a task runs.
    fn reads_operation_schemas(&self) -> bool {
        false
    }

    async fn step(
        &self,
        ctx: &HostContext,
        cancel: &CancellationToken,
    ) -> Result<(Step, Usage), ModelFailure> {
        if cancel.is_cancelled() {
            return Err(ModelFailure::Cancelled);
        }
        Ok((decide(ctx), Usage::default()))
    }

    async fn finalize(
        &self,
        input: &FinalInput,
        cancel: &CancellationToken,
        on_token: TokenSink<'_>,
    ) -> Result<(String, Vec<Citation>, Usage), ModelFailure> {
        let (text, citations) = write_final(input);
        // Stream word by word, keeping the whitespace, as a real model would.
        let mut start = 0;
        for (i, c) in text.char_indices() {
            if c.is_whitespace() && i > start {
                if cancel.is_cancelled() {
                    return Err(ModelFailure::Cancelled);
                }
                on_token(&text[start..i]);
                start = i;
            }
        }
        if start < text.len() {
            on_token(&text[start..]);
        }
        let usage = Usage {
            input_tokens: estimate_tokens(&input.ctx.message)
                + input
                    .ctx
                    .passages
                    .iter()
                    .map(|p| estimate_tokens(&p.text))
                    .sum::<u64>(),
            output_tokens: estimate_tokens(&text),
            estimated: true,
            cost_usd: Some(0.0),
        };
        Ok((text, citations, usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_explicit_commands() {
        assert_eq!(
            explicit_commands("run `cargo test` and tell me what failed"),
            ["cargo test"]
        );
        assert_eq!(
            explicit_commands("please `ls -la` then `pwd`"),
            ["ls -la", "pwd"]
        );
        assert_eq!(
            explicit_commands("run make check and report"),
            ["make check"]
        );
        assert_eq!(explicit_commands("Run ls."), ["ls"]);
        assert!(explicit_commands("How do I rotate the signing keys?").is_empty());
        assert!(explicit_commands("how do I run the tests?").is_empty());
    }

    #[test]
    fn keywords_drop_stopwords_and_stem() {
        assert_eq!(
            keywords("How do I rotate the signing keys?"),
            ["rotat", "sign", "key"]
        );
    }

    #[test]
    fn extracts_cited_sentences() {
        let p = Passage {
            path: "ops/keys.md".into(),
            heading: "Rotation".into(),
            line_start: 3,
            line_end: 5,
            text: "Keys are rotated every 90 days. Lunch is at noon.".into(),
            score: 1.0,
        };
        let (text, cites) = extract("when are keys rotated?", &[p]);
        assert!(
            text.contains("Keys are rotated every 90 days. [1]") || text.contains("[1]"),
            "{text}"
        );
        // The sources are the citations' job (the feed prints them once), not the text's.
        assert!(!text.contains("Sources:"), "{text}");
        assert_eq!(cites.len(), 1);
        assert!(
            format!("{:?}", cites[0]).contains("ops/keys.md"),
            "{cites:?}"
        );
    }

    #[test]
    fn plans_documents_and_commands() {
        let ctx = HostContext {
            message: "summarise report.docx".into(),
            ..Default::default()
        };
        let Some(tasks) = plan_for(&ctx) else {
            panic!("no plan")
        };
        assert_eq!(tasks[0].kind, "docx");
        assert_eq!(tasks[0].operation, "read");
    }

    #[test]
    fn plans_the_mcp_tools_a_message_names() {
        let tool = |kind: &str| crate::host_model::CapabilitySummary {
            kind: kind.into(),
            operations: vec![],
        };
        let ctx = HostContext {
            message: r#"use mcp:every/echo with {"message": "hi there"} then mcp:every/get-sum with a=2 b=3, and mcp:ghost/x"#.into(),
            capabilities: vec![tool("mcp:every/echo"), tool("mcp:every/get-sum")],
            ..Default::default()
        };
        let tasks = plan_for(&ctx).expect("a plan");
        let planned: Vec<_> = tasks
            .iter()
            .map(|t| (t.kind.as_str(), t.operation.as_str(), t.input.clone()))
            .collect();
        assert_eq!(
            planned,
            [
                ("mcp:every/echo", "call", json!({"message": "hi there"})),
                ("mcp:every/get-sum", "call", json!({"a": 2, "b": 3})),
            ]
        );
    }
}
