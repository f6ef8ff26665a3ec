//! The egress proxy: a sandboxed command gets the network its workspace's
//! policy allows and nothing else.
//!
//! * [`rules`]: the policy (allow and deny rules, presets for package
//!   registries, asking about unlisted hosts).
//! * [`address`]: which resolved addresses are refused unless a rule names
//!   them (loopback, private, link-local, CGNAT, metadata, and their IPv6
//!   forms), and the [`Resolver`] the proxy resolves names with.
//! * [`proxy`]: the server (HTTP `CONNECT`, plain-HTTP forwarding, SOCKS5 on
//!   one socket), which decides every connection with [`Proxy::authorize`]
//!   and connects only to the address it checked.
//! * [`audit`]: one [`ConnectionRecord`] per connection.
//! * [`decide`]: the [`DecisionHook`] a host implements to ask a person.
//!
//! The sandbox bridges the command's private network namespace to the
//! proxy's Unix socket (crates/sandbox, `Network::Proxy`).

pub mod address;
pub mod audit;
pub mod decide;
mod http;
pub mod proxy;
pub mod rules;
mod socks;
mod stream;

pub use address::{Resolver, StaticResolver, SystemResolver};
pub use audit::{Audit, ConnectionRecord, DecidedBy, Protocol, Verdict};
pub use decide::{Ask, Decision, DecisionHook};
pub use proxy::{Grant, Proxy, ProxyBuilder, Refusal, bind_unix};
pub use rules::{Policy, Rule, RuleError, Target};
