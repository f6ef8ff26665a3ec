//! Rust bindings of the WIT world `capstan:plugin/plugin` (wit/capstan.wit, the
//! copy bundled in the capstan-plugin SDK: plugins/sdk/wit). Components built
//! against older versions run through their own bindings (runtime/v0_1.rs).
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

/// The WIT risk scale is the policy's: the one conversion each way.
impl From<types::Risk> for capstan_policy::Risk {
    fn from(risk: types::Risk) -> Self {
        use types::Risk as W;
        match risk {
            W::ReadOnly => Self::ReadOnly,
            W::Write => Self::Write,
            W::Delete => Self::Delete,
            W::Network => Self::Network,
            W::Unknown => Self::Unknown,
        }
    }
}

impl From<capstan_policy::Risk> for types::Risk {
    fn from(risk: capstan_policy::Risk) -> Self {
        use capstan_policy::Risk as P;
        match risk {
            P::ReadOnly => Self::ReadOnly,
            P::Write => Self::Write,
            P::Delete => Self::Delete,
            P::Network => Self::Network,
            P::Unknown => Self::Unknown,
        }
    }
}
