//! A plugin as it was written against `capstan:plugin@0.1.0`: kind `legacy_echo`,
//! `echo` returns the input and reports an activity with `""` for "no details";
//! `empty` returns `""` as its data (0.1.0's way of saying "none").

wit_bindgen::generate!({ world: "plugin", path: "../../../wit-snapshots/0.1.0" });

use capstan::plugin::events::{Activity, emit, progress};
use capstan::plugin::types::{CapabilityInfo, OperationInfo, Risk, Task, TaskError, TaskOutput};
use exports::capstan::plugin::capability::Guest;

struct Legacy;

impl Guest for Legacy {
    fn describe() -> CapabilityInfo {
        let op = |name: &str| OperationInfo {
            name: name.into(),
            description: format!("{name} (a 0.1.0 component)"),
            input_schema: r#"{"type":"object"}"#.into(),
            risk: Risk::ReadOnly,
        };
        CapabilityInfo {
            kinds: vec!["legacy_echo".into()],
            operations: vec![op("echo"), op("empty"), op("fail")],
        }
    }

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
        match task.operation.as_str() {
            "echo" => {
                emit(&Activity {
                    kind: "legacy.echoed".into(),
                    message: "echoed the input".into(),
                    data: String::new(),
                });
                progress(1, 1, "inputs");
                Ok(TaskOutput {
                    summary: "echoed".into(),
                    data: task.input,
                })
            }
            "empty" => Ok(TaskOutput {
                summary: "nothing to return".into(),
                data: String::new(),
            }),
            "fail" => Err(TaskError::InvalidInput("the 0.1.0 plugin says no".into())),
            other => Err(TaskError::NotImplemented(other.into())),
        }
    }
}

export!(Legacy);
