//! The TASKS.yaml format (documented in docs/AGENTS.md): parse, validate, order.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{AgentError, RuntimeKind, Strategy};

/// A task file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFile {
    /// Absent: chosen automatically (see [`TaskFile::auto_strategy`]).
    #[serde(default)]
    pub strategy: Option<Strategy>,
    /// Default runtime of every task. Absent (and not given on the command line): `cli`.
    #[serde(default)]
    pub runtime: Option<RuntimeKind>,
    /// Spending limit in USD for the whole execution.
    #[serde(default)]
    pub budget_usd: Option<f64>,
    /// The whole execution is stopped after this many seconds (status `timeout`).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Most tasks running at once under `parallel`.
    #[serde(default)]
    pub max_parallel: Option<usize>,
    /// Directory of Markdown skill files, relative to the workspace.
    #[serde(default)]
    pub skills_dir: Option<PathBuf>,
    /// Extra roles or overrides of the built-in ones (`architect`, `dev`).
    #[serde(default)]
    pub roles: BTreeMap<String, RoleSpec>,
    /// The tasks, in file order (run in dependency order).
    pub tasks: Vec<TaskSpec>,
}

/// An agent role: who the agent is told it is.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSpec {
    /// A minijinja template rendered with the task (see docs/AGENTS.md for the variables).
    pub prompt: String,
    /// Model for this role's steps (passed to the runtime).
    #[serde(default)]
    pub model: Option<String>,
}

/// How much design a task needs, for strategy auto-selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Complexity {
    /// Needs no design step.
    Simple,
    /// Needs design first: a lone complex task is auto-run with `multi`.
    Complex,
}

/// One task of a task file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Unique within the file; `depends_on` and events name the task by it.
    pub id: String,
    /// What to do, in words: the heart of the agents' prompts.
    pub description: String,
    /// Role of the agent under `single` / `parallel` (default `dev`).
    #[serde(default)]
    pub role: Option<String>,
    /// Runtime of its steps; `None`: the options', the file's, else the default.
    #[serde(default)]
    pub runtime: Option<RuntimeKind>,
    /// Where a step is tried again when its runtime fails.
    #[serde(default)]
    pub retry_runtime: Option<RuntimeKind>,
    /// Model for its steps (over the role's); `None`: the runtime's default.
    #[serde(default)]
    pub model: Option<String>,
    /// Ids of tasks that must complete first; if one does not, this one is skipped.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Workspace files whose contents go into the prompt.
    #[serde(default)]
    pub files: Vec<String>,
    /// Skill names (file stems in the skills directory) to inject.
    #[serde(default)]
    pub skills: Vec<String>,
    /// How much design it needs; unset: judged from its size ([`COMPLEX_WORDS`], [`COMPLEX_FILES`]).
    #[serde(default)]
    pub complexity: Option<Complexity>,
}

/// A description this long (in words) makes a task complex when `complexity` is unset.
pub const COMPLEX_WORDS: usize = 120;
/// This many referenced files make a task complex when `complexity` is unset.
pub const COMPLEX_FILES: usize = 3;

impl TaskSpec {
    /// The auto-selection rule: `complexity` when given; otherwise complex when the
    /// description has at least [`COMPLEX_WORDS`] words or the task references at least
    /// [`COMPLEX_FILES`] files.
    pub fn is_complex(&self) -> bool {
        match self.complexity {
            Some(c) => c == Complexity::Complex,
            None => {
                self.description.split_whitespace().count() >= COMPLEX_WORDS
                    || self.files.len() >= COMPLEX_FILES
            }
        }
    }
}

impl TaskFile {
    /// Read and validate a task file.
    pub fn load(path: &Path) -> Result<Self, AgentError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            AgentError::TaskFile(format!("cannot read task file {}: {e}", path.display()))
        })?;
        Self::parse(&text).map_err(|e| match e {
            AgentError::TaskFile(m) => AgentError::TaskFile(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Parse and validate YAML text. Syntax and type errors name the line and column.
    pub fn parse(text: &str) -> Result<Self, AgentError> {
        let file: TaskFile = serde_yaml_ng::from_str(text).map_err(|e| {
            let message = e.to_string();
            // serde_yaml_ng usually ends its message with the place; add it when not.
            let place = match e.location() {
                Some(l) if !message.contains(" at line ") => {
                    format!(" at line {} column {}", l.line(), l.column())
                }
                _ => String::new(),
            };
            AgentError::TaskFile(format!(
                "{message}{place} (see docs/AGENTS.md for the task file format)"
            ))
        })?;
        file.validate()?;
        Ok(file)
    }

    fn validate(&self) -> Result<(), AgentError> {
        let bad = |m: String| Err(AgentError::TaskFile(m));
        if self.tasks.is_empty() {
            return bad(
                "`tasks` is empty: list at least one task with an `id` and a `description`".into(),
            );
        }
        let mut seen = HashMap::new();
        for (i, t) in self.tasks.iter().enumerate() {
            if t.id.trim().is_empty() {
                return bad(format!("task #{} has an empty `id`", i + 1));
            }
            if t.description.trim().is_empty() {
                return bad(format!("task `{}` has an empty `description`", t.id));
            }
            if let Some(first) = seen.insert(t.id.as_str(), i) {
                return bad(format!(
                    "task id `{}` is used twice (tasks #{} and #{}): ids must be unique",
                    t.id,
                    first + 1,
                    i + 1
                ));
            }
        }
        for t in &self.tasks {
            for d in &t.depends_on {
                if !seen.contains_key(d.as_str()) {
                    return bad(format!(
                        "task `{}` depends on `{d}`, which is not a task in this file",
                        t.id
                    ));
                }
                if d == &t.id {
                    return bad(format!("task `{}` depends on itself", t.id));
                }
            }
            if let Some(role) = &t.role
                && !self.roles.contains_key(role)
                && !crate::context::BUILTIN_ROLES.contains(&role.as_str())
            {
                return bad(format!(
                    "task `{}` has role `{role}`, which is neither built in ({}) nor defined under `roles`",
                    t.id,
                    crate::context::BUILTIN_ROLES.join(", ")
                ));
            }
        }
        if self.max_parallel == Some(0) {
            return bad("`max_parallel` must be at least 1".into());
        }
        if let Some(b) = self.budget_usd
            && !(b.is_finite() && b >= 0.0)
        {
            return bad(format!(
                "`budget_usd` must be a non-negative number, not {b}"
            ));
        }
        self.topological_order()?;
        Ok(())
    }

    /// Task indices in an order where every task comes after its prerequisites (ties:
    /// file order). A cycle is an error naming it.
    pub fn topological_order(&self) -> Result<Vec<usize>, AgentError> {
        capstan_graph::topological_order(&self.tasks).map_err(|cycle| {
            AgentError::TaskFile(format!(
                "the tasks' dependencies form a cycle: {cycle} (remove one `depends_on` entry to break it)"
            ))
        })
    }

    /// The strategy when none is given, and why: several tasks -> `parallel` (the
    /// dependency graph decides what can overlap); one complex task -> `multi`
    /// (architect, then dev); otherwise `single`.
    pub fn auto_strategy(&self) -> (Strategy, String) {
        if self.tasks.len() > 1 {
            return (
                Strategy::Parallel,
                format!(
                    "auto: {} tasks, run over their dependency graph",
                    self.tasks.len()
                ),
            );
        }
        let t = &self.tasks[0];
        if t.is_complex() {
            let why = match t.complexity {
                Some(_) => "marked `complexity: complex`".to_string(),
                None if t.files.len() >= COMPLEX_FILES => {
                    format!("references {} files", t.files.len())
                }
                None => format!("description has at least {COMPLEX_WORDS} words"),
            };
            (
                Strategy::Multi,
                format!(
                    "auto: task `{}` is complex ({why}): architect designs, dev implements",
                    t.id
                ),
            )
        } else {
            (
                Strategy::Single,
                format!("auto: one simple task `{}`", t.id),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_name_the_line() {
        let err = TaskFile::parse("tasks:\n  - id: a\n    description: [unclosed\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line "), "{err}");
        let err = TaskFile::parse("tasks:\n  - id: a\n    description: x\n    runtime: gpt\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 4") && err.contains("gpt"), "{err}");
        let err = TaskFile::parse("tasks:\n  - id: a\n    descripton: x\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 3") && err.contains("descripton"),
            "{err}"
        );
    }

    #[test]
    fn cycles_and_unknown_dependencies_are_named() {
        let err = TaskFile::parse(
            "tasks:\n  - {id: a, description: x, depends_on: [c]}\n  - {id: b, description: x, depends_on: [a]}\n  - {id: c, description: x, depends_on: [b]}\n  - {id: d, description: x}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("cycle") && err.contains("a -> c -> b -> a"),
            "{err}"
        );
        let err = TaskFile::parse("tasks:\n  - {id: a, description: x, depends_on: [zz]}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`zz`"), "{err}");
    }

    #[test]
    fn topological_order_respects_dependencies() {
        let f = TaskFile::parse(
            "tasks:\n  - {id: t3, description: x, depends_on: [t1, t2]}\n  - {id: t1, description: x}\n  - {id: t2, description: x}\n",
        )
        .unwrap();
        let ids: Vec<&str> = f
            .topological_order()
            .unwrap()
            .into_iter()
            .map(|i| f.tasks[i].id.as_str())
            .collect();
        assert_eq!(ids, ["t1", "t2", "t3"]);
    }

    #[test]
    fn auto_selection_rule() {
        let one = |extra: &str| {
            TaskFile::parse(&format!(
                "tasks:\n  - {{id: a, description: 'do it'{extra}}}\n"
            ))
            .unwrap()
            .auto_strategy()
            .0
        };
        assert_eq!(one(""), Strategy::Single);
        assert_eq!(one(", complexity: complex"), Strategy::Multi);
        assert_eq!(one(", files: [a, b, c]"), Strategy::Multi);
        assert_eq!(
            one(", files: [a, b, c], complexity: simple"),
            Strategy::Single
        );
        let long = "word ".repeat(COMPLEX_WORDS);
        let f =
            TaskFile::parse(&format!("tasks:\n  - {{id: a, description: '{long}'}}\n")).unwrap();
        assert_eq!(f.auto_strategy().0, Strategy::Multi);
        let two =
            TaskFile::parse("tasks:\n  - {id: a, description: x}\n  - {id: b, description: y}\n")
                .unwrap();
        assert_eq!(two.auto_strategy().0, Strategy::Parallel);
    }
}
