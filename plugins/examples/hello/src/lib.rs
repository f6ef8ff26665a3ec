//! The smallest useful Capstan plugin: kind `echo`, one read-only operation that
//! returns its input. docs/PLUGINS.md walks through it line by line.

use capstan_plugin::serde_json::{Map, Value};
use capstan_plugin::{CapabilityInfo, Plugin, Risk, Task, TaskError, TaskOutput, activity, op};

struct Hello;

impl Plugin for Hello {
    fn describe() -> CapabilityInfo {
        CapabilityInfo {
            kinds: vec!["echo".into()],
            // The input is any JSON object: its schema is derived from the type.
            operations: vec![op::<Map<String, Value>>(
                "echo",
                "Return the input unchanged.",
                Risk::ReadOnly,
            )],
        }
    }

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
        if task.operation != "echo" {
            return Err(task.unknown_operation(&["echo"]));
        }
        // The host passes JSON; a plugin validates what it relies on.
        let value: Map<String, Value> = task.input()?;
        if !value.contains_key("quiet") {
            activity("echo", "echoed the input");
        }
        Ok(TaskOutput {
            summary: "echoed".into(),
            data: Some(task.input),
        })
    }
}

capstan_plugin::export!(Hello);
