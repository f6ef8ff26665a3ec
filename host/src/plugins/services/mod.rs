//! Host services: what a plugin may ask the host to do through WIT imports
//! (`exec`, `index`, `approval`; `events` and `cancel` are built into
//! the runtime).
//!
//! Grants are checked in two places, each once: the manifest grant when a
//! component is loaded (`runtime::imports`), the workspace policy when a service
//! is called (inside each service). A service that this host does not offer
//! answers `denied` with a sentence saying so.

pub mod approval;
pub mod changes;
pub mod egress;
mod egress_always;
pub mod exec;
pub mod index;
pub mod index_watch;

/// The sentence a plugin gets for a service this host does not offer.
pub fn not_offered(service: &str) -> String {
    format!("this Capstan host offers no `{service}` service in this context")
}
