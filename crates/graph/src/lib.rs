//! Dependency graphs of tasks: whether one is well formed, an order for it,
//! and the one scheduler that runs it.
//!
//! Both of Capstan's task runners use this crate: the host loop's plans
//! (`capstan` orchestrator) and `capstan agent run`'s task files
//! (`capstan-agents`). The scheduling rules, in one place:
//!
//! - a node starts when every node it depends on has *completed* and fewer
//!   than `limit` nodes are running; among ready nodes the earliest in the
//!   given slice starts first;
//! - a node whose dependency failed, is missing from the graph, or was itself
//!   skipped for a failed dependency is not run:
//!   [`NotRun::DependencyFailed`] names that dependency;
//! - once [`Handler::stopped`] says so (cancellation, fail-fast, a timeout),
//!   nothing new starts: every waiting node is reported at once as
//!   [`NotRun::Stopped`] (its dependents too), while running nodes run to
//!   their end;
//! - every node is reported exactly once, through [`Handler::ended`] or
//!   [`Handler::not_run`].

#![warn(missing_docs)]

use std::collections::{HashMap, HashSet};

use futures::stream::{FuturesUnordered, StreamExt};

mod order;

pub use order::{Cycle, topological_order};

/// A node of a dependency graph: an id unique in its graph, and the ids it waits for.
pub trait Node {
    /// This node's id.
    fn id(&self) -> &str;
    /// The ids of the nodes that must complete before this one starts.
    fn depends_on(&self) -> &[String];
}

impl<T: Node> Node for &T {
    fn id(&self) -> &str {
        (**self).id()
    }
    fn depends_on(&self) -> &[String] {
        (**self).depends_on()
    }
}

/// How a node that ran ended, as far as its dependents are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its dependents may start.
    Completed,
    /// Its dependents are not run ([`NotRun::DependencyFailed`]).
    Failed,
}

/// Why a node was not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRun<'a> {
    /// This dependency failed, is not in the graph, or was not run itself
    /// because of a failure.
    DependencyFailed(&'a str),
    /// The run stopped ([`Handler::stopped`]) before this node could start.
    Stopped,
}

/// What a runner does with the nodes the scheduler hands it.
///
/// The work [`Handler::start`] returns owns what it needs of the node (or
/// borrows the handler's own references), so the scheduler's future carries
/// no borrow of the graph beyond its call.
pub trait Handler<N> {
    /// What running one node gives back.
    type Output;
    /// The work of one running node (usually boxed: `BoxFuture<'_, Output>`).
    type Running: Future<Output = Self::Output>;
    /// Whether to start nothing more (checked before every start).
    fn stopped(&self) -> bool;
    /// Starts `node`; its dependencies have all completed.
    fn start(&mut self, node: &N) -> Self::Running;
    /// `node` ran and gave `output`: did it complete, for its dependents?
    fn ended(&mut self, node: &N, output: Self::Output) -> Ended;
    /// `node` will not run, and why.
    fn not_run(&mut self, node: &N, why: NotRun<'_>);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Completed,
    Failed,
    /// Not run because of a failure: dependents are not run either.
    SkippedForFailure,
    /// Not run because the run stopped.
    Stopped,
}

/// Runs the graph of `nodes` to its end, at most `limit` nodes at a time
/// (`0` counts as 1). `failed` are ids outside `nodes` that count as failed
/// (tasks rejected before the graph ran). The graph must be acyclic (see
/// [`check`]); were it not, the nodes on a cycle would be reported as
/// [`NotRun::Stopped`] rather than hang.
pub async fn run<N, H>(nodes: &[N], limit: usize, failed: &[&str], handler: &mut H)
where
    N: Node,
    H: Handler<N>,
{
    let limit = limit.max(1);
    let mut state: HashMap<&str, State> = failed.iter().map(|id| (*id, State::Failed)).collect();
    let known: HashSet<&str> = nodes
        .iter()
        .map(|n| n.id())
        .chain(failed.iter().copied())
        .collect();
    let mut waiting: Vec<usize> = (0..nodes.len()).collect();
    let mut running = FuturesUnordered::new();
    loop {
        // Decide every waiting node that can be decided; a node not run can
        // decide others, so start over after each.
        let mut i = 0;
        while i < waiting.len() {
            let node = &nodes[waiting[i]];
            let mut blocked = None;
            let mut ready = true;
            for dep in node.depends_on() {
                match state.get(dep.as_str()) {
                    _ if !known.contains(dep.as_str()) => blocked = Some((dep, false)),
                    Some(State::Failed | State::SkippedForFailure) => blocked = Some((dep, false)),
                    Some(State::Stopped) => blocked = blocked.or(Some((dep, true))),
                    Some(State::Completed) => {}
                    Some(State::Running) | None => ready = false,
                }
                if matches!(blocked, Some((_, false))) {
                    break;
                }
            }
            let verdict = match blocked {
                Some((dep, false)) => {
                    Some((State::SkippedForFailure, NotRun::DependencyFailed(dep)))
                }
                Some((_, true)) => Some((State::Stopped, NotRun::Stopped)),
                None if handler.stopped() => Some((State::Stopped, NotRun::Stopped)),
                None => None,
            };
            if let Some((new_state, why)) = verdict {
                waiting.remove(i);
                state.insert(node.id(), new_state);
                handler.not_run(node, why);
                i = 0;
                continue;
            }
            if ready && running.len() < limit {
                let index = waiting.remove(i);
                state.insert(node.id(), State::Running);
                let started = handler.start(node);
                running.push(async move { (index, started.await) });
                continue;
            }
            i += 1;
        }
        let Some((index, output)) = running.next().await else {
            break;
        };
        let node = &nodes[index];
        let ended = handler.ended(node, output);
        state.insert(
            node.id(),
            match ended {
                Ended::Completed => State::Completed,
                Ended::Failed => State::Failed,
            },
        );
    }
    // Only nodes on a cycle can be left: nothing runs that could free them.
    for index in waiting {
        handler.not_run(&nodes[index], NotRun::Stopped);
    }
}

#[cfg(test)]
mod tests;
