//! One run: a message bound to a workspace, to its terminal event.
//!
//! [`app`] is the facade every frontend holds (config, store, registry,
//! services); [`builder`] makes the one [`crate::plugins::context::RunContext`]
//! every entry point uses; [`orchestrator`] drives analysis, retrieval, planning,
//! dispatch and finalisation; [`model`] is the host's model (offline or LLM);
//! [`dispatch`] runs one task through the approval gate to its capability.

pub mod app;
pub mod builder;
pub mod dispatch;
pub mod lease;
pub mod model;
pub mod orchestrator;
