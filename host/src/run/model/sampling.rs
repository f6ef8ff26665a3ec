//! The run's model answering an external MCP server's `sampling/createMessage`
//! ([`crate::plugins::context::Sampler`]). The MCP client asks the person
//! first; this meters what the answers cost against the run's budget: a
//! request whose worst case (its prompt, estimated, plus the most it may
//! generate) would pass `budget_tokens`, or that comes after the run's
//! sampling already passed `budget_usd`, is refused before the model is called.
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
    spent: Mutex<Usage>,
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
        }
    }
}

#[async_trait]
impl Sampler for RunSampler {
    fn model(&self) -> String {
        self.model.id()
    }

    fn fits(&self, prompt_tokens: u64, max_tokens: u64) -> Result<(), String> {
        let spent = *self.spent.lock();
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
                "sampling has spent ${cost:.4} of the run's ${limit:.4} budget (budget_usd in [run])"
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
}
