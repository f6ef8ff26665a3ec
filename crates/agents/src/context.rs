//! What an agent is told: its role, the task, the skills chosen for it, its
//! prerequisites' outputs (and, under `multi`, the architect's design), and the files
//! the task references, cut to fit the context limit.

use std::path::{Path, PathBuf};

use capstan_models::estimate_tokens;
use serde::Serialize;

use crate::AgentError;
use crate::task::{TaskFile, TaskSpec};

/// Roles every task file can use without defining them.
pub const BUILTIN_ROLES: &[&str] = &["architect", "dev"];

const ARCHITECT: &str = "You are the architect. Design how to carry out the task below: the \
components, the files to change, the interfaces and the order of work. Do not write the \
implementation; a developer will implement your design.";

const DEV: &str = "You are the developer. Carry out the task below completely and report \
what you did.{% if context %} Build on the context given (earlier agents' work and \
prerequisite tasks' results).{% endif %}";

/// The layout around the role prompt. Rendered by minijinja with: `role`, `role_prompt`,
/// `task` (`id`, `description`, `depends_on`), `skills` (`name`, `body`), `context`
/// (`label`, `text`) and `files` (`path`, `content`).
const LAYOUT: &str = "{{ role_prompt }}

# Task {{ task.id }}

{{ task.description }}
{% for s in skills %}
# Skill: {{ s.name }}

{{ s.body }}
{% endfor %}{% for c in context %}
# Context: {{ c.label }}

{{ c.text }}
{% endfor %}{% for f in files %}
===== BEGIN FILE {{ f.path }} =====
{{ f.content }}
===== END FILE {{ f.path }} =====
{% endfor %}";

/// A skill file injected into the prompt.
#[derive(Debug, Clone, Serialize)]
pub struct Skill {
    /// The skill's name (its file stem in the skills directory).
    pub name: String,
    /// The file's Markdown content.
    pub body: String,
}

/// Output of an earlier agent or task, shown to the next one.
#[derive(Debug, Clone, Serialize)]
pub struct ContextItem {
    /// What it is, for the prompt and events (e.g. the task or agent it came from).
    pub label: String,
    /// The earlier output, as produced.
    pub text: String,
}

/// A workspace file whose content goes into the prompt.
#[derive(Debug, Clone, Serialize)]
pub struct FileItem {
    /// As the task gave it, relative to the workspace.
    pub path: String,
    /// The file's text (lossy UTF-8).
    pub content: String,
}

/// A prompt ready for a runtime.
#[derive(Debug, Clone)]
pub struct Prompt {
    /// The rendered prompt.
    pub text: String,
    /// `(original tokens, sections cut)` when the prompt was cut to fit.
    pub truncated: Option<(u64, Vec<String>)>,
}

/// The role's prompt template and model: the task file's `roles` entry, else built in.
pub fn role_template<'a>(
    file: &'a TaskFile,
    role: &str,
) -> Result<(&'a str, Option<&'a str>), AgentError> {
    if let Some(r) = file.roles.get(role) {
        return Ok((r.prompt.as_str(), r.model.as_deref()));
    }
    match role {
        "architect" => Ok((ARCHITECT, None)),
        "dev" => Ok((DEV, None)),
        other => Err(AgentError::TaskFile(format!(
            "role `{other}` is not defined"
        ))),
    }
}

/// Skills for a task from the Markdown files in `dir`: those the task names (a missing
/// one is an error), and those whose file name appears as a word in the description
/// (`rust.md` for "fix the Rust build").
pub fn select_skills(dir: &Path, task: &TaskSpec) -> Result<Vec<Skill>, AgentError> {
    let mut available: Vec<(String, PathBuf)> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .filter_map(|p| Some((p.file_stem()?.to_str()?.to_string(), p)))
            .collect(),
        Err(_) => Vec::new(),
    };
    available.sort();
    for name in &task.skills {
        if !available.iter().any(|(n, _)| n == name) {
            return Err(AgentError::Context(format!(
                "task `{}` asks for skill `{name}`, but there is no {}/{name}.md",
                task.id,
                dir.display()
            )));
        }
    }
    let words: Vec<String> = task
        .description
        .split(|c: char| !c.is_alphanumeric() && c != '-' && c != '_')
        .map(str::to_lowercase)
        .collect();
    let mut out = Vec::new();
    for (name, path) in available {
        let wanted = task.skills.contains(&name) || words.contains(&name.to_lowercase());
        if !wanted {
            continue;
        }
        let body = std::fs::read_to_string(&path).map_err(|e| {
            AgentError::Context(format!("cannot read skill {}: {e}", path.display()))
        })?;
        out.push(Skill { name, body });
    }
    Ok(out)
}

/// Largest file put into a prompt whole; longer ones are cut (head and tail kept).
const MAX_FILE_CHARS: usize = 200_000;

/// The files a task references, read from inside the workspace only: absolute paths,
/// `..` escapes and symlinks leading out are refused.
pub fn load_files(workspace: &Path, task: &TaskSpec) -> Result<Vec<FileItem>, AgentError> {
    let root = workspace
        .canonicalize()
        .map_err(|e| AgentError::Context(format!("workspace {}: {e}", workspace.display())))?;
    let mut out = Vec::new();
    for rel in &task.files {
        let refuse = |why: String| {
            AgentError::Context(format!("task `{}` references file `{rel}`: {why}", task.id))
        };
        if Path::new(rel).is_absolute() {
            return Err(refuse("give a path relative to the workspace".into()));
        }
        let path = root
            .join(rel)
            .canonicalize()
            .map_err(|e| refuse(format!("{e}")))?;
        if !path.starts_with(&root) {
            return Err(refuse(format!(
                "it is outside the workspace {} (only workspace files can be injected)",
                root.display()
            )));
        }
        let bytes = std::fs::read(&path).map_err(|e| refuse(format!("{e}")))?;
        let content =
            String::from_utf8(bytes).map_err(|_| refuse("it is not UTF-8 text".into()))?;
        out.push(FileItem {
            path: rel.clone(),
            content: cut_middle(&content, MAX_FILE_CHARS),
        });
    }
    Ok(out)
}

/// A section of a prompt, by its place in the lists given to [`render`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The file at this index of the files list.
    File(usize),
    /// The skill at this index of the skills list.
    Skill(usize),
    /// The context item at this index of the context list.
    Context(usize),
}

/// A section that must shrink for the prompt to fit, and how much of it may stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    /// Which section.
    pub section: Section,
    /// How events name it: `file big.log`, `skill rust`, `context <label>`.
    pub label: String,
    /// Characters of the section that fit.
    pub keep_chars: usize,
}

/// The text of `section`, to shorten in place.
pub fn section_text<'a>(
    skills: &'a mut [Skill],
    context: &'a mut [ContextItem],
    files: &'a mut [FileItem],
    section: Section,
) -> &'a mut String {
    match section {
        Section::File(i) => &mut files[i].content,
        Section::Skill(i) => &mut skills[i].body,
        Section::Context(i) => &mut context[i].text,
    }
}

/// Render a prompt and fit it into `limit_tokens`: the role and the task stay whole;
/// files are cut first, then skills, then context (the prerequisites' and the
/// architect's output, the most relevant part), each keeping its head and tail.
pub fn render(
    role: &str,
    role_template: &str,
    task: &TaskSpec,
    mut skills: Vec<Skill>,
    mut context: Vec<ContextItem>,
    mut files: Vec<FileItem>,
    limit_tokens: u64,
) -> Result<Prompt, AgentError> {
    let full = render_parts(role, role_template, task, &skills, &context, &files)?;
    let Some((original, over)) = overflow_of(&full, &skills, &context, &files, limit_tokens) else {
        return Ok(Prompt {
            text: full,
            truncated: None,
        });
    };
    let mut cut = Vec::new();
    for o in over {
        let text = section_text(&mut skills, &mut context, &mut files, o.section);
        *text = cut_middle(text, o.keep_chars);
        cut.push(o.label);
    }
    Ok(Prompt {
        text: render_parts(role, role_template, task, &skills, &context, &files)?,
        truncated: Some((original, cut)),
    })
}

/// `None` when the prompt fits `limit_tokens`; else its estimated tokens and the
/// sections that must shrink, in the order [`render`] cuts them.
pub fn overflow(
    role: &str,
    role_template: &str,
    task: &TaskSpec,
    skills: &[Skill],
    context: &[ContextItem],
    files: &[FileItem],
    limit_tokens: u64,
) -> Result<Option<(u64, Vec<Overflow>)>, AgentError> {
    let full = render_parts(role, role_template, task, skills, context, files)?;
    Ok(overflow_of(&full, skills, context, files, limit_tokens))
}

fn overflow_of(
    full: &str,
    skills: &[Skill],
    context: &[ContextItem],
    files: &[FileItem],
    limit_tokens: u64,
) -> Option<(u64, Vec<Overflow>)> {
    let original = estimate_tokens(full);
    if original <= limit_tokens {
        return None;
    }
    // Characters to remove, at the estimator's 4 chars per token, plus room for the
    // cut markers.
    let mut excess = full
        .chars()
        .count()
        .saturating_sub(limit_tokens as usize * 4)
        + 256;
    let sections = files
        .iter()
        .enumerate()
        .rev()
        .map(|(i, f)| (Section::File(i), format!("file {}", f.path), &f.content))
        .chain(
            skills
                .iter()
                .enumerate()
                .rev()
                .map(|(i, s)| (Section::Skill(i), format!("skill {}", s.name), &s.body)),
        )
        .chain(
            context
                .iter()
                .enumerate()
                .map(|(i, c)| (Section::Context(i), format!("context {}", c.label), &c.text)),
        );
    let mut out = Vec::new();
    for (section, label, text) in sections {
        if excess == 0 {
            break;
        }
        let len = text.chars().count();
        let keep = len.saturating_sub(excess);
        excess = excess.saturating_sub(len - keep);
        out.push(Overflow {
            section,
            label,
            keep_chars: keep,
        });
    }
    Some((original, out))
}

fn render_parts(
    role: &str,
    role_template: &str,
    task: &TaskSpec,
    skills: &[Skill],
    context: &[ContextItem],
    files: &[FileItem],
) -> Result<String, AgentError> {
    let env = minijinja::Environment::new();
    let tpl_err = |e: minijinja::Error| AgentError::Template {
        role: role.to_string(),
        message: format!("{e:#}"),
    };
    let vars = minijinja::context! {
        role => role,
        task => minijinja::context! {
            id => &task.id,
            description => &task.description,
            depends_on => &task.depends_on,
        },
        skills => skills,
        context => context,
        files => files,
    };
    let role_prompt = env.render_str(role_template, &vars).map_err(tpl_err)?;
    let vars = minijinja::context! { role_prompt => role_prompt, ..vars };
    env.render_str(LAYOUT, vars).map_err(tpl_err)
}

/// `text` cut to at most about `keep` characters: its head and tail with a marker
/// saying how much was left out between them (the start of a document and its end are
/// usually the parts that say what it is and what it concluded).
pub fn cut_middle(text: &str, keep: usize) -> String {
    let len = text.chars().count();
    if len <= keep {
        return text.to_string();
    }
    let head = keep * 2 / 3;
    let tail = keep - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(len - tail).collect();
    format!(
        "{start}\n[... {} characters left out to fit the context limit ...]\n{end}",
        len - head - tail
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(desc: &str) -> TaskSpec {
        TaskFile::parse(&format!("tasks:\n  - {{id: t1, description: '{desc}'}}\n"))
            .unwrap()
            .tasks
            .remove(0)
    }

    #[test]
    fn renders_role_task_context_and_marked_files() {
        let t = task("Add a health endpoint");
        let p = render(
            "dev",
            DEV,
            &t,
            vec![Skill {
                name: "rust".into(),
                body: "Use anyhow.".into(),
            }],
            vec![ContextItem {
                label: "architect's design".into(),
                text: "Put it in api.rs".into(),
            }],
            vec![FileItem {
                path: "src/api.rs".into(),
                content: "fn main() {}".into(),
            }],
            10_000,
        )
        .unwrap();
        assert!(p.truncated.is_none());
        for part in [
            "You are the developer",
            "Build on the context",
            "# Task t1",
            "Add a health endpoint",
            "# Skill: rust",
            "Use anyhow.",
            "# Context: architect's design",
            "Put it in api.rs",
            "===== BEGIN FILE src/api.rs =====\nfn main() {}\n===== END FILE src/api.rs =====",
        ] {
            assert!(p.text.contains(part), "{part} missing from:\n{}", p.text);
        }
    }

    #[test]
    fn over_the_limit_cuts_files_before_the_design() {
        let t = task("Refactor the parser");
        let design = format!("DESIGN-START {} DESIGN-END", "d".repeat(2_000));
        let big = format!("FILE-START {} FILE-END", "x".repeat(40_000));
        let p = render(
            "dev",
            DEV,
            &t,
            vec![],
            vec![ContextItem {
                label: "architect's design".into(),
                text: design.clone(),
            }],
            vec![FileItem {
                path: "big.rs".into(),
                content: big,
            }],
            2_000,
        )
        .unwrap();
        let (original, cut) = p.truncated.expect("cut");
        assert!(original > 10_000);
        assert_eq!(cut, ["file big.rs"]);
        assert!(
            estimate_tokens(&p.text) <= 2_000,
            "{}",
            estimate_tokens(&p.text)
        );
        // The task and the design survive whole; the file keeps its head and tail.
        assert!(p.text.contains("Refactor the parser") && p.text.contains(&design));
        assert!(p.text.contains("FILE-START") && p.text.contains("FILE-END"));
        assert!(p.text.contains("characters left out"));
    }

    #[test]
    fn files_outside_the_workspace_are_refused() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        std::fs::write(ws.path().join("ok.txt"), "fine").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(
            outside.path().join("secret.txt"),
            ws.path().join("link.txt"),
        )
        .unwrap();
        let mut t = task("x");
        t.files = vec!["ok.txt".into()];
        assert_eq!(load_files(ws.path(), &t).unwrap()[0].content, "fine");
        for bad in ["../x", "link.txt", "/etc/passwd"] {
            t.files = vec![bad.into()];
            assert!(load_files(ws.path(), &t).is_err(), "{bad}");
        }
        t.files = vec!["link.txt".into()];
        let err = load_files(ws.path(), &t).unwrap_err().to_string();
        assert!(err.contains("outside the workspace"), "{err}");
    }

    #[test]
    fn skills_named_or_mentioned() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rust.md"), "RUST SKILL").unwrap();
        std::fs::write(dir.path().join("sql.md"), "SQL SKILL").unwrap();
        std::fs::write(dir.path().join("docker.md"), "DOCKER SKILL").unwrap();
        let mut t = task("Fix the Rust build");
        t.skills = vec!["sql".into()];
        let names: Vec<String> = select_skills(dir.path(), &t)
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["rust", "sql"]);
        t.skills = vec!["nope".into()];
        assert!(
            select_skills(dir.path(), &t)
                .unwrap_err()
                .to_string()
                .contains("nope.md")
        );
    }
}
