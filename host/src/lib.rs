//! Capstan: a sandboxed capability host for AI agents.
//!
//! Layers, top to bottom (data flows down, never back up):
//! - [`cli`]: the `capstan` command;
//! - [`mcp`]: capabilities as MCP tools, and external MCP servers as capabilities;
//! - [`server`]: HTTP + SSE, AG-UI, web chat and stdio JSON-RPC over one run manager;
//! - [`dispatch`]: a task through the [`registry`] to its plugin, with events;
//! - [`registry`]: task kind -> plugin, from [`manifest`]s;
//! - [`runtime`]: wasmtime components, one store per task, faults contained;
//! - [`services`]: host services plugins import (exec, index, approval, model);
//! - [`protocol`]: the event and task types every layer speaks;
//! - [`dirs`]: where Capstan keeps config, data and cache;
//! - [`term`]: the one door to the terminal (untrusted text made inert).
//! - [`workspace_gate`]: which folders may be a workspace, for every entry point.

pub mod app;
pub mod bundled;
pub mod cli;
pub mod config;
pub mod config_check;
pub mod dirs;
pub mod dispatch;
pub mod host_model;
pub mod manifest;
pub mod mcp;
pub mod orchestrator;
pub mod protocol;
pub mod registry;
pub mod runtime;
pub mod server;
pub mod services;
pub mod term;
pub mod workspace_gate;
