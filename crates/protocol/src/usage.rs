//! Tokens and cost: of one model call, one run, one session.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Token counts and cost, per model call, per run or per session.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Usage {
    /// Tokens sent to the model.
    pub input_tokens: u64,
    /// Tokens the model generated.
    pub output_tokens: u64,
    /// True when a provider reported no usage for some call and Capstan
    /// estimated it with [`estimate_tokens`]: budgets built on it are approximate.
    #[serde(default)]
    pub estimated: bool,
    /// USD; absent when the model has no price in the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Adds another call's usage: tokens and cost sum (a known cost plus an
    /// unknown one stays known), `estimated` sticks.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.estimated |= other.estimated;
        if let Some(cost) = other.cost_usd {
            *self.cost_usd.get_or_insert(0.0) += cost;
        }
    }
}

/// The one fallback token count used when a provider reports none:
/// characters / 4, rounded up, and at least 1 (a request or an answer is never
/// free). Characters, not bytes, so text in any script counts alike.
pub fn estimate_tokens(text: &str) -> u64 {
    tokens_for_chars(text.chars().count())
}

/// [`estimate_tokens`] for text of `chars` characters, when the text is in pieces.
pub fn tokens_for_chars(chars: usize) -> u64 {
    (chars as u64).div_ceil(4).max(1)
}
