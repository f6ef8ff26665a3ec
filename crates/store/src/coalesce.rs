//! Coalescing a response's streamed tokens into its final text.
//!
//! A run streams its answer as `response.delta` events (one per token) and
//! then states the whole answer in `response.completed`. Once the completed
//! event is stored, the deltas before it say nothing it does not, so both
//! backends delete them in the same transaction that stores it: a short run
//! keeps a dozen events instead of over a hundred. What remains is exact:
//! replay returns the stored envelopes verbatim in `seq` order, and a reader
//! resuming after a seq (`Last-Event-ID`) gets every stored event after it,
//! the completed text standing in for any delta it had not read. The seqs of
//! coalesced deltas are gaps that are never filled.

use std::collections::HashMap;

use crate::EventRecord;

/// The streamed-token event that is coalesced.
pub const DELTA: &str = "response.delta";
/// The event whose storing coalesces the deltas before it.
pub const COMPLETED: &str = "response.completed";

/// The deltas in `batch` that a completed event later in the same batch
/// (same run, higher seq) replaces: they need not be written at all.
pub(crate) fn superseded(batch: &[EventRecord]) -> Vec<bool> {
    let mut completed: HashMap<&str, u64> = HashMap::new();
    for e in batch.iter().filter(|e| e.kind == COMPLETED) {
        let at = completed.entry(e.run_id.as_str()).or_insert(e.seq);
        *at = (*at).max(e.seq);
    }
    batch
        .iter()
        .map(|e| {
            e.kind == DELTA
                && completed
                    .get(e.run_id.as_str())
                    .is_some_and(|&done| e.seq < done)
        })
        .collect()
}
