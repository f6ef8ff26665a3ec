//! Per-model prices, to turn [`Usage`] into dollars for budgets.
//!
//! A table maps a model pattern to USD per million input and output tokens. A pattern is
//! an exact id or a glob where `*` matches any run of characters (`claude-opus-*`,
//! `claude-*haiku*`). Lookup: an exact id wins; otherwise the matching glob with the
//! most literal characters (the most specific) wins; ties go to the alphabetically
//! first pattern, so the answer never depends on map order. No match: `None`, which
//! callers must report as "cost unknown" rather than guess.
//!
//! The defaults are list prices for standard (non-batch, non-cached, <=200k context)
//! usage, current when written; prices change, so config can override any entry
//! ([`PriceTable::merge`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Usage;

/// USD per one million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// USD per million input (prompt) tokens.
    pub input: f64,
    /// USD per million output (generated) tokens.
    pub output: f64,
}

impl Price {
    /// A price from USD per million input and output tokens.
    pub const fn new(input: f64, output: f64) -> Self {
        Self { input, output }
    }
    /// Zero for both (local models).
    pub const FREE: Price = Price::new(0.0, 0.0);

    /// USD for `usage` at this price.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input + usage.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

/// Model pattern -> price. Serialises as a plain map, e.g. in TOML:
///
/// ```toml
/// [pricing]
/// "gpt-4o" = { input = 2.5, output = 10.0 }
/// "my-finetune-*" = { input = 1.0, output = 2.0 }
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceTable {
    entries: BTreeMap<String, Price>,
}

/// (pattern, input, output) for [`PriceTable::defaults`].
const DEFAULTS: &[(&str, f64, f64)] = &[
    // Anthropic families, from the seed's table: Opus $15/$75, Sonnet $3/$15,
    // Haiku $0.25/$1.25. Both naming schemes: claude-3-opus-..., claude-opus-4-1-...
    ("claude-opus-*", 15.0, 75.0),
    ("claude-*-opus*", 15.0, 75.0),
    ("claude-sonnet-*", 3.0, 15.0),
    ("claude-*-sonnet*", 3.0, 15.0),
    ("claude-*haiku*", 0.25, 1.25),
    // Newer models whose list price differs from their family's row above (more
    // specific patterns, so they win).
    ("claude-opus-4-5*", 5.0, 25.0),
    ("claude-3-5-haiku*", 0.80, 4.0),
    ("claude-haiku-4-5*", 1.0, 5.0),
    // OpenAI. Only ids whose price is known: `gpt-4o` snapshots differ (the 2024-05-13
    // one costs $5/$15) and variants (audio, realtime) are priced apart.
    ("gpt-4o", 2.50, 10.0),
    ("gpt-4o-2024-08-06", 2.50, 10.0),
    ("gpt-4o-2024-11-20", 2.50, 10.0),
    ("gpt-4o-2024-05-13", 5.0, 15.0),
    ("gpt-4o-mini", 0.15, 0.60),
    ("gpt-4o-mini-2024-07-18", 0.15, 0.60),
    ("gpt-4.1", 2.0, 8.0),
    ("gpt-4.1-2025-04-14", 2.0, 8.0),
    ("gpt-4.1-mini", 0.40, 1.60),
    ("gpt-4.1-mini-2025-04-14", 0.40, 1.60),
    ("gpt-4.1-nano", 0.10, 0.40),
    ("gpt-4.1-nano-2025-04-14", 0.10, 0.40),
    // Local models cost nothing per token. Ollama names models `family:tag`; hosted
    // APIs never use a colon in these families, so `family*:*` cannot catch them. An
    // untagged local name (`llama3.2`) stays unknown: add it in config if wanted.
    ("llama*:*", 0.0, 0.0),
    ("codellama*:*", 0.0, 0.0),
    ("qwen*:*", 0.0, 0.0),
    ("mistral*:*", 0.0, 0.0),
    ("mixtral*:*", 0.0, 0.0),
    ("gemma*:*", 0.0, 0.0),
    ("phi*:*", 0.0, 0.0),
    ("deepseek*:*", 0.0, 0.0),
    ("gpt-oss:*", 0.0, 0.0),
    ("local/*", 0.0, 0.0),
    ("ollama/*", 0.0, 0.0),
    ("*.gguf", 0.0, 0.0),
    // The host's embedded offline model.
    ("offline", 0.0, 0.0),
    ("capstan-offline*", 0.0, 0.0),
];

impl PriceTable {
    /// An empty table: every model is unknown.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in table (see the module docs).
    pub fn defaults() -> Self {
        let mut t = Self::empty();
        for &(pattern, input, output) in DEFAULTS {
            t.insert(pattern, Price::new(input, output));
        }
        t
    }

    /// Add or replace one entry.
    pub fn insert(&mut self, pattern: impl Into<String>, price: Price) {
        self.entries.insert(pattern.into(), price);
    }

    /// Entries of `other` (e.g. from config) replace or extend this table's.
    pub fn merge(&mut self, other: &PriceTable) {
        for (k, v) in &other.entries {
            self.entries.insert(k.clone(), *v);
        }
    }

    /// Every pattern and its price, in pattern order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Price)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The price of `model`, with the pattern that matched.
    pub fn lookup(&self, model: &str) -> Option<(&str, Price)> {
        if let Some((k, p)) = self.entries.get_key_value(model) {
            return Some((k.as_str(), *p));
        }
        let mut best: Option<(&str, Price, usize)> = None;
        for (pattern, price) in &self.entries {
            if !pattern.contains('*') || !glob_match(pattern, model) {
                continue;
            }
            let literal = pattern.chars().filter(|&c| c != '*').count();
            // BTreeMap order is alphabetical, so `>` keeps the first of equals.
            if best.is_none_or(|(_, _, l)| literal > l) {
                best = Some((pattern, *price, literal));
            }
        }
        best.map(|(k, p, _)| (k, p))
    }

    /// The price of `model` (see [`PriceTable::lookup`]); `None` when no pattern matches.
    pub fn price(&self, model: &str) -> Option<Price> {
        self.lookup(model).map(|(_, p)| p)
    }

    /// USD for `usage` on `model`; `None` when the model is not in the table.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model).map(|p| p.cost(usage))
    }
}

/// `*` matches any (possibly empty) run of characters; everything else is literal.
fn glob_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    let Some(mut text) = text.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return text.is_empty(); // no `*` at all
    };
    for part in middle {
        match text.find(part) {
            Some(i) => text = &text[i + part.len()..],
            None => return false,
        }
    }
    text.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(i: u64, o: u64) -> Usage {
        Usage {
            input_tokens: i,
            output_tokens: o,
            estimated: false,
            cost_usd: None,
        }
    }

    fn approx(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn glob() {
        assert!(glob_match("claude-*haiku*", "claude-3-haiku-20240307"));
        assert!(glob_match("claude-*haiku*", "claude-haiku-4-5"));
        assert!(glob_match("a*", "a"));
        assert!(glob_match("*.gguf", "models/x.gguf"));
        assert!(!glob_match("*.gguf", "x.gguf.bak"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxcyyb"));
        assert!(!glob_match("ab*ba", "aba")); // prefix and suffix must not overlap
        assert!(!glob_match("gpt-4o", "gpt-4o-mini"));
    }

    #[test]
    fn seed_rows() {
        let t = PriceTable::defaults();
        let m = usage(1_000_000, 1_000_000);
        for (model, total) in [
            ("claude-3-opus-20240229", 90.0),
            ("claude-opus-4-1-20250805", 90.0),
            ("claude-opus-4-20250514", 90.0),
            ("claude-3-5-sonnet-20241022", 18.0),
            ("claude-3-7-sonnet-latest", 18.0),
            ("claude-sonnet-4-5-20250929", 18.0),
            ("claude-3-haiku-20240307", 1.5),
        ] {
            assert!(
                approx(t.cost(model, &m), total),
                "{model}: {:?}",
                t.cost(model, &m)
            );
        }
        // Input and output priced separately: 1000 in + 2000 out on Sonnet.
        assert!(approx(
            t.cost("claude-sonnet-4-5", &usage(1000, 2000)),
            0.003 + 0.030
        ));
    }

    #[test]
    fn more_specific_patterns_win() {
        let t = PriceTable::defaults();
        assert_eq!(
            t.price("claude-haiku-4-5-20251001"),
            Some(Price::new(1.0, 5.0))
        );
        assert_eq!(
            t.price("claude-3-5-haiku-latest"),
            Some(Price::new(0.8, 4.0))
        );
        assert_eq!(t.price("claude-opus-4-5"), Some(Price::new(5.0, 25.0)));
        assert_eq!(t.price("gpt-4o"), Some(Price::new(2.5, 10.0)));
        assert_eq!(t.price("gpt-4o-mini"), Some(Price::new(0.15, 0.60)));
        assert_eq!(t.price("qwen2.5:7b"), Some(Price::FREE));
        assert_eq!(t.price("llama3.2:latest"), Some(Price::FREE));
    }

    #[test]
    fn unknown_models_are_unknown() {
        let t = PriceTable::defaults();
        for model in [
            "gpt-4o-realtime-preview",
            "gemini-2.0-flash",
            "llama3.2",
            "",
            "mistral-large-latest",
        ] {
            assert_eq!(t.cost(model, &usage(10, 10)), None, "{model}");
        }
        assert_eq!(PriceTable::empty().cost("gpt-4o", &usage(1, 1)), None);
    }

    #[test]
    fn config_overrides_and_adds() {
        let mut t = PriceTable::defaults();
        let cfg: PriceTable = toml::from_str(
            r#"
            "gpt-4o" = { input = 1.0, output = 2.0 }
            "my-model-*" = { input = 0.5, output = 0.5 }
            "#,
        )
        .unwrap();
        t.merge(&cfg);
        assert_eq!(t.price("gpt-4o"), Some(Price::new(1.0, 2.0)));
        assert_eq!(
            t.lookup("my-model-v2"),
            Some(("my-model-*", Price::new(0.5, 0.5)))
        );
        assert!(
            toml::from_str::<PriceTable>(r#""x" = { input = 1.0, output = 2.0, cached = 1.0 }"#)
                .is_err()
        );
    }
}
