//! What an external MCP server asks of Capstan mid-call, answered through the
//! person: `elicitation/create` becomes an approval (`approval.requested` /
//! `approval.decided`, in the CLI feed, the web chat and AG-UI like any
//! other), and `sampling/createMessage` is answered by the run's model after
//! an approval that names the server and the prompt's size, under the run's
//! budget.
//!
//! An approval carries a yes or a no, not typed-in values, so a form
//! elicitation is answered only when approving says everything: each field
//! gets its `default`, a boolean without one gets `true`, a field nobody must
//! fill is left out. A form that requires a field none of these can fill is
//! declined at once, with a log line and an activity naming the fields. The
//! approval shows the exact answer that approving sends. A URL elicitation
//! shows the link; approving tells the server the person will open it
//! (Capstan opens nothing).
//!
//! The server's words are untrusted: they reach events and logs only through
//! [`crate::term::sanitize`] and cut to a bounded length.

// Sampling is deprecated by the 2026-07-28 revision (SEP-2577); the servers
// Capstan uses speak 2025-11-25 or older and ask for it.
#![allow(deprecated)]

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationAction, ErrorCode, SamplingMessage,
};
use serde_json::{Map, Value};

use super::ClientSide;
use crate::plugins::bindings::{approval, types};
use crate::plugins::context::{RunContext, SampleRequest, TaskScope};
use capstan_protocol::Event;

/// Longest stretch of a server's text shown in an approval.
const SHOWN_CHARS: usize = 400;

/// The MCP error code for a sampling request the person rejected.
const USER_REJECTED: i32 = -1;

/// A server's text, safe for a terminal and bounded.
fn shown(text: &str) -> String {
    let clean = crate::term::sanitize(text);
    let mut out: String = clean.chars().take(SHOWN_CHARS).collect();
    if clean.chars().count() > SHOWN_CHARS {
        out.push('…');
    }
    out
}

fn decline() -> ElicitResult {
    ElicitResult::new(ElicitationAction::Decline)
}

/// Say why Capstan answered without asking: in the log and, when there is
/// a run, in its feed.
fn note(server: &str, run: Option<(&str, &RunContext)>, kind: &str, message: String) {
    tracing::warn!(target: "capstan::mcp_server", server = %server, "{message}");
    if let Some((task_id, run)) = run {
        run.events.emit(Event::Activity {
            task_id: Some(task_id.to_string()),
            kind: kind.into(),
            message,
            data: Value::Null,
        });
    }
}

/// The answer approving a form sends: defaults, `true` for booleans, and
/// the names of required fields an approval cannot fill.
pub fn confirm_answer(schema: &Value) -> Result<Map<String, Value>, Vec<String>> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut answer = Map::new();
    let mut missing = Vec::new();
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            if let Some(default) = property.get("default") {
                answer.insert(name.clone(), default.clone());
            } else if property.get("type").and_then(Value::as_str) == Some("boolean") {
                answer.insert(name.clone(), Value::Bool(true));
            } else if required.contains(&name.as_str()) {
                missing.push(name.clone());
            }
        }
    }
    // A required name the properties do not describe cannot be filled either.
    for name in required {
        if !answer.contains_key(name) && !missing.iter().any(|m| m == name) {
            missing.push(name.to_string());
        }
    }
    if missing.is_empty() {
        Ok(answer)
    } else {
        Err(missing)
    }
}

fn scope(server: &str, task_id: String, run: RunContext) -> TaskScope {
    TaskScope {
        task_id,
        plugin: format!("mcp:{server}"),
        run,
        resource_limit: Default::default(),
    }
}

/// `elicitation/create`: an approval; approved → accept (with the form's
/// answer), denied or expired → decline, aborted → cancel.
pub(super) async fn elicit(side: &ClientSide, request: ElicitRequestParams) -> ElicitResult {
    let server = side.name.as_str();
    let (task_id, run) = match side.asker() {
        Ok(found) => found,
        Err(why) => {
            note(
                server,
                None,
                "mcp.elicitation",
                format!("MCP server `{server}` asked for input, declined: {why}"),
            );
            return decline();
        }
    };
    let Some(approver) = run.services.approval.clone() else {
        note(
            server,
            Some((&task_id, &run)),
            "mcp.elicitation",
            format!("MCP server `{server}` asked for input, declined: nobody can be asked here"),
        );
        return decline();
    };
    let (detail, reasons, content) = match &request {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => {
            let schema = serde_json::to_value(requested_schema).unwrap_or_default();
            match confirm_answer(&schema) {
                Ok(answer) => {
                    let reason = if answer.is_empty() {
                        "approving accepts and sends no fields".to_string()
                    } else {
                        format!(
                            "approving accepts and sends {}",
                            shown(&Value::Object(answer.clone()).to_string())
                        )
                    };
                    (
                        format!("MCP server `{server}` asks: {}", shown(message)),
                        vec![reason],
                        Some(answer),
                    )
                }
                Err(missing) => {
                    note(
                        server,
                        Some((&task_id, &run)),
                        "mcp.elicitation",
                        format!(
                            "MCP server `{server}` asked for input that needs typed values ({}), \
                             which an approval cannot give: declined. Its question: {}",
                            shown(&missing.join(", ")),
                            shown(message)
                        ),
                    );
                    return decline();
                }
            }
        }
        ElicitRequestParams::UrlElicitationParams { message, url, .. } => (
            format!(
                "MCP server `{server}` asks you to open {}: {}",
                shown(url),
                shown(message)
            ),
            vec!["approving tells the server you will open the link; Capstan opens nothing".into()],
            None,
        ),
        _ => {
            note(
                server,
                Some((&task_id, &run)),
                "mcp.elicitation",
                format!(
                    "MCP server `{server}` asked for input in a mode Capstan does not know: declined"
                ),
            );
            return decline();
        }
    };
    let ask = approval::ApprovalRequest {
        action: "mcp.elicitation".into(),
        detail,
        risk: types::Risk::Unknown,
        reasons,
    };
    match approver.request(&scope(server, task_id, run), ask).await {
        approval::Decision::Approved | approval::Decision::ApprovedForSession => {
            let result = ElicitResult::new(ElicitationAction::Accept);
            match content {
                Some(answer) => result.with_content(Value::Object(answer)),
                None => result,
            }
        }
        approval::Decision::Aborted => ElicitResult::new(ElicitationAction::Cancel),
        approval::Decision::Denied => decline(),
    }
}

/// The text of a sampling message; other content is named, not sent.
fn message_text(message: &SamplingMessage) -> String {
    let value = serde_json::to_value(&message.content).unwrap_or_default();
    let blocks = match value {
        Value::Array(blocks) => blocks,
        one => vec![one],
    };
    blocks
        .iter()
        .map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => b
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            Some(other) => format!("[{other} content left out]"),
            None => String::new(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `sampling/createMessage`: refused over budget, then an approval, then the
/// run's model answers.
pub(super) async fn sample(
    side: &ClientSide,
    params: CreateMessageRequestParams,
) -> Result<CreateMessageResult, McpError> {
    let server = side.name.as_str();
    let refuse = |why: String| McpError::invalid_request(why, None);
    // Says why in the log (and the run's feed, once the run is known) and
    // refuses the server.
    let refused = |run: Option<(&str, &RunContext)>, why: &str| {
        let message = format!("MCP server `{server}` asked for a model answer, refused: {why}");
        note(server, run, "mcp.sampling", message.clone());
        refuse(message)
    };
    let (task_id, run) = side.asker().map_err(|why| refused(None, &why))?;
    let (Some(sampler), Some(approver)) =
        (run.services.sampler.clone(), run.services.approval.clone())
    else {
        return Err(refused(
            Some((&task_id, &run)),
            "this run offers no model or nobody to approve",
        ));
    };
    let request = SampleRequest {
        system: params.system_prompt.clone(),
        messages: params
            .messages
            .iter()
            .map(|m| {
                let role = serde_json::to_value(&m.role)
                    .ok()
                    .and_then(|r| r.as_str().map(String::from))
                    .unwrap_or_else(|| "user".into());
                (role, message_text(m))
            })
            .collect(),
        max_tokens: params.max_tokens,
        temperature: params.temperature,
    };
    let chars = request.chars();
    let prompt_tokens = capstan_protocol::tokens_for_chars(chars);
    if let Err(why) = sampler.fits(prompt_tokens, u64::from(params.max_tokens)) {
        return Err(refused(Some((&task_id, &run)), &why));
    }
    let opening = request
        .messages
        .last()
        .map(|(_, t)| shown(t))
        .unwrap_or_default();
    let ask = approval::ApprovalRequest {
        action: "mcp.sampling".into(),
        detail: format!(
            "MCP server `{server}` asks Capstan's model ({}) to answer a prompt of {chars} characters \
             (about {prompt_tokens} tokens), with up to {} tokens back",
            sampler.model(),
            params.max_tokens
        ),
        risk: types::Risk::Unknown,
        reasons: vec![format!("the prompt ends with: {opening}")],
    };
    let scope = scope(server, task_id, run);
    match approver.request(&scope, ask).await {
        approval::Decision::Approved | approval::Decision::ApprovedForSession => {}
        approval::Decision::Denied | approval::Decision::Aborted => {
            return Err(McpError::new(
                ErrorCode(USER_REJECTED),
                format!("the person did not approve MCP server `{server}`'s sampling request"),
                None,
            ));
        }
    }
    let answer = sampler
        .sample(&scope, request)
        .await
        .map_err(|e| McpError::internal_error(format!("Capstan's model failed: {e}"), None))?;
    Ok(
        CreateMessageResult::new(SamplingMessage::assistant_text(answer.text), answer.model)
            .with_stop_reason(answer.stop_reason),
    )
}
