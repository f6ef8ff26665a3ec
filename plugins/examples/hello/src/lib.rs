//! The smallest useful Capstan plugin: kind `echo`, one read-only operation that
//! returns its input. docs/PLUGINS.md walks through it line by line.

wit_bindgen::generate!({ world: "plugin", path: "../../../wit" });

use capstan::plugin::events::{Activity, emit};
use capstan::plugin::types::{CapabilityInfo, OperationInfo, Risk, Task, TaskError, TaskOutput};
use exports::capstan::plugin::capability::Guest;

struct Hello;

impl Guest for Hello {
    fn describe() -> CapabilityInfo {
        CapabilityInfo {
            kinds: vec!["echo".into()],
            operations: vec![OperationInfo {
                name: "echo".into(),
                description: "Return the input unchanged.".into(),
                input_schema: r#"{"type":"object"}"#.into(),
                risk: Risk::ReadOnly,
            }],
        }
    }

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
        if task.operation != "echo" {
            return Err(TaskError::NotImplemented(format!(
                "operation `{}` (echo has only `echo`)",
                task.operation
            )));
        }
        // The host passes JSON; a plugin validates what it relies on.
        let value: serde_json::Value = serde_json::from_str(&task.input)
            .map_err(|e| TaskError::InvalidInput(format!("input is not JSON: {e}")))?;
        if value.get("quiet").is_none() {
            emit(&Activity {
                kind: "echo".into(),
                message: "echoed the input".into(),
                data: String::new(),
            });
        }
        Ok(TaskOutput {
            summary: "echoed".into(),
            data: task.input,
        })
    }
}

export!(Hello);
