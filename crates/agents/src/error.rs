//! Errors that stop an execution before it starts (a task's own failure is a
//! [`crate::TaskStatus`], not an error).

/// What went wrong and, in the message, what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The task file does not parse or is inconsistent (the message names the line or
    /// the task).
    #[error("{0}")]
    TaskFile(String),
    /// A runtime cannot be set up (unknown name, missing program, bad config).
    #[error("{0}")]
    Runtime(String),
    /// A prompt template does not render.
    #[error("prompt template of role `{role}`: {message}")]
    Template {
        /// The role whose template failed.
        role: String,
        /// minijinja's message.
        message: String,
    },
    /// A file or skill the task references cannot be used.
    #[error("{0}")]
    Context(String),
}
