//! What a workspace lets run: its profile and whether commands are sandboxed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::names;
use crate::risk::Risk;

/// How much a workspace lets run without asking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Auto-run read-only commands; ask for everything else.
    #[default]
    Cautious,
    /// Auto-run read-only and write commands; ask for delete, network and
    /// unknown. Note that writes include builds and tests, which run
    /// project code, and writes that plant files later run by builds.
    Trusted,
    /// Run nothing at all.
    Locked,
}

names!(Profile, "profile", {
    Cautious => "cautious",
    Trusted => "trusted",
    Locked => "locked",
});

impl Profile {
    /// The highest risk this profile runs without asking, if any.
    pub const fn auto_run_up_to(self) -> Option<Risk> {
        match self {
            Profile::Cautious => Some(Risk::ReadOnly),
            Profile::Trusted => Some(Risk::Write),
            Profile::Locked => None,
        }
    }
}

/// Whether commands must run inside the OS sandbox.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// Fail closed: if Landlock or seccomp cannot be enforced, the command
    /// does not start (the default).
    #[default]
    Required,
    /// Run without Landlock, seccomp or namespaces because the workspace
    /// profile said so explicitly (`sandbox = "off"`). Verdicts are unchanged;
    /// the environment is still scrubbed, limits, timeout and output cap still
    /// apply, and cancellation still kills every descendant. The network
    /// setting is not enforced in this mode.
    Off,
}

names!(SandboxMode, "sandbox mode", {
    Required => "required",
    Off => "off",
});
