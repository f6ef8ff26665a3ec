//! The Model Context Protocol, both ways: [`server`] offers Capstan's
//! capabilities as MCP tools (stdio and streamable HTTP, see docs/MCP.md);
//! [`client`] turns the tools of external MCP servers into capability kinds
//! `mcp:<server>/<tool>` behind the same dispatch and approval gate.

pub mod client;
pub mod server;

pub use server::{CapstanMcp, McpHost, http_router, tool_name};
