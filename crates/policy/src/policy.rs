//! Workspace policy: profiles, allow/deny prefix rules, and the verdict.
//!
//! Order of decision (first match wins):
//! 1. `locked` profile → deny everything.
//! 2. Empty command → deny.
//! 3. Any command anywhere in the line (including nested under `sh -c`,
//!    `env`, `xargs`, `$(...)`, functions, ...) matching a `deny` prefix →
//!    deny.
//! 4. The command writes a protected location (`.git/config`, `.git/hooks/`,
//!    `.envrc`, `.capstan/`, the workspace's `capstan.toml`, ...; see
//!    [`crate::protected_path`]) → ask, in every profile and whatever the
//!    allow rules say. The explanation names the file.
//! 5. Overall risk within the profile's auto-run level (`cautious`:
//!    `read_only`; `trusted`: `read_only` and `write`) → allow.
//! 6. Every finding above that level belongs to a command matched by an
//!    `allow` prefix → allow. Findings not tied to a command (redirections,
//!    assignments such as `PATH=...`, dynamic command names, parse
//!    failures) can never be allowed this way, so `allow = ["cargo test"]`
//!    does not let `cargo test; rm -rf /` or `cargo test > .git/config`
//!    through.
//! 7. Otherwise → ask.
//!
//! Network through the egress proxy ([`Policy::network_proxy`], set by a
//! host when `[network]` has a policy): a network finding weighs as a write
//! (it may hide one, `curl -o x`), so `trusted` runs it without asking and the
//! proxy decides each connection; `cautious` still asks, and so do other
//! findings of the same command.
//!
//! Network: `network = false` does not change verdicts. Network-risk
//! commands are never auto-run by a profile, so they reach the user as
//! `ask`, and the explanation says that the sandbox will block the network
//! even if they are approved. `network`, `sandbox` and `env_allow` are
//! otherwise carried for the sandbox, which enforces them.

use serde::{Deserialize, Serialize};

use crate::display;
use crate::risk::Risk;
use crate::word::scan_word;
use crate::{Classification, CommandInfo, Context, classify_argv_in, classify_shell_in};

pub use capstan_protocol::{GrantSource, Profile, SandboxMode};

/// A workspace's command policy, as written in its TOML or JSON config.
///
/// Every field has a default and unknown fields are rejected, so a typo
/// like `deny_rules = [...]` fails loudly instead of silently allowing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// How much runs without asking.
    pub profile: Profile,
    /// Command prefixes that may run without asking (see module docs).
    pub allow: Vec<String>,
    /// Command prefixes that are refused wherever they appear.
    pub deny: Vec<String>,
    /// Whether the sandbox grants network access (default `false`).
    pub network: bool,
    /// Set by the host (never read from `[policy]`) when the workspace's
    /// network goes through the egress proxy: network findings weigh as writes
    /// (the proxy decides each connection by the `[network]` rules).
    #[serde(skip)]
    pub network_proxy: bool,
    /// Whether commands must run sandboxed.
    pub sandbox: SandboxMode,
    /// Environment variables passed through to commands.
    pub env_allow: Vec<String>,
}

/// What to do with a command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Run it without asking.
    Allow,
    /// Ask the user first.
    Ask,
    /// Refuse it.
    Deny {
        /// Why, for the user and the agent.
        reason: String,
    },
}

/// A verdict with the classification and explanation behind it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evaluation {
    /// What to do.
    pub verdict: Verdict,
    /// Why, in human-readable sentences (which findings made it ask, which
    /// rules allowed it, the network note, ...).
    pub explanation: Vec<String>,
    /// The classification the verdict was based on.
    pub classification: Classification,
    /// For an allow: who granted the command what it runs with (`none` for a
    /// read-only command, which is granted nothing; the profile's standing
    /// rule; an allow rule). `None` for a deny or an ask.
    #[serde(default)]
    pub allowed_by: Option<GrantSource>,
}

/// A malformed policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A rule is not a plain sequence of literal words.
    #[error("{kind} rule `{rule}` is not a plain command prefix: {why}")]
    BadRule {
        /// `allow` or `deny`.
        kind: &'static str,
        /// The rule as written.
        rule: String,
        /// What is wrong with it.
        why: String,
    },
}

/// A rule split into normalised words.
fn rule_words(rule: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    for raw in split_rule(rule)? {
        let scan = scan_word(&raw);
        if !scan.substitutions.is_empty() || !scan.hazards.is_empty() {
            return Err("it contains an expansion".into());
        }
        for a in scan.args {
            if !a.is_static() {
                return Err("it contains an expansion or glob".into());
            }
            words.push(a.text);
        }
    }
    if words.is_empty() {
        return Err("it is empty".into());
    }
    Ok(words)
}

/// Splits a rule at unquoted whitespace (shell quoting respected).
fn split_rule(rule: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = rule.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            (None, ';' | '|' | '&' | '<' | '>' | '(' | ')' | '`') => {
                return Err(format!("it contains the operator `{c}`"));
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                cur.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                cur.push(c);
            }
            (_, '\\') => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (_, c) => cur.push(c),
        }
    }
    if quote.is_some() {
        return Err("it has an unterminated quote".into());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

/// Whether `words` is a word-level prefix of the command. The first word
/// matches the command's `argv[0]` or its resolved name, so `rm` matches
/// `/bin/rm`.
fn prefix_matches(words: &[String], argv: &[String], name: &str) -> bool {
    if words.len() > argv.len() {
        return false;
    }
    (words[0] == argv[0] || words[0] == name) && words[1..] == argv[1..words.len()]
}

/// Alternative spellings of a command that a deny rule should also see:
/// git's global options (`git -C d --no-pager push`) are dropped, as is
/// cargo's `+toolchain`, so they cannot be used to slip past `git push`.
fn canonical_forms(cmd: &CommandInfo) -> Vec<Vec<String>> {
    let argv = &cmd.argv;
    let mut forms = vec![argv.clone()];
    match cmd.name.as_str() {
        "git" => {
            let mut out = vec![argv[0].clone()];
            let mut i = 1;
            while i < argv.len() {
                let t = argv[i].as_str();
                if matches!(
                    t,
                    "-C" | "-c"
                        | "--git-dir"
                        | "--work-tree"
                        | "--namespace"
                        | "--config-env"
                        | "--super-prefix"
                ) {
                    i += 2;
                } else if t.starts_with('-') {
                    i += 1;
                } else {
                    break;
                }
            }
            out.extend(argv[i.min(argv.len())..].iter().cloned());
            forms.push(out);
        }
        "cargo" if argv.get(1).is_some_and(|a| a.starts_with('+')) => {
            let mut out = vec![argv[0].clone()];
            out.extend(argv[2..].iter().cloned());
            forms.push(out);
        }
        _ => {}
    }
    forms
}

impl Policy {
    /// Checks that every allow and deny rule is a plain command prefix.
    ///
    /// Evaluation does not require this: a malformed rule is still applied
    /// on a best-effort whitespace split. Hosts should call it when loading
    /// a policy and report the error to the user.
    pub fn validate(&self) -> Result<(), PolicyError> {
        for (kind, rules) in [("allow", &self.allow), ("deny", &self.deny)] {
            for rule in rules {
                rule_words(rule).map_err(|why| PolicyError::BadRule {
                    kind,
                    rule: rule.clone(),
                    why,
                })?;
            }
        }
        Ok(())
    }

    fn rules(rules: &[String]) -> Vec<(String, Vec<String>)> {
        rules
            .iter()
            .filter_map(|r| {
                let words = rule_words(r)
                    .unwrap_or_else(|_| r.split_whitespace().map(str::to_owned).collect());
                (!words.is_empty()).then(|| (r.clone(), words))
            })
            .collect()
    }

    /// Classifies a raw shell command line and decides what to do with it.
    ///
    /// When the line could not be fully analysed (risk `unknown`), deny
    /// rules are also matched against the raw text, split at whitespace and
    /// shell punctuation, so that a construct the parser does not
    /// understand cannot hide a denied command from its rule.
    pub fn evaluate_shell(&self, command: &str) -> Evaluation {
        self.evaluate_shell_in(command, &Context::default())
    }

    /// [`Policy::evaluate_shell`] for a command run in a known place (see
    /// [`Context`]): the host's entry point.
    pub fn evaluate_shell_in(&self, command: &str, context: &Context) -> Evaluation {
        let classification = classify_shell_in(command, context);
        if classification.risk == Risk::Unknown
            && self.profile != Profile::Locked
            && let Some(rule) = self.deny_in_text(command)
        {
            let reason = format!(
                "the command could not be fully analysed and its text contains the denied command `{rule}`"
            );
            return Evaluation {
                verdict: Verdict::Deny {
                    reason: reason.clone(),
                },
                explanation: vec![reason],
                classification,
                allowed_by: None,
            };
        }
        self.evaluate(classification)
    }

    fn deny_in_text(&self, text: &str) -> Option<String> {
        let tokens: Vec<&str> = text
            .split(|c: char| c.is_whitespace() || ";|&()<>{}$`'\"\\".contains(c))
            .filter(|t| !t.is_empty())
            .collect();
        let base = |t: &str| t.rsplit('/').next().unwrap_or(t).to_owned();
        Self::rules(&self.deny)
            .into_iter()
            .find_map(|(rule, words)| {
                tokens
                    .windows(words.len())
                    .any(|w| {
                        (w[0] == words[0] || base(w[0]) == words[0])
                            && w[1..].iter().zip(&words[1..]).all(|(a, b)| a == b)
                    })
                    .then_some(rule)
            })
    }

    /// Classifies an argv run without a shell and decides what to do with it.
    pub fn evaluate_argv(&self, argv: &[String]) -> Evaluation {
        self.evaluate_argv_in(argv, &Context::default())
    }

    /// [`Policy::evaluate_argv`] for a command run in a known place.
    pub fn evaluate_argv_in(&self, argv: &[String], context: &Context) -> Evaluation {
        self.evaluate(classify_argv_in(argv, context))
    }

    /// Decides what to do with an existing classification.
    pub fn evaluate(&self, classification: Classification) -> Evaluation {
        let (verdict, explanation, allowed_by) = self.decide(&classification);
        Evaluation {
            verdict,
            explanation,
            classification,
            allowed_by,
        }
    }

    /// The verdict, why, and for an allow, who granted it: nobody for a
    /// read-only command, the profile's standing rule, or an allow rule.
    fn decide(&self, c: &Classification) -> (Verdict, Vec<String>, Option<GrantSource>) {
        let Some(limit) = self.profile.auto_run_up_to() else {
            let reason = "the workspace profile is `locked`: no commands may run".to_owned();
            return (
                Verdict::Deny {
                    reason: reason.clone(),
                },
                vec![reason],
                None,
            );
        };
        if c.empty {
            let reason = "the command is empty: there is nothing to run".to_owned();
            return (
                Verdict::Deny {
                    reason: reason.clone(),
                },
                vec![reason],
                None,
            );
        }
        let deny = Self::rules(&self.deny);
        for cmd in &c.commands {
            for form in canonical_forms(cmd) {
                if let Some((rule, _)) = deny
                    .iter()
                    .find(|(_, words)| prefix_matches(words, &form, &cmd.name))
                {
                    let reason = format!(
                        "`{}` matches the deny rule `{rule}`",
                        display::argv(&cmd.argv)
                    );
                    return (
                        Verdict::Deny {
                            reason: reason.clone(),
                        },
                        vec![reason],
                        None,
                    );
                }
            }
        }
        if !c.protected.is_empty() {
            let mut explanation = vec![
                "the command writes a protected location, which every profile asks about (even `trusted`, whatever the allow rules say)"
                    .to_owned(),
            ];
            explanation.extend(c.protected.iter().cloned());
            return (Verdict::Ask, explanation, None);
        }
        if c.risk <= limit {
            let why = format!(
                "the command is {} and the `{}` profile runs that without asking",
                c.risk, self.profile
            );
            let by = if c.risk == Risk::ReadOnly {
                GrantSource::None
            } else {
                GrantSource::Profile
            };
            return (Verdict::Allow, vec![why], Some(by));
        }
        let allow = Self::rules(&self.allow);
        let allowed_by = |index: usize| -> Option<&str> {
            let cmd = c.commands.get(index)?;
            if cmd.dynamic {
                return None;
            }
            allow
                .iter()
                .find(|(_, words)| prefix_matches(words, &cmd.argv, &cmd.name))
                .map(|(r, _)| r.as_str())
        };
        let mut blocking = Vec::new();
        let mut used_rules: Vec<&str> = Vec::new();
        let mut proxied = false;
        for f in c.findings.iter().filter(|f| f.risk > limit) {
            // A network finding may hide a write (`curl -o x`), so through
            // the proxy it weighs as a write: `trusted` runs it, `cautious`
            // still asks.
            if self.network_proxy && f.risk == Risk::Network && Risk::Write <= limit {
                proxied = true;
                continue;
            }
            match f.command.and_then(allowed_by) {
                Some(rule) => {
                    if !used_rules.contains(&rule) {
                        used_rules.push(rule);
                    }
                }
                None => blocking.push(f),
            }
        }
        if blocking.is_empty() {
            let mut why = Vec::new();
            if !used_rules.is_empty() {
                why.push(format!(
                    "every part above {limit} is covered by the allow rule(s) {}",
                    used_rules
                        .iter()
                        .map(|r| format!("`{r}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if proxied {
                why.push(PROXY_DECIDES.into());
            }
            let by = if used_rules.is_empty() {
                GrantSource::Profile
            } else {
                GrantSource::AllowRule
            };
            return (Verdict::Allow, why, Some(by));
        }
        let mut explanation: Vec<String> = Vec::new();
        explanation.push(format!(
            "the command is {} and the `{}` profile only runs {limit} commands without asking",
            c.risk, self.profile
        ));
        for f in &blocking {
            if !explanation.contains(&f.reason) {
                explanation.push(f.reason.clone());
            }
        }
        if !self.network && blocking.iter().any(|f| f.risk == Risk::Network) {
            explanation.push(
                "network access is disabled for this workspace: the sandbox will block it even if approved"
                    .into(),
            );
        }
        (Verdict::Ask, explanation, None)
    }
}

/// The explanation of a network finding that did not ask (see
/// [`Policy::network_proxy`]).
pub const PROXY_DECIDES: &str = "its network access goes through the egress proxy, which decides \
                                 each connection by the workspace's [network] rules";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_split_like_shell_words() {
        assert_eq!(rule_words("git 'push'").unwrap(), ["git", "push"]);
        assert_eq!(rule_words("  cargo   test ").unwrap(), ["cargo", "test"]);
        assert!(rule_words("git push; rm").is_err());
        assert!(rule_words("$X").is_err());
        assert!(rule_words("").is_err());
    }
}
