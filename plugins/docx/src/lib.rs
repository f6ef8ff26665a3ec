//! Placeholder until its issue lands.
wit_bindgen::generate!({ world: "plugin", path: "../../wit" });

use capstan::plugin::types::{CapabilityInfo, OperationInfo, Risk, Task, TaskError, TaskOutput};
use exports::capstan::plugin::capability::Guest;

struct P;

impl Guest for P {
    fn describe() -> CapabilityInfo {
        CapabilityInfo {
            kinds: vec!["docx".into()],
            operations: vec![OperationInfo {
                name: "read".into(),
                description: String::new(),
                input_schema: r#"{"type":"object"}"#.into(),
                risk: Risk::ReadOnly,
            }],
        }
    }

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
        Err(TaskError::NotImplemented(format!(
            "operation `{}`",
            task.operation
        )))
    }
}

export!(P);
