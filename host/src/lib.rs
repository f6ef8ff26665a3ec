//! Capstan: a sandboxed capability host for AI agents.
//!
//! The crate is organised by concern, in layers; every module imports only from
//! its own layer's earlier modules or from layers below it (checked by
//! `tests/layering.rs`):
//!
//! 1. [`frontends`]: the ways in (the `capstan` CLI, the HTTP/SSE + AG-UI +
//!    web chat + stdio server, Capstan as an MCP server);
//! 2. [`run`]: one run from message to terminal event (the application facade,
//!    the run builder every frontend uses, the orchestrator, the host model,
//!    dispatch of one task through the approval gate);
//! 3. [`plugins`]: capabilities (manifests, the bundled components, the
//!    registry, the wasmtime runtime, the host services plugins import, and
//!    external MCP servers as capabilities);
//! 4. the foundation every layer uses: [`config`], [`dirs`], [`workspace_gate`] (which folders may be a
//!    workspace), [`term`] (the one door to the terminal) and [`uri`]. Events, tasks
//!    and the closed sets are `capstan-protocol`'s.

pub mod frontends;
pub mod plugins;
pub mod run;

pub mod config;
pub mod dirs;
pub mod term;
pub mod uri;
pub mod workspace_gate;
