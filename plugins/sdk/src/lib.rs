//! `capstan-plugin`: write a Capstan capability plugin in Rust.
//!
//! The WIT contract (`capstan:plugin`, in this crate's `wit/`) is bundled: a
//! plugin depends on this crate alone, never on a checkout of Capstan. A plugin is
//! a `cdylib` built with `cargo build --target wasm32-wasip2 --release`:
//!
//! ```ignore
//! use capstan_plugin::{CapabilityInfo, JsonSchema, Plugin, Risk, Task, TaskError, TaskOutput, op};
//! use serde::Deserialize;
//!
//! /// Input of `greet`.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Greet {
//!     /// Who to greet.
//!     name: String,
//! }
//!
//! struct Hello;
//!
//! impl Plugin for Hello {
//!     fn describe() -> CapabilityInfo {
//!         CapabilityInfo {
//!             kinds: vec!["hello".into()],
//!             operations: vec![op::<Greet>("greet", "Say hello.", Risk::ReadOnly)],
//!         }
//!     }
//!     fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
//!         let input: Greet = task.input()?;
//!         Ok(TaskOutput::text(format!("hello, {}", input.name)))
//!     }
//! }
//!
//! capstan_plugin::export!(Hello);
//! ```
//!
//! - [`op`] derives an operation's JSON Schema from its input type (schemars), so
//!   the schema the host and models read and the struct serde parses cannot drift.
//! - [`Task::input`] parses the JSON input into that type (`invalid-input` on error).
//! - [`activity`], [`progress`], [`is_cancelled`] and [`check_cancelled`] report to the
//!   user's feed and honour cancellation; [`files`] reads and writes workspace files.
//! - The host services (`exec`, `index`, `approval`) are in [`host`]. A
//!   component imports only what it calls, and the host refuses a component that
//!   imports a service its manifest entry does not grant.

pub mod files;

/// The generated bindings of the `plugin` world (wit/capstan.wit).
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "plugin",
        path: "wit",
        pub_export_macro: true,
        default_bindings_module: "capstan_plugin::bindings",
    });
}

pub use bindings::capstan::plugin::types::{
    CapabilityInfo, OperationInfo, Risk, Task, TaskError, TaskOutput,
};
/// What a plugin implements: `describe` (its kinds and operations) and `invoke`
/// (one task). Register the type with [`export!`].
pub use bindings::exports::capstan::plugin::capability::Guest as Plugin;
pub use schemars::{self, JsonSchema};
pub use serde_json;

/// The host services a plugin may import. Each one must be granted in the
/// plugin's manifest entry (`[plugin.permissions] host = [...]`), except `events`
/// and `cancel`, which every plugin gets.
pub mod host {
    pub use crate::bindings::capstan::plugin::{approval, cancel, events, exec, index};

    impl index::IndexError {
        /// The error in plain words.
        pub fn message(&self) -> String {
            match self {
                Self::Denied(m) => format!("denied: {m}"),
                Self::WorkspaceRequired => "no workspace is bound, so there is no index".into(),
                Self::InvalidRequest(m) => format!("invalid request: {m}"),
                Self::Failed(m) => m.clone(),
            }
        }
    }
}

/// The WIT package version this SDK builds plugins against.
pub const WIT_VERSION: &str = "0.2.0";

/// Exports a type implementing [`Plugin`] as the component's `capability`.
/// Use it once, at the crate root of the plugin: `capstan_plugin::export!(MyPlugin);`
#[macro_export]
macro_rules! export {
    ($ty:ident) => {
        $crate::bindings::export!($ty with_types_in $crate::bindings);
    };
}

/// The JSON Schema of `T`, as the host wants it in [`OperationInfo::input_schema`]:
/// every subschema inlined (no `$ref`s for models to chase), no `$schema` line.
pub fn schema_for<T: JsonSchema>() -> schemars::Schema {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    settings.into_generator().into_root_schema_for::<T>()
}

/// An operation whose input is `T`: the schema is derived from the type.
pub fn op<T: JsonSchema>(name: &str, description: &str, risk: Risk) -> OperationInfo {
    op_with_schema(name, description, schema_for::<T>(), risk)
}

/// An operation with a schema built by hand or adjusted after [`schema_for`].
pub fn op_with_schema(
    name: &str,
    description: &str,
    schema: schemars::Schema,
    risk: Risk,
) -> OperationInfo {
    OperationInfo {
        name: name.into(),
        description: description.into(),
        input_schema: schema.as_value().to_string(),
        risk,
    }
}

impl Task {
    /// The task's JSON input as `T`, or `invalid-input` naming the operation and
    /// what was wrong.
    pub fn input<T: serde::de::DeserializeOwned>(&self) -> Result<T, TaskError> {
        serde_json::from_str(&self.input)
            .map_err(|e| TaskError::InvalidInput(format!("{} input: {e}", self.operation)))
    }

    /// `not-implemented` for an operation this plugin does not offer, listing those it does.
    pub fn unknown_operation(&self, offered: &[&str]) -> TaskError {
        TaskError::NotImplemented(format!(
            "operation `{}`; {} offers {}",
            self.operation,
            self.kind,
            offered.join(", ")
        ))
    }
}

impl TaskOutput {
    /// A summary line for people and a JSON result for the host and other tasks.
    pub fn json(summary: impl Into<String>, data: &impl serde::Serialize) -> Self {
        Self {
            summary: summary.into(),
            data: serde_json::to_string(data).ok(),
        }
    }

    /// A summary line and no data.
    pub fn text(summary: impl Into<String>) -> Self {
        Self {
            summary: summary.into(),
            data: None,
        }
    }
}

/// One plain-words line for the user's activity feed (`kind` is a short machine
/// name such as `xlsx.read`).
pub fn activity(kind: &str, message: &str) {
    host::events::emit(&host::events::Activity {
        kind: kind.into(),
        message: message.into(),
        data: None,
    });
}

/// An activity line with JSON details.
pub fn activity_with(kind: &str, message: &str, data: &impl serde::Serialize) {
    host::events::emit(&host::events::Activity {
        kind: kind.into(),
        message: message.into(),
        data: serde_json::to_string(data).ok(),
    });
}

/// Progress of the current task: `done` of `total` `unit`s ("files", "bytes").
pub fn progress(done: u64, total: u64, unit: &str) {
    host::events::progress(done, total, unit);
}

/// Whether the person cancelled the task. The host also stops a cancelled task at
/// its next epoch tick; polling is for returning clean partial results.
pub fn is_cancelled() -> bool {
    host::cancel::is_cancelled()
}

/// `Err(TaskError::Cancelled)` once the task is cancelled, for `?` in loops.
pub fn check_cancelled() -> Result<(), TaskError> {
    if is_cancelled() {
        Err(TaskError::Cancelled)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// Input of `demo`.
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Demo {
        /// The file, relative to the workspace root
        path: String,
        #[serde(default)]
        overwrite: bool,
        #[schemars(range(min = 1))]
        limit: Option<u32>,
        nested: Vec<Inner>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        name: String,
    }

    #[test]
    fn the_schema_follows_the_struct() {
        let info = op::<Demo>("demo", "A demo.", Risk::Write);
        let schema: serde_json::Value = serde_json::from_str(&info.input_schema).unwrap();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], serde_json::json!(["path", "nested"]));
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(
            schema["properties"]["path"]["description"],
            "The file, relative to the workspace root"
        );
        assert_eq!(schema["properties"]["overwrite"]["default"], false);
        assert_eq!(schema["properties"]["limit"]["minimum"], 1);
        // Inlined: a model reading the schema needs no `$ref` resolution.
        assert_eq!(
            schema["properties"]["nested"]["items"]["properties"]["name"]["type"],
            "string"
        );
        assert!(!info.input_schema.contains("$ref"), "{}", info.input_schema);
        assert!(schema.get("$schema").is_none());
    }

    #[test]
    fn bad_input_names_the_operation_and_the_field() {
        let task = Task {
            id: "t".into(),
            kind: "demo".into(),
            operation: "demo".into(),
            input: r#"{"path": "a", "nested": [], "colour": 1}"#.into(),
        };
        let Err(TaskError::InvalidInput(m)) = task.input::<Demo>() else {
            panic!("unknown field accepted");
        };
        assert!(m.starts_with("demo input: ") && m.contains("colour"), "{m}");
        let TaskError::NotImplemented(m) = task.unknown_operation(&["a", "b"]) else {
            panic!()
        };
        assert_eq!(m, "operation `demo`; demo offers a, b");
    }
}
