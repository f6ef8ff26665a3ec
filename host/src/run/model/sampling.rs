//! The run's model answering an external MCP server's `sampling/createMessage`
//! ([`crate::plugins::context::Sampler`]). The MCP client asks the person
//! first; this meters what the answers cost against the run's budget: a
//! request whose worst case (its prompt, estimated, plus the most it may
//! generate) would pass `budget_tokens`, or that comes after the run (its own
//! model calls and its sampling) already spent `budget_usd` (or what is left
//! of `session_budget_usd`, when less), is refused before the model is called.
//! What it spends is reported as `usage` events and counted by the
//! orchestrator with the run's own model calls.

use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{HostModel, ModelFailure};
use crate::plugins::context::{SampleAnswer, SampleRequest, Sampler, TaskScope};
use capstan_protocol::{Event, Usage};

pub struct RunSampler {
    model: Arc<dyn HostModel>,
    budget_usd: Option<f64>,
    budget_tokens: Option<u64>,
    /// What sampling cost.
    spent: Mutex<Usage>,
    /// What the run's own model calls cost.
    run_usage: Mutex<Usage>,
}

impl RunSampler {
    pub fn new(
        model: Arc<dyn HostModel>,
        budget_usd: Option<f64>,
        budget_tokens: Option<u64>,
    ) -> Self {
        Self {
            model,
            budget_usd,
            budget_tokens,
            spent: Mutex::default(),
            run_usage: Mutex::default(),
        }
    }
}

#[async_trait]
impl Sampler for RunSampler {
    fn model(&self) -> String {
        self.model.id()
    }

    fn fits(&self, prompt_tokens: u64, max_tokens: u64) -> Result<(), String> {
        let mut spent = *self.spent.lock();
        spent.add(&self.run_usage.lock());
        if let Some(limit) = self.budget_tokens {
            let used = spent.input_tokens + spent.output_tokens;
            let worst = used + prompt_tokens + max_tokens;
            if worst > limit {
                return Err(format!(
                    "a prompt of about {prompt_tokens} tokens with up to {max_tokens} tokens back \
                     (after {used} used) would pass the run's budget of {limit} tokens \
                     (budget_tokens in [run])"
                ));
            }
        }
        if let (Some(limit), Some(cost)) = (self.budget_usd, spent.cost_usd)
            && cost >= limit
        {
            return Err(format!(
                "the run has spent ${cost:.4} of its ${limit:.4} budget \
                 (budget_usd or session_budget_usd in [run])"
            ));
        }
        Ok(())
    }

    async fn sample(&self, scope: &TaskScope, req: SampleRequest) -> Result<SampleAnswer, String> {
        let (text, at_limit, usage) =
            self.model
                .sample(&req, &scope.run.cancel)
                .await
                .map_err(|e| match e {
                    ModelFailure::Cancelled => "the run was cancelled".to_string(),
                    other => other.to_string(),
                })?;
        self.spent.lock().add(&usage);
        if usage.input_tokens + usage.output_tokens > 0 {
            scope.run.events.emit(Event::Usage {
                usage,
                model: self.model.id(),
            });
        }
        Ok(SampleAnswer {
            text,
            model: self.model.id(),
            stop_reason: if at_limit { "maxTokens" } else { "endTurn" }.into(),
        })
    }

    fn spent(&self) -> Usage {
        *self.spent.lock()
    }

    fn note_run_usage(&self, usage: &Usage) {
        self.run_usage.lock().add(usage);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::run::model::offline::OfflineModel;

    fn usage(input: u64, output: u64, cost: Option<f64>) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            estimated: false,
            cost_usd: cost,
        }
    }

    /// The up-front check weighs a request against all the run spent, not
    /// only what sampling spent.
    #[test]
    fn the_runs_own_model_calls_count_against_a_sampling_request() {
        let sampler = RunSampler::new(Arc::new(OfflineModel), Some(0.10), Some(100));
        assert!(sampler.fits(30, 40).is_ok());
        sampler.note_run_usage(&usage(50, 10, Some(0.02)));
        let refused = sampler.fits(30, 40).unwrap_err();
        assert!(refused.contains("after 60 used"), "{refused}");
        assert!(sampler.fits(10, 20).is_ok());
        sampler.note_run_usage(&usage(0, 0, Some(0.09)));
        let refused = sampler.fits(1, 1).unwrap_err();
        assert!(refused.contains("$0.1100 of its $0.1000"), "{refused}");
        assert_eq!(
            sampler.spent(),
            Usage::default(),
            "sampling itself spent nothing"
        );
    }
}
