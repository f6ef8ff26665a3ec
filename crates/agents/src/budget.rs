//! Spending: usage priced per model, accumulated across tasks (concurrent ones too),
//! and a warning before the next step would take the total over the limit.

use parking_lot::Mutex;
use std::collections::BTreeSet;

use async_trait::async_trait;
use capstan_models::{PriceTable, Usage};
use serde::Serialize;

use crate::result::TokenUsage;

/// The question a [`BudgetGate`] answers.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetWarning {
    /// US dollars spent so far in the execution.
    pub spent_usd: f64,
    /// Projected cost of the step about to start.
    pub next_step_usd: f64,
    /// The execution's budget, in US dollars.
    pub budget_usd: f64,
    /// The task of the step about to start.
    pub task: String,
    /// The agent of the step about to start.
    pub agent: String,
}

/// Decides whether to go on when the budget would be exceeded: a prompt in a terminal,
/// an approval over an API, or a fixed answer for scripts.
#[async_trait]
pub trait BudgetGate: Send + Sync {
    /// `true`: proceed (and stop asking for this execution); `false`: cancel.
    async fn proceed(&self, warning: &BudgetWarning) -> bool;
}

/// Always the same answer (non-interactive runs).
pub struct FixedGate(pub bool);

#[async_trait]
impl BudgetGate for FixedGate {
    async fn proceed(&self, _: &BudgetWarning) -> bool {
        self.0
    }
}

#[derive(Default)]
struct Spent {
    usd: f64,
    tokens: TokenUsage,
    unpriced_models: BTreeSet<String>,
}

/// The running total of one execution.
pub struct Budget {
    limit_usd: Option<f64>,
    prices: PriceTable,
    spent: Mutex<Spent>,
    /// Held while a warning is being answered, so concurrent tasks ask once, and
    /// remembers the answer: `Some(true)` means over-budget was accepted.
    decision: tokio::sync::Mutex<Option<bool>>,
}

/// What [`Budget::check`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Within budget (or no budget).
    Ok,
    /// Over budget, and the gate said go on (now or earlier).
    Approved,
    /// Over budget, and the gate said stop.
    Cancel,
}

impl Budget {
    /// A budget of `limit_usd` (`None`: no limit, never asks), pricing with `prices`.
    pub fn new(limit_usd: Option<f64>, prices: PriceTable) -> Self {
        Self {
            limit_usd,
            prices,
            spent: Mutex::new(Spent::default()),
            decision: tokio::sync::Mutex::new(None),
        }
    }

    /// The limit in US dollars; `None` for none.
    pub fn limit_usd(&self) -> Option<f64> {
        self.limit_usd
    }

    /// The price table steps are priced with.
    pub fn prices(&self) -> &PriceTable {
        &self.prices
    }

    /// USD for `usage` on `model`; `None` when the model has no price.
    pub fn price(&self, model: Option<&str>, usage: &Usage) -> Option<f64> {
        model.and_then(|m| self.prices.cost(m, usage))
    }

    /// Add a finished step's usage. `cost` is the priced cost (`None`: unknown model,
    /// remembered so the total is reported as incomplete).
    pub fn record(&self, model: Option<&str>, usage: &Usage, cost: Option<f64>) {
        let mut s = self.spent.lock();
        s.tokens.add(usage);
        match cost {
            Some(c) => s.usd += c,
            None => {
                s.unpriced_models
                    .insert(model.unwrap_or("(unknown model)").to_string());
            }
        }
    }

    /// US dollars recorded so far (priced steps only).
    pub fn spent_usd(&self) -> f64 {
        self.spent.lock().usd
    }

    /// Tokens recorded so far, priced or not.
    pub fn tokens(&self) -> TokenUsage {
        self.spent.lock().tokens
    }

    /// Models whose usage could not be priced.
    pub fn unpriced_models(&self) -> Vec<String> {
        self.spent.lock().unpriced_models.iter().cloned().collect()
    }

    /// Before a step: would `spent + next_step_usd` exceed the limit? If so, `warn` is
    /// called (to emit the warning event) and the gate decides, once per execution.
    pub async fn check(
        &self,
        next_step_usd: f64,
        task: &str,
        agent: &str,
        gate: &dyn BudgetGate,
        warn: impl FnOnce(&BudgetWarning),
    ) -> Check {
        let Some(limit) = self.limit_usd else {
            return Check::Ok;
        };
        let mut decision = self.decision.lock().await;
        let spent = self.spent_usd();
        if spent + next_step_usd <= limit {
            return Check::Ok;
        }
        match *decision {
            Some(true) => return Check::Approved,
            Some(false) => return Check::Cancel,
            None => {}
        }
        let warning = BudgetWarning {
            spent_usd: spent,
            next_step_usd,
            budget_usd: limit,
            task: task.to_string(),
            agent: agent.to_string(),
        };
        warn(&warning);
        let go = gate.proceed(&warning).await;
        *decision = Some(go);
        if go { Check::Approved } else { Check::Cancel }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accumulates_and_warns_once() {
        let b = Budget::new(Some(0.01), PriceTable::defaults());
        let u = Usage {
            input_tokens: 1000,
            output_tokens: 100,
            estimated: false,
            cost_usd: None,
        };
        // Sonnet: 1000 * 3/1M + 100 * 15/1M = 0.0045
        let c = b.price(Some("claude-sonnet-4-5"), &u);
        assert!((c.unwrap() - 0.0045).abs() < 1e-12);
        b.record(Some("claude-sonnet-4-5"), &u, c);
        let mut warned = 0;
        assert_eq!(
            b.check(0.004, "t", "dev", &FixedGate(false), |_| warned += 1)
                .await,
            Check::Ok
        );
        b.record(Some("claude-sonnet-4-5"), &u, c);
        assert_eq!(
            b.check(0.004, "t", "dev", &FixedGate(true), |w| {
                warned += 1;
                assert!((w.spent_usd - 0.009).abs() < 1e-12);
            })
            .await,
            Check::Approved
        );
        // Answered once: no second warning.
        assert_eq!(
            b.check(0.004, "t", "dev", &FixedGate(false), |_| warned += 1)
                .await,
            Check::Approved
        );
        assert_eq!(warned, 1);
        b.record(Some("mystery-model"), &u, None);
        assert_eq!(b.unpriced_models(), ["mystery-model"]);
        assert_eq!(b.tokens().total, 3300);
    }
}
