//! What a run has cost, against its budget: a warning at 80%, a stop past it.

use super::{Host, Stop};
use crate::plugins::context::RunContext;
use capstan_protocol::{Event, FailureReason, Usage};

/// The usage of a run so far, and whether it was warned.
#[derive(Default)]
pub(super) struct Meter {
    pub(super) usage: Usage,
    warned: bool,
}

impl Meter {
    /// The meter of a resumed run: what it had spent before.
    pub(super) fn resumed(usage: Usage) -> Self {
        Self {
            usage,
            warned: false,
        }
    }

    /// The run's usage: its own model calls and what external MCP servers'
    /// sampling requests cost (metered by the run's sampler).
    pub(super) fn total(&self, run: &RunContext) -> Usage {
        let mut total = self.usage;
        if let Some(sampler) = &run.services.sampler {
            total.add(&sampler.spent());
        }
        total
    }
}

impl Host {
    /// Add a model call's usage; warn at 80% of a budget, stop past it.
    pub(super) fn account(&self, m: &mut Meter, usage: Usage, run: &RunContext) -> Option<Stop> {
        m.usage.add(&usage);
        if let Some(sampler) = &run.services.sampler {
            sampler.note_run_usage(&usage);
        }
        if usage.input_tokens + usage.output_tokens > 0 {
            run.events.emit(Event::Usage {
                usage,
                model: self.model.id(),
            });
        }
        let total = m.total(run);
        let spent = total.cost_usd.unwrap_or(0.0);
        let tokens = total.input_tokens + total.output_tokens;
        if let Some(limit) = self.config.budget_usd {
            if spent > limit {
                return Some(Stop::Fail(
                    FailureReason::BudgetExceeded,
                    format!("spent ${spent:.4} of a ${limit:.4} run budget"),
                ));
            }
            if spent > 0.8 * limit && !m.warned {
                m.warned = true;
                run.events.emit(Event::BudgetWarning {
                    spent_usd: spent,
                    limit_usd: limit,
                    message: format!(
                        "this run has used {:.0}% of its ${limit:.2} budget",
                        100.0 * spent / limit
                    ),
                });
            }
        }
        if let Some(limit) = self.config.budget_tokens
            && tokens > limit
        {
            return Some(Stop::Fail(
                FailureReason::BudgetExceeded,
                format!("used {tokens} tokens of a {limit}-token run budget"),
            ));
        }
        None
    }
}
