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
//! * [`credential`]: brokered credentials. Only a host with a [`Credential`]
//!   is terminated (TLS with a leaf of the workspace's [`Ca`], a verified TLS
//!   connection to the real host, the header set on every request); every
//!   other `CONNECT` stays a blind tunnel. The secret lives in the proxy's
//!   memory only, never in the sandbox's environment or files, and is masked
//!   in what the host answers.
//!
//! The sandbox bridges the command's private network namespace to the
//! proxy's Unix socket (crates/sandbox, `Network::Proxy`).

#![warn(missing_docs)]

pub mod address;
pub mod audit;
mod broker;
pub mod credential;
pub mod decide;
mod http;
pub mod proxy;
pub mod rules;
mod socks;
mod splice;
mod stream;

pub use address::{Resolver, StaticResolver, SystemResolver};
pub use audit::{Audit, ConnectionRecord, DecidedBy, Protocol, Verdict};
pub use credential::{Ca, Credential, CredentialError, Secret, certs_from_pem};
pub use decide::{Ask, Decision, DecisionHook};
pub use proxy::{Grant, Proxy, ProxyBuilder, Refusal, bind_unix};
pub use rules::{Policy, Rule, RuleError, Target};
/// The certificate type of [`ProxyBuilder::upstream_ca`].
pub use rustls::pki_types::CertificateDer;
