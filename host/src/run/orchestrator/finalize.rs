//! The end of every run: the host writes the answer (also for failed runs,
//! saying why), streams it as `response.delta`s, and emits exactly one
//! terminal event.

use super::{Host, RunOutcome, RunState, RunStatus, Stop};
use crate::plugins::context::RunContext;
use crate::run::model::{FinalInput, HostModel, ModelFailure};
use capstan_protocol::{Event, FailureReason, Usage};

impl Host {
    /// Write the answer and end the run: `run.completed`, `run.failed` or
    /// `run.cancelled`.
    pub(super) async fn finalize(
        &self,
        state: RunState,
        stopped: Option<Stop>,
        run: &RunContext,
    ) -> RunOutcome {
        let RunState {
            ctx,
            mut meter,
            reports,
        } = state;
        let failure = match stopped {
            None => None,
            Some(Stop::Cancelled) => return cancelled(meter.total(run), run),
            Some(Stop::Fail(reason, message)) => Some((reason, message)),
        };
        if run.cancel.is_cancelled() {
            return cancelled(meter.total(run), run);
        }
        let input = FinalInput {
            ctx,
            reports,
            failure: failure.clone(),
        };
        let events = &run.events;
        let mut on_token = |t: &str| {
            events.emit(Event::ResponseDelta {
                text: t.to_string(),
            })
        };
        // Past the budget no further model call is made: the offline model,
        // which costs nothing, writes the answer that explains why.
        let over_budget = matches!(failure, Some((FailureReason::BudgetExceeded, _)));
        let finalizer: &dyn HostModel = if over_budget {
            &crate::run::model::offline::OfflineModel
        } else {
            self.model.as_ref()
        };
        let (answer, failure) = match finalizer.finalize(&input, &run.cancel, &mut on_token).await {
            Ok((text, citations, usage)) => {
                if !over_budget {
                    self.account(&mut meter, usage, run);
                }
                events.emit(Event::ResponseCompleted {
                    text: text.clone(),
                    citations,
                });
                (text, failure)
            }
            Err(ModelFailure::Cancelled) => return cancelled(meter.total(run), run),
            Err(e) => (
                String::new(),
                failure.or(Some((FailureReason::Failed, e.to_string()))),
            ),
        };
        let usage = meter.total(run);
        match failure {
            None => {
                events.emit(Event::RunCompleted { usage });
                RunOutcome {
                    status: RunStatus::Completed,
                    reason: None,
                    message: String::new(),
                    answer,
                    usage,
                }
            }
            Some((reason, message)) => {
                events.emit(Event::RunFailed {
                    reason,
                    message: message.clone(),
                    usage,
                });
                RunOutcome {
                    status: RunStatus::Failed,
                    reason: Some(reason),
                    message,
                    answer,
                    usage,
                }
            }
        }
    }
}

fn cancelled(usage: Usage, run: &RunContext) -> RunOutcome {
    run.events.emit(Event::RunCancelled { usage });
    RunOutcome {
        status: RunStatus::Cancelled,
        reason: Some(FailureReason::Cancelled),
        message: "cancelled".into(),
        answer: String::new(),
        usage,
    }
}
