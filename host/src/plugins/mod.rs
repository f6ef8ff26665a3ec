//! Capabilities: what a task kind resolves to and how it runs.
//!
//! Imports flow down this list: [`registry`] (kind -> plugin or MCP tool) uses
//! [`mcp_client`]'s tools only through the [`registry::ExternalTool`] trait;
//! [`runtime`] (wasmtime components) gives plugins the [`services`] they import;
//! [`bindings`] is the one place WIT types meet host types; [`manifest`] and
//! [`bundled`] say what is installed; [`engine`] is the wasmtime configuration
//! the runtime runs and host/build.rs compiles the bundled components for.

pub mod bindings;
pub mod bundled;
pub mod context;
pub mod engine;
pub mod manifest;
pub mod mcp_client;
pub mod registry;
pub mod runtime;
pub mod services;
