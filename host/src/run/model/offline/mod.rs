//! The embedded offline model: deterministic, no network, so a fresh install
//! answers questions about a workspace at once.
//!
//! - Plans `terminal_exec` when the message asks to run an explicit command (in
//!   backticks, or after the word "run"), `docx` / `xlsx` when it names such a file.
//! - Otherwise retrieves: the question (read together with the previous one
//!   when it leans on it, see [`followup`]), then its topic words, then each
//!   word, until a retrieved passage answers it (the orchestrator stops it after
//!   three attempts).
//! - Answers with the sentence, list item or table row that answers the
//!   question ([`answer`]), cited; when none does, says so and what it searched.

mod answer;
mod followup;
mod question;
mod segment;
mod words;

use async_trait::async_trait;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{FinalInput, HostContext, HostModel, ModelFailure, Step, TaskReport, TokenSink};
use capstan_protocol::{Citation, FailureReason, PlanTask, TaskStatus, Usage, estimate_tokens};

pub struct OfflineModel;

pub const ID: &str = "capstan-offline";

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
            operation: crate::plugins::mcp_client::OPERATION.into(),
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
            reason: "a retrieved passage answers the question".into(),
        };
    }
    let reading = followup::read(&ctx.message, &ctx.history);
    let (query, variants) = search(&reading, ctx.retrievals);
    let reason = if ctx.retrievals == 0 {
        "an informational question: search the knowledge base".to_string()
    } else {
        format!(
            "no passage from retrieval {} answers the question: broaden the query",
            ctx.retrievals
        )
    };
    Step::Retrieve {
        query,
        variants,
        reason,
        rewritten_from: reading.leaned.then(|| ctx.message.clone()),
    }
}

/// The query and variants of retrieval number `done + 1`: the question as read,
/// then its topic words, then any of them. Words as written: the feed shows
/// queries to people.
fn search(reading: &followup::Reading, done: u32) -> (String, Vec<String>) {
    let topic: Vec<&String> = reading.focus.iter().chain(&reading.carried).collect();
    let mut shown: Vec<String> = words::content_words(&reading.query)
        .into_iter()
        .filter(|w| topic.contains(&&words::stem(w)))
        .collect();
    if shown.is_empty() {
        shown = words::content_words(&reading.query);
    }
    if shown.is_empty() {
        return (reading.query.clone(), vec![]);
    }
    match done {
        0 => (reading.query.clone(), vec![shown.join(" ")]),
        1 => (shown.join(" "), vec![shown.join(" OR ")]),
        _ => (shown.join(" OR "), shown),
    }
}

/// The queries the first `done` retrievals used, for saying what was searched.
fn searched(reading: &followup::Reading, done: u32) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for attempt in 0..done {
        let (query, _) = search(reading, attempt);
        if !out.contains(&query) {
            out.push(query);
        }
    }
    out
}

fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn report_task(r: &TaskReport) -> String {
    let mut out = String::new();
    match r.status {
        TaskStatus::Completed => out.push_str(&format!("✓ {}: {}\n", r.task.title, r.summary)),
        TaskStatus::Skipped => {
            out.push_str(&format!("– {}: skipped ({})\n", r.task.title, r.summary))
        }
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
    let reading = followup::read(&ctx.message, &ctx.history);
    let finding = answer::find_recent(&reading, &ctx.passages);
    let not_found = || {
        answer::not_found(
            &reading,
            &finding,
            &ctx.passages,
            &searched(&reading, ctx.retrievals),
        )
    };
    match &input.failure {
        // Retrieval never found an answer: that is the answer.
        Some((FailureReason::RetryLimit, _)) => return not_found(),
        Some((reason, message)) => {
            let (closest, citations) = not_found();
            let text = format!("I could not complete this: {message} ({reason}).");
            if ctx.passages.is_empty() {
                return (text, vec![]);
            }
            let tail = closest.split_once("\n\n").map(|(_, t)| t).unwrap_or("");
            return (
                format!("{text}\n\n{tail}").trim_end().to_string(),
                citations,
            );
        }
        None => {}
    }
    if ctx.workspace.is_none() {
        return (
            "No workspace is bound, so I have nothing to search. Pass --workspace DIR to answer from a folder's \
             documents, or configure a model in capstan.toml."
                .into(),
            vec![],
        );
    }
    if finding.answered {
        answer::compose(&reading, &finding, &ctx.passages)
    } else {
        not_found()
    }
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

    /// A passage is enough when one of its sentences answers the question,
    /// whatever share of the query words retrieval saw in it.
    fn judge_sufficiency(&self, ctx: &HostContext) -> Option<bool> {
        let reading = followup::read(&ctx.message, &ctx.history);
        Some(answer::find_recent(&reading, &ctx.passages).answered)
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

    /// No free text to generate: a fixed reply that names what was read (the
    /// last message's size and its first words), cut at `max_tokens`, so a
    /// server's sampling round-trip works, and is testable, with no paid API.
    async fn sample(
        &self,
        req: &crate::plugins::context::SampleRequest,
        cancel: &CancellationToken,
    ) -> Result<(String, bool, Usage), ModelFailure> {
        if cancel.is_cancelled() {
            return Err(ModelFailure::Cancelled);
        }
        let last = req.messages.last().map(|(_, t)| t.as_str()).unwrap_or("");
        let opening: String = last
            .split_whitespace()
            .take(8)
            .collect::<Vec<_>>()
            .join(" ");
        let full = format!(
            "Capstan's offline model read a prompt of {} characters (\"{opening}\") and writes no free text; \
             configure [model] in capstan.toml for real answers.",
            req.chars()
        );
        let limit = (req.max_tokens as usize).max(1) * 4;
        let cut = full.chars().count() > limit;
        let text: String = full.chars().take(limit).collect();
        let usage = Usage {
            input_tokens: capstan_protocol::tokens_for_chars(req.chars()),
            output_tokens: estimate_tokens(&text),
            estimated: true,
            cost_usd: Some(0.0),
        };
        Ok((text, cut, usage))
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
        let tool = |kind: &str| crate::run::model::CapabilitySummary {
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
