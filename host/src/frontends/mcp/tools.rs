//! Capstan's operations as MCP tools: names, input schemas from `describe`,
//! one output schema from the types that make `structuredContent`
//! ([`ToolOutput`], [`ToolFailure`]), and annotations computed from what the
//! host knows about the operation's risk, never from the plugin's say-so.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde::Serialize;
use serde_json::{Value, json};

use crate::plugins::manifest::{HostService, WorkspaceAccess};
use capstan_policy::Risk;
use capstan_protocol::FailureReason;

use crate::plugins::runtime::{LoadedPlugin, OperationInfo};

/// One capability operation offered as a tool.
pub struct ToolEntry {
    pub tool: Tool,
    pub kind: String,
    pub operation: String,
    /// `None` when the plugin's schema is not valid JSON Schema: the plugin
    /// still checks its own input.
    pub validator: Option<jsonschema::Validator>,
    pub needs_workspace: bool,
}

/// A tool name from a kind and an operation, in the MCP tool-name charset
/// (ASCII letters, digits, `_`, `-`, `.`; at most 128 characters).
pub fn tool_name(kind: &str, operation: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut name = format!("{}.{}", clean(kind), clean(operation));
    name.truncate(128);
    name
}

/// `structuredContent` of a call that succeeded.
#[derive(Debug, Serialize)]
pub struct ToolOutput<'a> {
    pub summary: &'a str,
    pub data: &'a Value,
}

/// `structuredContent` of a call that failed (`isError: true`).
#[derive(Debug, Serialize)]
pub struct ToolFailure<'a> {
    pub reason: FailureReason,
    pub message: &'a str,
    pub advice: Option<&'a str>,
}

/// The output schema of every Capstan tool: one of the two shapes above.
/// Kept next to the types; a unit test checks that both serialize to values
/// it accepts.
pub fn output_schema() -> JsonObject {
    let schema = json!({
        "type": "object",
        "oneOf": [
            {
                "title": "success",
                "properties": {
                    "summary": {"type": "string", "description": "One line on what the operation did"},
                    "data": {"description": "The operation's own result"}
                },
                "required": ["summary", "data"],
                "additionalProperties": false
            },
            {
                "title": "failure",
                "properties": {
                    "reason": {"type": "string", "description": "Why, as a word: denied, invalid-input, timeout..."},
                    "message": {"type": "string"},
                    "advice": {"type": ["string", "null"], "description": "How to allow a denied call"}
                },
                "required": ["reason", "message", "advice"],
                "additionalProperties": false
            }
        ]
    });
    match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// Whether the plugin runs commands (each one then classified by the exec
/// policy, whatever the operation's declared risk).
pub fn runs_commands(plugin: &LoadedPlugin) -> bool {
    plugin
        .spec
        .entry
        .permissions
        .host
        .contains(&HostService::Exec)
}

/// The hints a client shows a person before a call. A plugin that runs
/// commands can change or delete anything in the workspace, so its tools
/// are never read-only and always destructive; they reach the network only
/// when the workspace policy grants the sandbox network.
pub fn annotations(risk: Risk, runs_commands: bool, policy_network: bool) -> ToolAnnotations {
    let read_only = risk == Risk::ReadOnly && !runs_commands;
    let destructive = runs_commands || matches!(risk, Risk::Write | Risk::Delete | Risk::Unknown);
    let open_world = risk == Risk::Network || (runs_commands && policy_network);
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(destructive)
        // A read gives the same answer twice; nothing else is promised.
        .idempotent(read_only)
        .open_world(open_world)
}

/// MCP requires an object schema at the top; a plugin that declares none (or
/// another type) gets one that takes any object.
fn object_schema(schema: &Value) -> JsonObject {
    match schema {
        Value::Object(map) if map.get("type").and_then(Value::as_str) == Some("object") => {
            map.clone()
        }
        _ => json!({"type": "object"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    }
}

/// The tool for one kind and operation of a loaded plugin.
pub fn entry(
    plugin: &LoadedPlugin,
    kind: &str,
    op: &OperationInfo,
    policy_network: bool,
) -> ToolEntry {
    let exec = runs_commands(plugin);
    let needs_workspace = plugin.spec.entry.permissions.workspace != WorkspaceAccess::None || exec;
    let name = tool_name(kind, &op.name);
    let schema = object_schema(&op.input_schema);
    let validator = match jsonschema::validator_for(&Value::Object(schema.clone())) {
        Ok(v) => Some(v),
        Err(e) => {
            crate::term::warn(format_args!(
                "`{name}`: the input schema of plugin `{}` is not valid JSON Schema ({e}); \
                 arguments go to the plugin unchecked",
                plugin.name()
            ));
            None
        }
    };
    let description = format!(
        "{} (Capstan capability `{kind}`, operation `{}`; risk `{}`{})",
        op.description.trim_end_matches('.'),
        op.name,
        op.risk,
        if exec {
            "; commands are classified and gated one by one"
        } else {
            ""
        }
    );
    let tool = Tool::new(name.clone(), description, Arc::new(schema))
        .with_title(format!("{kind} {}", op.name))
        .with_raw_output_schema(Arc::new(output_schema()))
        .with_annotations(annotations(op.risk, exec, policy_network));
    ToolEntry {
        tool,
        kind: kind.to_string(),
        operation: op.name.clone(),
        validator,
        needs_workspace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_keep_to_the_mcp_charset() {
        assert_eq!(tool_name("terminal_exec", "run"), "terminal_exec.run");
        assert_eq!(tool_name("my kind/x", "do:it"), "my_kind_x.do_it");
        assert_eq!(tool_name(&"k".repeat(200), "op").len(), 128);
    }

    #[test]
    fn both_structured_shapes_fit_the_output_schema() {
        let schema = Value::Object(output_schema());
        let validator = jsonschema::validator_for(&schema).unwrap();
        let data = json!({"hits": [1, 2]});
        let ok = serde_json::to_value(ToolOutput {
            summary: "2 hits",
            data: &data,
        })
        .unwrap();
        assert!(validator.is_valid(&ok), "{ok}");
        for advice in [None, Some("restart with --approve all")] {
            let failed = serde_json::to_value(ToolFailure {
                reason: FailureReason::Denied,
                message: "no",
                advice,
            })
            .unwrap();
            assert!(validator.is_valid(&failed), "{failed}");
        }
        assert!(!validator.is_valid(&json!({"summary": "x"})));
    }

    #[test]
    fn annotations_follow_the_real_risk() {
        let a = annotations(Risk::ReadOnly, false, false);
        assert_eq!(
            (a.read_only_hint, a.destructive_hint, a.idempotent_hint),
            (Some(true), Some(false), Some(true))
        );
        // A command runner is destructive whatever its declared risk.
        let exec = annotations(Risk::ReadOnly, true, false);
        assert_eq!(
            (
                exec.read_only_hint,
                exec.destructive_hint,
                exec.open_world_hint
            ),
            (Some(false), Some(true), Some(false))
        );
        assert_eq!(
            annotations(Risk::ReadOnly, true, true).open_world_hint,
            Some(true)
        );
        for risk in [Risk::Write, Risk::Delete, Risk::Unknown] {
            assert_eq!(annotations(risk, false, false).destructive_hint, Some(true));
        }
        assert_eq!(
            annotations(Risk::Network, false, false).open_world_hint,
            Some(true)
        );
    }
}
