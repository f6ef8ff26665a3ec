//! The ways into Capstan. Each holds a [`crate::run::app::App`] and nothing
//! below the run layer reaches back up here.
//!
//! [`cli`] (the `capstan` command) may start the others; [`server`] is HTTP +
//! SSE, AG-UI, the web chat and stdio JSON-RPC; [`mcp`] offers capabilities as
//! MCP tools, resources and prompts.

pub mod cli;
pub mod mcp;
pub mod server;
