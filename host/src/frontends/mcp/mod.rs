//! The Model Context Protocol, both ways: [`server`] offers Capstan's
//! capabilities as MCP tools, its workspace as resources, and prompts (stdio
//! and streamable HTTP, see docs/MCP.md); [`client`] turns the tools of
//! external MCP servers into capability kinds `mcp:<server>/<tool>` behind
//! the same dispatch and approval gate.

mod fixtures;
mod http;
mod logging;
mod prompts;
mod resources;
pub mod server;
mod tools;

pub use server::{CapstanMcp, McpHost, http_router};
pub use tools::tool_name;
