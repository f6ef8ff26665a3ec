//! Delegating tasks to agent runtimes.
//!
//! - [`task::TaskFile`]: the TASKS.yaml a user writes: tasks, their dependencies, roles,
//!   runtimes, files and skills. Parsed with line-numbered errors, validated (unknown
//!   dependencies, cycles) before anything runs.
//! - [`runner::Runner`]: one agent step on one runtime. [`runner::RunnerFactory`] picks
//!   the implementation by [`RuntimeKind`]: `claude` (Claude Code headless, stream-json),
//!   `opencode` (OpenCode's server API), `cli` (Capstan's own model provider).
//! - [`executor::execute`]: runs a task file with a [`Strategy`] (`single`, `multi`,
//!   `parallel`, or chosen automatically), a [`budget::Budget`] and a timeout, emitting
//!   [`event::AgentEvent`]s, and returns an [`result::ExecutionResult`] with metadata.
//!
//! The crate knows nothing of the host: the host passes a model provider for the `cli`
//! runtime, the path of its own binary for Claude Code's `--mcp-config`, an event sink
//! and a budget gate (how "continue over budget?" is asked).

#![warn(missing_docs)]

pub mod budget;
pub mod config;
pub mod context;
pub mod error;
pub mod event;
pub mod executor;
pub mod kinds;
pub mod result;
pub mod runner;
pub mod task;

pub use budget::{Budget, BudgetGate, BudgetWarning, FixedGate};
pub use config::{AgentsConfig, ContextMode};
pub use error::AgentError;
pub use event::{AgentEvent, EventKind, EventSink};
pub use executor::{ExecuteOptions, execute};
pub use kinds::{RuntimeKind, Strategy};
pub use result::{ExecutionResult, ExecutionStatus, TaskResult, TaskStatus};
pub use task::TaskFile;
