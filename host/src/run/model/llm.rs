//! The host's thinking done by a chat model (OpenAI-compatible or Anthropic, via
//! `capstan-models`). Each step asks for one JSON object; output that does not
//! parse (bad JSON, unknown fields, an unknown action) is sent back with the
//! parse error, a bounded number of times, before the run fails with
//! `invalid-model-output`. Plan task kinds are not judged here: an unknown kind
//! is the orchestrator's `unsupported-capability`, per the seeds.

use std::sync::Arc;

use async_trait::async_trait;
use capstan_models::{ChatRequest, Message, ModelError, ModelProvider, PriceTable, StreamEvent};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{FinalInput, HostContext, HostModel, ModelFailure, Step, TokenSink};
use capstan_protocol::{Citation, PlanTask, Usage};

pub struct LlmModel {
    pub provider: Arc<dyn ModelProvider>,
    pub model: String,
    pub prices: PriceTable,
    /// Corrections sent back for malformed output before giving up.
    pub max_corrections: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepReply {
    action: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    variants: Vec<String>,
    #[serde(default)]
    tasks: Vec<PlanTask>,
}

fn step_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["action", "reason"],
        "properties": {
            "action": {"enum": ["retrieve", "answer", "plan"]},
            "reason": {"type": "string"},
            "query": {"type": "string"},
            "variants": {"type": "array", "items": {"type": "string"}},
            "tasks": {"type": "array", "items": {
                "type": "object",
                "required": ["id", "kind", "operation", "input"],
                "properties": {
                    "id": {"type": "string"}, "kind": {"type": "string"}, "operation": {"type": "string"},
                    "input": {"type": "object"}, "depends_on": {"type": "array", "items": {"type": "string"}},
                    "title": {"type": "string"}
                }
            }}
        }
    })
}

const STEP_SYSTEM: &str = "You are the host of Capstan, an assistant bound to a user's workspace folder. \
At each step choose exactly one action and reply with ONE JSON object, nothing else:\n\
- {\"action\":\"retrieve\",\"reason\":...,\"query\":...,\"variants\":[...]} to search the workspace knowledge base when the context is not sufficient;\n\
- {\"action\":\"answer\",\"reason\":...} when you can answer from the context (no local action needed);\n\
- {\"action\":\"plan\",\"reason\":...,\"tasks\":[{\"id\":\"t1\",\"kind\":...,\"operation\":...,\"input\":{...},\"depends_on\":[],\"title\":...}]} when local actions are needed.\n\
Use only the capability kinds, operations and input schemas listed. Never plan writing-workflow tasks.";

/// Take the first JSON object out of a reply (models wrap it in prose or fences).
fn extract_json(text: &str) -> Option<&str> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    (end > start).then(|| &text[start..=end])
}

pub fn parse_step(text: &str) -> Result<Step, String> {
    let raw = extract_json(text).ok_or("the reply holds no JSON object")?;
    let reply: StepReply = serde_json::from_str(raw).map_err(|e| format!("invalid JSON: {e}"))?;
    match reply.action.as_str() {
        "retrieve" => {
            let query = reply
                .query
                .filter(|q| !q.trim().is_empty())
                .ok_or("`retrieve` needs a non-empty `query`")?;
            Ok(Step::Retrieve {
                query,
                variants: reply.variants,
                reason: reply.reason,
                rewritten_from: None,
            })
        }
        "answer" => Ok(Step::Answer {
            reason: reply.reason,
        }),
        "plan" => {
            if reply.tasks.is_empty() {
                return Err("`plan` needs at least one task".into());
            }
            Ok(Step::Plan {
                tasks: reply.tasks,
                reason: reply.reason,
            })
        }
        other => Err(format!(
            "unknown action `{other}`; use retrieve, answer or plan"
        )),
    }
}

fn context_prompt(ctx: &HostContext) -> String {
    let mut p = String::new();
    if !ctx.summary.is_empty() {
        p.push_str(&format!("Session summary:\n{}\n\n", ctx.summary));
    }
    if !ctx.history.is_empty() {
        p.push_str("Recent turns:\n");
        for t in &ctx.history {
            p.push_str(&format!("{}: {}\n", t.role, t.content));
        }
        p.push('\n');
    }
    p.push_str(&format!(
        "Workspace: {}\n",
        ctx.workspace
            .as_deref()
            .unwrap_or("none bound (nothing can run and the knowledge base is unavailable)")
    ));
    p.push_str(&format!(
        "Capabilities: {}\n",
        serde_json::to_string(&ctx.capabilities).unwrap_or_default()
    ));
    p.push_str(&format!(
        "Retrievals so far: {} (last sufficient: {})\n",
        ctx.retrievals,
        ctx.last_retrieval_sufficient
            .map(|b| b.to_string())
            .unwrap_or_else(|| "n/a".into())
    ));
    if !ctx.passages.is_empty() {
        p.push_str("Retrieved passages:\n");
        for (i, ps) in ctx.passages.iter().enumerate() {
            let text: String = ps.text.chars().take(1500).collect();
            p.push_str(&format!(
                "[{}] {} › {} (lines {}-{})\n{}\n\n",
                i + 1,
                ps.path,
                ps.heading,
                ps.line_start,
                ps.line_end,
                text
            ));
        }
    }
    p.push_str(&format!("\nUser message: {}\n", ctx.message));
    p
}

impl LlmModel {
    /// A completion's usage, priced.
    fn usage(&self, u: Usage) -> Usage {
        Usage {
            cost_usd: self.prices.cost(&self.model, &u),
            ..u
        }
    }

    fn request(&self, messages: Vec<Message>, schema: Option<serde_json::Value>) -> ChatRequest {
        let mut req = ChatRequest::new(self.model.clone(), messages);
        req.json_schema = schema;
        req
    }
}

fn failure(e: ModelError) -> ModelFailure {
    match e {
        ModelError::Cancelled => ModelFailure::Cancelled,
        other => ModelFailure::Unavailable(other.to_string()),
    }
}

#[async_trait]
impl HostModel for LlmModel {
    fn id(&self) -> String {
        self.model.clone()
    }

    async fn step(
        &self,
        ctx: &HostContext,
        cancel: &CancellationToken,
    ) -> Result<(Step, Usage), ModelFailure> {
        let mut messages = vec![
            Message::system(STEP_SYSTEM),
            Message::user(context_prompt(ctx)),
        ];
        if let Some(feedback) = &ctx.feedback {
            messages.push(Message::user(feedback.clone()));
        }
        let mut usage = Usage::default();
        let mut last_error = String::new();
        for _ in 0..=self.max_corrections {
            let req = self.request(messages.clone(), Some(step_schema()));
            let done = self
                .provider
                .complete(req, cancel.clone())
                .await
                .map_err(failure)?;
            usage.add(&self.usage(done.usage));
            match parse_step(&done.text) {
                Ok(step) => return Ok((step, usage)),
                Err(e) => {
                    last_error = e.clone();
                    messages.push(Message::assistant(done.text));
                    messages.push(Message::user(format!(
                        "That reply could not be used: {e}. Reply again with one JSON object as specified, nothing else."
                    )));
                }
            }
        }
        Err(ModelFailure::Malformed(
            format!(
                "after {} corrections the model still did not send a usable step: {last_error}",
                self.max_corrections
            ),
            usage,
        ))
    }

    async fn finalize(
        &self,
        input: &FinalInput,
        cancel: &CancellationToken,
        on_token: TokenSink<'_>,
    ) -> Result<(String, Vec<Citation>, Usage), ModelFailure> {
        let mut prompt = context_prompt(&input.ctx);
        if !input.reports.is_empty() {
            prompt.push_str(&format!(
                "\nTask results:\n{}\n",
                serde_json::to_string_pretty(&input.reports).unwrap_or_default()
            ));
        }
        if let Some((reason, message)) = &input.failure {
            prompt.push_str(&format!(
                "\nThe run could not complete ({reason}): {message}. Say so plainly.\n"
            ));
        }
        let system = "Write the final answer for the user. Cite retrieved passages as [n] where you use them. \
                      Report what tasks did and what failed, plainly. Be concise.";
        let req = self.request(vec![Message::system(system), Message::user(prompt)], None);
        let mut stream = self
            .provider
            .stream(req, cancel.clone())
            .await
            .map_err(failure)?;
        let mut text = String::new();
        let mut usage = Usage::default();
        while let Some(event) = stream.next().await {
            match event.map_err(failure)? {
                StreamEvent::Delta(t) => {
                    on_token(&t);
                    text.push_str(&t);
                }
                StreamEvent::Usage(u) => usage.add(&self.usage(u)),
                StreamEvent::Done { .. } => break,
            }
        }
        let citations = input
            .ctx
            .passages
            .iter()
            .enumerate()
            .filter(|(i, _)| text.contains(&format!("[{}]", i + 1)))
            .map(|(i, p)| Citation {
                n: i as u32 + 1,
                path: p.path.clone(),
                heading: p.heading.clone(),
                line_start: p.line_start,
                line_end: p.line_end,
            })
            .collect();
        Ok((text, citations, usage))
    }

    async fn sample(
        &self,
        req: &crate::plugins::context::SampleRequest,
        cancel: &CancellationToken,
    ) -> Result<(String, bool, Usage), ModelFailure> {
        let mut messages = Vec::new();
        if let Some(system) = &req.system {
            messages.push(Message::system(system.clone()));
        }
        for (role, text) in &req.messages {
            messages.push(if role == "assistant" {
                Message::assistant(text.clone())
            } else {
                Message::user(text.clone())
            });
        }
        let mut chat = self.request(messages, None);
        chat.max_tokens = Some(req.max_tokens.max(1));
        chat.temperature = req.temperature;
        let done = self
            .provider
            .complete(chat, cancel.clone())
            .await
            .map_err(failure)?;
        let usage = self.usage(done.usage);
        let at_limit = usage.output_tokens >= u64::from(req.max_tokens.max(1));
        Ok((done.text, at_limit, usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_steps_and_explains_bad_ones() {
        assert!(matches!(
            parse_step(r#"{"action":"answer","reason":"ok"}"#),
            Ok(Step::Answer { .. })
        ));
        assert!(matches!(
            parse_step(
                "```json\n{\"action\":\"retrieve\",\"reason\":\"r\",\"query\":\"keys\"}\n```"
            ),
            Ok(Step::Retrieve { .. })
        ));
        assert!(parse_step("no json here").unwrap_err().contains("no JSON"));
        assert!(
            parse_step(r#"{"action":"dance","reason":""}"#)
                .unwrap_err()
                .contains("unknown action")
        );
        assert!(
            parse_step(r#"{"action":"answer","reason":"","mood":"happy"}"#)
                .unwrap_err()
                .contains("mood")
        );
        assert!(
            parse_step(r#"{"action":"plan","reason":""}"#)
                .unwrap_err()
                .contains("at least one task")
        );
    }
}
