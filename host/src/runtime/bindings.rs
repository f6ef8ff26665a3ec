//! Rust bindings of the WIT world `capstan:plugin/plugin` (wit/capstan.wit, the
//! copy bundled in the capstan-plugin SDK: plugins/sdk/wit). Components built
//! against older versions run through their own bindings (v0_1.rs).
//!
//! Every import is async (host services may wait on processes, people or models)
//! and trappable (a host-side bug becomes a trap of that one task, not a crash).

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use self::capstan::plugin::{approval, cancel, events, exec, index, types};
pub use self::exports::capstan::plugin::capability;

/// The WIT package and the newest version this host provides.
pub const PACKAGE: &str = "capstan:plugin";
pub const VERSION: &str = "0.2.0";
