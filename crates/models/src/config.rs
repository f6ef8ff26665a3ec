//! Provider configuration (as found in the host's config file) and [`build`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::anthropic::{ANTHROPIC_BASE_URL, Anthropic};
use crate::http::{HttpOptions, ProviderSettings, RetryPolicy};
use crate::openai::{OPENAI_BASE_URL, OpenAiCompatible};
use crate::{ModelError, ModelProvider};

/// Which wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI Chat Completions: OpenAI, Ollama, vLLM, llama.cpp, GLM, Kimi, ...
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
    /// The host's embedded offline model. Not built by this crate (see [`build`]).
    Offline,
}

impl ProviderKind {
    /// The spelling in configuration: `openai`, `anthropic`, `offline`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Offline => "offline",
        }
    }
}

/// One model provider as configured, e.g. in TOML:
///
/// ```toml
/// kind = "openai"
/// base_url = "http://127.0.0.1:11434/v1"   # Ollama
/// model = "qwen2.5:7b"
/// ```
///
/// Keys are never stored here: `api_key_env` names the environment variable that holds
/// the key. Defaults when it is absent: `anthropic` reads `ANTHROPIC_API_KEY`; `openai`
/// without a `base_url` (the real OpenAI) reads `OPENAI_API_KEY`; `openai` with a
/// `base_url` (a local or self-hosted server) sends no key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Which wire protocol the provider speaks.
    pub kind: ProviderKind,
    /// Defaults: `https://api.openai.com/v1`, `https://api.anthropic.com`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Name of the env var holding the API key (never the key itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Default model id, used by requests whose `model` is empty.
    #[serde(default)]
    pub model: String,
    /// Retries after the first attempt (so 2 = at most 3 requests).
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Connect + response-headers timeout, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Longest silence between two streamed chunks, in milliseconds.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// Extra (non-secret) request headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

fn default_max_retries() -> u32 {
    RetryPolicy::default().max_retries
}
fn default_timeout_ms() -> u64 {
    HttpOptions::default().timeout.as_millis() as u64
}
fn default_idle_timeout_ms() -> u64 {
    HttpOptions::default().idle_timeout.as_millis() as u64
}

impl ProviderConfig {
    /// A provider of `kind` with default model `model`, default URL, key variable,
    /// retries and timeouts.
    pub fn new(kind: ProviderKind, model: impl Into<String>) -> Self {
        Self {
            kind,
            base_url: None,
            api_key_env: None,
            model: model.into(),
            max_retries: default_max_retries(),
            timeout_ms: default_timeout_ms(),
            idle_timeout_ms: default_idle_timeout_ms(),
            headers: BTreeMap::new(),
        }
    }

    /// The env var the key is read from, after defaults (`None`: no key is sent).
    pub fn key_env(&self) -> Option<String> {
        match (&self.api_key_env, self.kind, &self.base_url) {
            (Some(var), _, _) => Some(var.clone()),
            (None, ProviderKind::Anthropic, _) => Some("ANTHROPIC_API_KEY".into()),
            (None, ProviderKind::OpenAi, None) => Some("OPENAI_API_KEY".into()),
            _ => None,
        }
    }

    /// The settings a provider is built from, reading the key through `env`.
    pub fn settings(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ProviderSettings, ModelError> {
        let default_base = match self.kind {
            ProviderKind::OpenAi => OPENAI_BASE_URL,
            ProviderKind::Anthropic => ANTHROPIC_BASE_URL,
            ProviderKind::Offline => return Err(offline_error()),
        };
        let key_env = self.key_env();
        let api_key = match &key_env {
            None => None,
            Some(var) => {
                if looks_like_a_key(var) {
                    return Err(ModelError::Config(
                        "api_key_env must be the NAME of an env var holding the key, not the key itself \
                         (and that key should now be rotated)"
                            .into(),
                    ));
                }
                match env(var).filter(|v| !v.trim().is_empty()) {
                    Some(k) => Some(k.trim().to_string()),
                    None => {
                        return Err(ModelError::Config(format!(
                            "the {} provider needs an API key: set the {var} env var (or point api_key_env at the variable that holds it)",
                            self.kind.as_str()
                        )));
                    }
                }
            }
        };
        let mut s =
            ProviderSettings::new(self.base_url.clone().unwrap_or_else(|| default_base.into()));
        s.api_key = api_key;
        s.key_env = key_env;
        s.extra_headers = self
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        s.http = HttpOptions {
            timeout: Duration::from_millis(self.timeout_ms.max(1)),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms.max(1)),
            retry: RetryPolicy {
                max_retries: self.max_retries,
                ..RetryPolicy::default()
            },
        };
        s.default_model = Some(self.model.clone()).filter(|m| !m.is_empty());
        s.id = Some(self.kind.as_str().to_string());
        Ok(s)
    }
}

fn looks_like_a_key(var: &str) -> bool {
    var.starts_with("sk-")
        || var.len() > 64
        || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn offline_error() -> ModelError {
    ModelError::Config(
        "kind = \"offline\" is the host's built-in offline model: the host builds it, \
         capstan_models::build only builds network providers (openai, anthropic)"
            .into(),
    )
}

/// Build a network provider from its config, reading the key from the process env.
///
/// `kind = "offline"` returns [`ModelError::Config`]: the offline model lives in the
/// host, which should check [`ProviderConfig::kind`] first.
pub fn build(config: &ProviderConfig) -> Result<Arc<dyn ModelProvider>, ModelError> {
    build_with_env(config, &|var| std::env::var(var).ok())
}

/// [`build`] with an explicit env lookup (tests, or keys from another source).
pub fn build_with_env(
    config: &ProviderConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ModelProvider>, ModelError> {
    let settings = config.settings(env)?;
    Ok(match config.kind {
        ProviderKind::OpenAi => Arc::new(OpenAiCompatible::new(settings)?),
        ProviderKind::Anthropic => Arc::new(Anthropic::new(settings)?),
        ProviderKind::Offline => return Err(offline_error()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn parses_toml_with_defaults_and_rejects_unknown_fields() {
        let c: ProviderConfig = toml::from_str(
            r#"
            kind = "openai"
            base_url = "http://127.0.0.1:11434/v1"
            model = "qwen2.5:7b"
            "#,
        )
        .unwrap();
        assert_eq!(c.kind, ProviderKind::OpenAi);
        assert_eq!(c.max_retries, 2);
        assert_eq!(c.key_env(), None);
        assert!(build_with_env(&c, &no_env).is_ok());

        let err = toml::from_str::<ProviderConfig>(
            "kind = \"openai\"\nmodel = \"x\"\napi_key = \"sk-1\"",
        )
        .unwrap_err();
        assert!(err.to_string().contains("api_key"), "{err}");
        assert!(toml::from_str::<ProviderConfig>("kind = \"gemini\"\nmodel = \"x\"").is_err());
    }

    #[test]
    fn missing_key_names_the_variable() {
        let c = ProviderConfig::new(ProviderKind::Anthropic, "claude-sonnet-4-5");
        let err = build_with_env(&c, &no_env).err().unwrap().to_string();
        assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
        let ok =
            build_with_env(&c, &|v| (v == "ANTHROPIC_API_KEY").then(|| "k".to_string())).unwrap();
        assert_eq!(ok.id(), "anthropic");

        let mut c = ProviderConfig::new(ProviderKind::OpenAi, "gpt-4o");
        let err = build_with_env(&c, &no_env).err().unwrap().to_string();
        assert!(err.contains("OPENAI_API_KEY"), "{err}");
        c.api_key_env = Some("sk-proj-abcdef".into());
        let err = build_with_env(&c, &no_env).err().unwrap().to_string();
        assert!(err.contains("NAME of an env var"), "{err}");
    }

    #[test]
    fn offline_is_left_to_the_host() {
        let c = ProviderConfig::new(ProviderKind::Offline, "offline");
        let err = build_with_env(&c, &no_env).err().unwrap().to_string();
        assert!(err.contains("host"), "{err}");
    }
}
