//! The tools, resources and prompts the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) calls by name, served only with the
//! hidden test flag `capstan mcp --conformance-fixtures`. They exercise the
//! protocol machinery Capstan's real tools use (content types, logging,
//! progress, sampling, elicitation, resources, templates, subscriptions,
//! prompts, completion), so every scenario of the suite is applicable. They
//! touch no file, run nothing and are never offered without the flag.
#![allow(deprecated)] // sampling and logging: see super::logging

use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResult, CompletionInfo, ContentBlock, CreateMessageRequestParams, ElicitRequestParams,
    ElicitationSchema, GetPromptResult, JsonObject, LoggingLevel, ProgressNotificationParam,
    Prompt, PromptArgument, PromptMessage, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate, Role, SamplingMessage, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

use super::logging::SessionLog;

/// A 1x1 red PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A WAV header with no samples (8 kHz, mono, 8 bit).
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

/// The fixture tools, by the names the suite calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FixtureTool {
    SimpleText,
    Image,
    Audio,
    EmbeddedResource,
    MultipleContentTypes,
    WithLogging,
    ErrorHandling,
    WithProgress,
    Sampling,
    Elicitation,
    ElicitationDefaults,
    ElicitationEnums,
    JsonSchema2020,
    Reconnection,
}

const TOOLS: &[(FixtureTool, &str, &str)] = &[
    (
        FixtureTool::SimpleText,
        "test_simple_text",
        "Returns one text block",
    ),
    (
        FixtureTool::Image,
        "test_image_content",
        "Returns a PNG image",
    ),
    (
        FixtureTool::Audio,
        "test_audio_content",
        "Returns a WAV clip",
    ),
    (
        FixtureTool::EmbeddedResource,
        "test_embedded_resource",
        "Returns an embedded text resource",
    ),
    (
        FixtureTool::MultipleContentTypes,
        "test_multiple_content_types",
        "Returns text, image and a resource",
    ),
    (
        FixtureTool::WithLogging,
        "test_tool_with_logging",
        "Sends three log messages while it runs",
    ),
    (
        FixtureTool::ErrorHandling,
        "test_error_handling",
        "Always fails",
    ),
    (
        FixtureTool::WithProgress,
        "test_tool_with_progress",
        "Reports progress 0, 50, 100 of 100",
    ),
    (
        FixtureTool::Sampling,
        "test_sampling",
        "Asks the client's model to answer a prompt",
    ),
    (
        FixtureTool::Elicitation,
        "test_elicitation",
        "Asks the person for a username and email",
    ),
    (
        FixtureTool::ElicitationDefaults,
        "test_elicitation_sep1034_defaults",
        "Asks with defaults for every primitive type",
    ),
    (
        FixtureTool::ElicitationEnums,
        "test_elicitation_sep1330_enums",
        "Asks with every enum form",
    ),
    (
        FixtureTool::JsonSchema2020,
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
    ),
    (
        FixtureTool::Reconnection,
        "test_reconnection",
        "Answers after a short pause",
    ),
];

fn input_schema(tool: FixtureTool) -> Value {
    let string_arg = |name: &str, what: &str| json!({"type": "object", "properties": {name: {"type": "string", "description": what}}, "required": [name]});
    match tool {
        FixtureTool::Sampling => string_arg("prompt", "The prompt to send to the client's model"),
        FixtureTool::Elicitation => string_arg("message", "The message shown to the person"),
        FixtureTool::JsonSchema2020 => json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"type": "object", "properties": {
                "street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": false
        }),
        _ => json!({"type": "object", "properties": {}}),
    }
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

pub fn tools() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|(tool, name, description)| {
            Tool::new(
                *name,
                *description,
                std::sync::Arc::new(object(input_schema(*tool))),
            )
        })
        .collect()
}

fn find_tool(name: &str) -> Option<FixtureTool> {
    TOOLS
        .iter()
        .find(|(_, n, _)| *n == name)
        .map(|(t, _, _)| *t)
}

fn text_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn argument(args: &JsonObject, name: &str) -> Result<String, McpError> {
    args.get(name)
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| McpError::invalid_params(format!("missing string argument `{name}`"), None))
}

/// Call a fixture tool; `None` when `name` is not one.
pub async fn call(
    name: &str,
    args: &JsonObject,
    context: &RequestContext<RoleServer>,
    log: &SessionLog,
) -> Option<Result<CallToolResult, McpError>> {
    let tool = find_tool(name)?;
    Some(call_tool(tool, args, context, log).await)
}

async fn call_tool(
    tool: FixtureTool,
    args: &JsonObject,
    context: &RequestContext<RoleServer>,
    log: &SessionLog,
) -> Result<CallToolResult, McpError> {
    let peer = &context.peer;
    let pause = || tokio::time::sleep(Duration::from_millis(50));
    Ok(match tool {
        FixtureTool::SimpleText => text_result("This is a simple text response for testing."),
        FixtureTool::Image => CallToolResult::success(vec![ContentBlock::image(PNG, "image/png")]),
        FixtureTool::Audio => CallToolResult::success(vec![ContentBlock::audio(WAV, "audio/wav")]),
        FixtureTool::EmbeddedResource => CallToolResult::success(vec![ContentBlock::resource(
            ResourceContents::text("This is an embedded resource content.", "test://embedded-resource"),
        )]),
        FixtureTool::MultipleContentTypes => CallToolResult::success(vec![
            ContentBlock::text("Multiple content types test:"),
            ContentBlock::image(PNG, "image/png"),
            ContentBlock::resource(
                ResourceContents::text(r#"{"test":"data","value":123}"#, "test://mixed-content-resource")
                    .with_mime_type("application/json"),
            ),
        ]),
        FixtureTool::WithLogging => {
            for (i, message) in ["Tool execution started", "Tool processing data", "Tool execution completed"]
                .into_iter()
                .enumerate()
            {
                if i > 0 {
                    pause().await;
                }
                log.send(peer, LoggingLevel::Info, json!(message)).await;
            }
            text_result("Tool with logging executed successfully")
        }
        FixtureTool::ErrorHandling => CallToolResult::error(vec![ContentBlock::text(
            "This tool intentionally returns an error for testing",
        )]),
        FixtureTool::WithProgress => {
            let token = context.meta.get_progress_token();
            for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 {
                    pause().await;
                }
                if let Some(token) = &token {
                    let mut param = ProgressNotificationParam::new(token.clone(), step);
                    param.total = Some(100.0);
                    let _ = peer.notify_progress(param).await;
                }
            }
            text_result("Tool with progress executed successfully")
        }
        FixtureTool::Sampling => {
            let prompt = argument(args, "prompt")?;
            let params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], 100);
            let answer = peer
                .create_message(params)
                .await
                .map_err(|e| McpError::internal_error(format!("sampling failed: {e}"), None))?;
            let text = serde_json::to_value(&answer.message)
                .ok()
                .and_then(|m| m.pointer("/content/text").and_then(Value::as_str).map(String::from))
                .unwrap_or_default();
            text_result(format!("LLM response: {text}"))
        }
        FixtureTool::Elicitation => {
            let message = argument(args, "message")?;
            elicit(
                context,
                message,
                json!({"type": "object", "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}},
                    "required": ["username", "email"]}),
                "User response",
            )
            .await?
        }
        FixtureTool::ElicitationDefaults => {
            elicit(
                context,
                "Test client default value handling - please accept with defaults".into(),
                json!({"type": "object", "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {"type": "string", "description": "User status",
                               "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "description": "Verification status", "default": true}}}),
                "Elicitation completed",
            )
            .await?
        }
        FixtureTool::ElicitationEnums => {
            elicit(
                context,
                "Pick from every kind of enum".into(),
                json!({"type": "object", "properties": {
                    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"}]},
                    "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                                   "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "items": {"type": "string",
                                      "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "items": {"anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"}]}}}}),
                "Elicitation completed",
            )
            .await?
        }
        FixtureTool::JsonSchema2020 => text_result(format!("received {}", Value::Object(args.clone()))),
        FixtureTool::Reconnection => {
            pause().await;
            text_result("Reconnection test completed successfully")
        }
    })
}

async fn elicit(
    context: &RequestContext<RoleServer>,
    message: String,
    schema: Value,
    label: &str,
) -> Result<CallToolResult, McpError> {
    let requested_schema: ElicitationSchema = serde_json::from_value(schema)
        .map_err(|e| McpError::internal_error(format!("fixture schema: {e}"), None))?;
    let answer = context
        .peer
        .create_elicitation(ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema,
        })
        .await
        .map_err(|e| McpError::internal_error(format!("elicitation failed: {e}"), None))?;
    let action = serde_json::to_value(answer.action).unwrap_or_default();
    let content = answer.content.unwrap_or(Value::Null);
    Ok(text_result(format!(
        "{label}: action={}, content={content}",
        action.as_str().unwrap_or("")
    )))
}

/// The fixture resources (`test://...`).
pub fn resources() -> Vec<Resource> {
    vec![
        Resource::new("test://static-text", "Static text")
            .with_description("A static text resource")
            .with_mime_type("text/plain"),
        Resource::new("test://static-binary", "Static binary")
            .with_description("A static PNG")
            .with_mime_type("image/png"),
        Resource::new("test://watched-resource", "Watched")
            .with_description("A resource to subscribe to")
            .with_mime_type("text/plain"),
    ]
}

pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new("test://template/{id}/data", "Templated data")
            .with_description("Data for an id")
            .with_mime_type("application/json"),
    ]
}

/// Read a fixture resource; `None` when `uri` is not one.
pub fn read(uri: &str) -> Option<ReadResourceResult> {
    let contents = match uri {
        "test://static-text" => {
            ResourceContents::text("This is the content of the static text resource.", uri)
        }
        "test://static-binary" => ResourceContents::blob(PNG, uri).with_mime_type("image/png"),
        "test://watched-resource" => ResourceContents::text("Watched resource content.", uri),
        _ => {
            let id = uri
                .strip_prefix("test://template/")?
                .strip_suffix("/data")
                .filter(|id| !id.is_empty() && !id.contains('/'))?;
            let data =
                json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
            ResourceContents::text(data.to_string(), uri).with_mime_type("application/json")
        }
    };
    Some(ReadResourceResult::new(vec![contents]))
}

/// Whether `uri` names a fixture resource a client may subscribe to.
pub fn is_resource(uri: &str) -> bool {
    uri.starts_with("test://")
}

pub fn prompts() -> Vec<Prompt> {
    let arg = |name: &str, what: &str| {
        PromptArgument::new(name)
            .with_description(what)
            .with_required(true)
    };
    vec![
        Prompt::new(
            "test_simple_prompt",
            Some("A prompt without arguments"),
            None,
        ),
        Prompt::new(
            "test_prompt_with_arguments",
            Some("A prompt with two arguments"),
            Some(vec![
                arg("arg1", "First test argument"),
                arg("arg2", "Second test argument"),
            ]),
        ),
        Prompt::new(
            "test_prompt_with_embedded_resource",
            Some("A prompt that embeds a resource"),
            Some(vec![arg("resourceUri", "URI of the resource to embed")]),
        ),
        Prompt::new(
            "test_prompt_with_image",
            Some("A prompt with an image"),
            None,
        ),
    ]
}

/// A fixture prompt; `None` when `name` is not one.
pub fn prompt(name: &str, args: &JsonObject) -> Option<Result<GetPromptResult, McpError>> {
    let user = |content: ContentBlock| PromptMessage::new(Role::User, content);
    let messages = match name {
        "test_simple_prompt" => vec![user(ContentBlock::text(
            "This is a simple prompt for testing.",
        ))],
        "test_prompt_with_arguments" => {
            let (a, b) = match (argument(args, "arg1"), argument(args, "arg2")) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => return Some(Err(e)),
            };
            vec![user(ContentBlock::text(format!(
                "Prompt with arguments: arg1='{a}', arg2='{b}'"
            )))]
        }
        "test_prompt_with_embedded_resource" => {
            let uri = match argument(args, "resourceUri") {
                Ok(uri) => uri,
                Err(e) => return Some(Err(e)),
            };
            vec![
                user(ContentBlock::resource(ResourceContents::text(
                    "Embedded resource content for testing.",
                    uri,
                ))),
                user(ContentBlock::text(
                    "Please process the embedded resource above.",
                )),
            ]
        }
        "test_prompt_with_image" => vec![
            user(ContentBlock::image(PNG, "image/png")),
            user(ContentBlock::text("Please analyze the image above.")),
        ],
        _ => return None,
    };
    Some(Ok(GetPromptResult::new(messages)))
}

/// Completion of the fixture prompt's arguments; `None` when not a fixture.
pub fn complete(prompt: &str, value: &str) -> Option<CompletionInfo> {
    if prompt != "test_prompt_with_arguments" {
        return None;
    }
    let values: Vec<String> = ["paris", "park", "party", "test", "testing"]
        .into_iter()
        .filter(|v| v.starts_with(value))
        .map(String::from)
        .collect();
    CompletionInfo::new(values).ok()
}
