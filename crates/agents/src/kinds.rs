//! The two small vocabularies every other module uses.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::AgentError;

/// Where an agent step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// Claude Code, headless (`claude -p --output-format stream-json`).
    Claude,
    /// An OpenCode server (`opencode serve`), over its HTTP API.
    #[serde(rename = "opencode")]
    OpenCode,
    /// Capstan's own loop: a rendered prompt through Capstan's model provider.
    Cli,
}

impl RuntimeKind {
    /// The name in task files and config: `claude`, `opencode`, `cli`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Claude => "claude",
            RuntimeKind::OpenCode => "opencode",
            RuntimeKind::Cli => "cli",
        }
    }
}

impl fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RuntimeKind {
    type Err = AgentError;
    fn from_str(s: &str) -> Result<Self, AgentError> {
        match s {
            "claude" => Ok(RuntimeKind::Claude),
            "opencode" => Ok(RuntimeKind::OpenCode),
            "cli" => Ok(RuntimeKind::Cli),
            other => Err(AgentError::Runtime(format!(
                "unknown runtime `{other}`: use `claude` (Claude Code), `opencode` (an OpenCode server) or `cli` (Capstan's own model)"
            ))),
        }
    }
}

/// How the tasks of a file are carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// One agent per task, one task at a time (in dependency order).
    Single,
    /// Per task, an architect designs and then a dev implements with the design in
    /// context; one task at a time.
    Multi,
    /// One agent per task; independent tasks run at the same time (up to a limit).
    Parallel,
}

impl Strategy {
    /// The name in task files and on the command line: `single`, `multi`, `parallel`.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Single => "single",
            Strategy::Multi => "multi",
            Strategy::Parallel => "parallel",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = AgentError;
    fn from_str(s: &str) -> Result<Self, AgentError> {
        match s {
            "single" => Ok(Strategy::Single),
            "multi" => Ok(Strategy::Multi),
            "parallel" => Ok(Strategy::Parallel),
            other => Err(AgentError::TaskFile(format!(
                "unknown strategy `{other}`: use single, multi or parallel (or leave it out to choose automatically)"
            ))),
        }
    }
}
