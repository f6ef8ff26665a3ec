//! MCP logging: the client picks a level with `logging/setLevel`, and Capstan
//! sends its task activity (what a call is doing, approvals asked, commands
//! run, failures) as `notifications/message` at or above that level.
//!
//! rmcp marks logging deprecated because the 2026-07-28 revision (SEP-2577)
//! drops it; every client that speaks 2025-11-25 or older still uses it.
#![allow(deprecated)]

use std::sync::Mutex;

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{Peer, RoleServer};
use serde_json::Value;

/// The logger name every Capstan notification carries.
pub const LOGGER: &str = "capstan";

/// Severity order of the spec (RFC 5424), lowest first.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// One session's threshold. Until the client sets one, `info` and above are
/// sent (what a person following a call wants to see).
#[derive(Debug)]
pub struct SessionLog {
    threshold: Mutex<LoggingLevel>,
}

impl Default for SessionLog {
    fn default() -> Self {
        Self {
            threshold: Mutex::new(LoggingLevel::Info),
        }
    }
}

impl SessionLog {
    pub fn set(&self, level: LoggingLevel) {
        *self.threshold.lock().unwrap_or_else(|e| e.into_inner()) = level;
    }

    pub fn enabled(&self, level: LoggingLevel) -> bool {
        let threshold = *self.threshold.lock().unwrap_or_else(|e| e.into_inner());
        rank(level) >= rank(threshold)
    }

    /// Send one message if its level passes the threshold. A client that went
    /// away is not an error of the call that logs.
    pub async fn send(&self, peer: &Peer<RoleServer>, level: LoggingLevel, data: Value) {
        if !self.enabled(level) {
            return;
        }
        let mut param = LoggingMessageNotificationParam::new(level, data);
        param.logger = Some(LOGGER.into());
        if let Err(e) = peer.notify_logging_message(param).await {
            tracing::debug!("log notification not sent: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_filters_by_severity() {
        let log = SessionLog::default();
        assert!(!log.enabled(LoggingLevel::Debug));
        assert!(log.enabled(LoggingLevel::Info));
        log.set(LoggingLevel::Error);
        assert!(!log.enabled(LoggingLevel::Warning));
        assert!(log.enabled(LoggingLevel::Critical));
        log.set(LoggingLevel::Debug);
        assert!(log.enabled(LoggingLevel::Debug));
    }
}
