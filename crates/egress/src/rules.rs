//! The policy: which hosts and ports a sandboxed command may reach.
//!
//! A rule is one string, as a user writes it in `[network] allow` / `deny`:
//!
//! | rule | matches |
//! |---|---|
//! | `crates.io` | that name, ports 80 and 443 |
//! | `*.npmjs.org` | every subdomain of `npmjs.org` (not `npmjs.org` itself), ports 80 and 443 |
//! | `api.github.com:443` | that name, port 443 only |
//! | `example.com:*` | that name, any port |
//! | `*` | every name (never an IP literal, never a private address), ports 80 and 443 |
//! | `127.0.0.1:8080`, `10.0.0.0/8`, `[::1]:3000`, `fd00::/8` | those addresses (literals, or what a name resolves to) |
//!
//! Invariants:
//! * Deny wins over allow, whatever the order.
//! * A name rule never matches an IP literal: a request for `93.184.216.34`
//!   needs an address rule. Numeric hosts that a resolver would read as an
//!   address (`2130706433`, `0x7f.1`) count as IP literals.
//! * Name rules say nothing about addresses: where an allowed name resolves to
//!   a loopback, private, link-local or metadata address, that address still
//!   needs an address rule of its own (see [`crate::address`]).

use std::net::{IpAddr, Ipv4Addr};

use serde::Serialize;

/// A rule that could not be read. The message says what is wrong and what a
/// rule looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "network rule {rule:?}: {why}; a rule looks like \"crates.io\", \"*.npmjs.org\", \"api.github.com:443\" or \"10.0.0.0/8\""
)]
pub struct RuleError {
    /// The rule as written.
    pub rule: String,
    /// What is wrong with it.
    pub why: String,
}

/// The host part of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// `*`: every name.
    AnyName,
    /// One name, lowercase, without a trailing dot.
    Name(String),
    /// `*.suffix`: stored as `.suffix`.
    Subdomains(String),
    /// An address or a network (`prefix` bits).
    Net { addr: IpAddr, prefix: u8 },
}

/// The port part of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ports {
    /// No port written: 80 and 443.
    Web,
    One(u16),
    Any,
}

impl Ports {
    fn contains(self, port: u16) -> bool {
        match self {
            Ports::Web => port == 80 || port == 443,
            Ports::One(p) => p == port,
            Ports::Any => true,
        }
    }
}

/// One allow or deny rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    text: String,
    host: HostPattern,
    ports: Ports,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Rule {
    /// Reads one rule (see the module docs for the forms).
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let err = |why: &str| RuleError {
            rule: text.to_owned(),
            why: why.to_owned(),
        };
        let s = text.trim().to_ascii_lowercase();
        if s.is_empty() {
            return Err(err("it is empty"));
        }
        if s.contains("://") {
            return Err(err("a rule is a host, not a URL (write the host alone)"));
        }
        // Bracketed IPv6, with an optional port.
        if let Some(rest) = s.strip_prefix('[') {
            let (inner, after) = rest
                .split_once(']')
                .ok_or_else(|| err("an opening [ without a closing ]"))?;
            let ports = match after {
                "" => Ports::Web,
                p => parse_ports(p.strip_prefix(':').ok_or_else(|| err("text after ]"))?)
                    .map_err(|w| err(&w))?,
            };
            let (addr, prefix) = parse_net(inner).map_err(|w| err(&w))?;
            if !addr.is_ipv6() {
                return Err(err("brackets are for IPv6 addresses"));
            }
            return Ok(Rule {
                text: text.trim().to_owned(),
                host: HostPattern::Net { addr, prefix },
                ports,
            });
        }
        // A bare IPv6 address or network (two colons or more): no port.
        if s.matches(':').count() >= 2 {
            let (addr, prefix) = parse_net(&s).map_err(|w| err(&w))?;
            return Ok(Rule {
                text: text.trim().to_owned(),
                host: HostPattern::Net { addr, prefix },
                ports: Ports::Web,
            });
        }
        let (host, ports) = match s.rsplit_once(':') {
            Some((h, p)) => (h, parse_ports(p).map_err(|w| err(&w))?),
            None => (s.as_str(), Ports::Web),
        };
        let host = host.strip_suffix('.').unwrap_or(host);
        let pattern = if host == "*" {
            HostPattern::AnyName
        } else if host.contains('/') || host.parse::<Ipv4Addr>().is_ok() {
            let (addr, prefix) = parse_net(host).map_err(|w| err(&w))?;
            HostPattern::Net { addr, prefix }
        } else if let Some(suffix) = host.strip_prefix("*.") {
            check_name(suffix).map_err(|w| err(&w))?;
            HostPattern::Subdomains(format!(".{suffix}"))
        } else {
            if host.contains('*') {
                return Err(err(
                    "a wildcard may only be a whole first label (\"*.example.com\")",
                ));
            }
            if numeric_ipv4(host).is_some() {
                return Err(err(
                    "this is an IPv4 address in a numeric form; write it as a.b.c.d",
                ));
            }
            check_name(host).map_err(|w| err(&w))?;
            HostPattern::Name(host.to_owned())
        };
        Ok(Rule {
            text: text.trim().to_owned(),
            host: pattern,
            ports,
        })
    }

    /// Whether this rule names `host` (a name, lowercase, no trailing dot) on `port`.
    pub fn matches_name(&self, host: &str, port: u16) -> bool {
        self.ports.contains(port)
            && match &self.host {
                HostPattern::AnyName => true,
                HostPattern::Name(n) => n == host,
                HostPattern::Subdomains(suffix) => host.ends_with(suffix.as_str()),
                HostPattern::Net { .. } => false,
            }
    }

    /// Whether this rule names the address `ip` on `port`. Only address rules
    /// do: `*` never matches an address.
    pub fn matches_addr(&self, ip: IpAddr, port: u16) -> bool {
        let HostPattern::Net { addr, prefix } = self.host else {
            return false;
        };
        self.ports.contains(port) && in_net(crate::address::canonical(ip), addr, prefix)
    }

    /// The rule as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

fn parse_ports(p: &str) -> Result<Ports, String> {
    if p == "*" {
        return Ok(Ports::Any);
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!(
            "the port {p:?} is not a number from 1 to 65535 (or * for any)"
        )),
        Ok(n) => Ok(Ports::One(n)),
    }
}

fn parse_net(s: &str) -> Result<(IpAddr, u8), String> {
    let (a, bits) = match s.split_once('/') {
        Some((a, b)) => (
            a,
            Some(
                b.parse::<u8>()
                    .map_err(|_| format!("the prefix length {b:?} is not a number"))?,
            ),
        ),
        None => (s, None),
    };
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IP address"))?;
    let addr = crate::address::canonical(addr);
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = bits.unwrap_or(max);
    if prefix > max {
        return Err(format!("the prefix /{prefix} is longer than the address"));
    }
    if mask(addr, prefix) != addr {
        return Err(format!(
            "the network has host bits set (did you mean {}/{prefix}?)",
            mask(addr, prefix)
        ));
    }
    Ok((addr, prefix))
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix)
            };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix)
            };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    ip.is_ipv4() == net.is_ipv4() && mask(ip, prefix) == net
}

/// A DNS name: labels of letters, digits, `-` and `_`, none empty, at most
/// 253 characters.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err("a host name must have 1 to 253 characters".into());
    }
    let last = name.rsplit('.').next().unwrap_or("");
    if last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x") {
        // No top-level domain is numeric; resolvers may read it as an address.
        return Err("its last label is a number: neither a host name nor an IP address".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("a host name has an empty or over-long label".into());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "the label {label:?} has a character a host name cannot have"
            ));
        }
    }
    Ok(())
}

/// An IPv4 address in any form `inet_aton` accepts (`2130706433`,
/// `0x7f.1`, `0177.0.0.1`, `127.1`): resolvers read such names as
/// addresses, so the proxy does too.
pub(crate) fn numeric_ipv4(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(4);
    for p in &parts {
        let n = if let Some(hex) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
            if hex.is_empty() {
                0
            } else {
                u64::from_str_radix(hex, 16).ok()?
            }
        } else if p.len() > 1 && p.starts_with('0') {
            u64::from_str_radix(&p[1..], 8).ok()?
        } else {
            p.parse::<u64>().ok()?
        };
        nums.push(n);
    }
    let last = *nums.last()?;
    let head = &nums[..nums.len() - 1];
    if head.iter().any(|&n| n > 255) {
        return None;
    }
    let rest_bits = 8 * (4 - head.len() as u32);
    if rest_bits < 64 && last >= (1u64 << rest_bits) {
        return None;
    }
    let mut v: u64 = 0;
    for (i, &n) in head.iter().enumerate() {
        v |= n << (24 - 8 * i as u32);
    }
    Some(Ipv4Addr::from((v | last) as u32))
}

/// Where a connection wants to go: a name (checked against name rules, then
/// resolved by the proxy) or an IP literal (checked against address rules only).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A host name, lower-cased, without a trailing dot.
    Name(String),
    /// An IP literal (numeric IPv4 forms such as `0x7f.1` read as addresses).
    Ip(IpAddr),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Name(n) => f.write_str(n),
            Target::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Target::Ip(a) => write!(f, "{a}"),
        }
    }
}

impl Target {
    /// Reads the host of a request (`example.com`, `EXAMPLE.com.`,
    /// `10.0.0.1`, `[::1]`, `0x7f.1`). `None`: not a host at all.
    pub fn parse(host: &str) -> Option<Target> {
        let h = host.trim();
        if let Some(inner) = h.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            return inner.parse::<IpAddr>().ok().map(Target::Ip);
        }
        if let Ok(ip) = h.parse::<IpAddr>() {
            return Some(Target::Ip(ip));
        }
        let h = h.to_ascii_lowercase();
        let h = h.strip_suffix('.').unwrap_or(&h);
        if let Some(ip) = numeric_ipv4(h) {
            return Some(Target::Ip(IpAddr::V4(ip)));
        }
        check_name(h).ok()?;
        Some(Target::Name(h.to_owned()))
    }

    /// The rule a user would add to allow this target on `port`.
    pub fn rule_for(&self, port: u16) -> String {
        match (self, port) {
            (Target::Name(n), 80 | 443) => n.clone(),
            (t, p) => format!("{t}:{p}"),
        }
    }
}

/// Named lists of hosts for package registries, so users need not write them
/// by hand (`presets = ["cargo", "npm"]`).
pub const PRESETS: &[(&str, &[&str])] = &[
    (
        "cargo",
        &[
            "crates.io",
            "index.crates.io",
            "static.crates.io",
            "static.rust-lang.org",
        ],
    ),
    ("npm", &["registry.npmjs.org", "registry.yarnpkg.com"]),
    ("pypi", &["pypi.org", "files.pythonhosted.org"]),
    (
        "debian",
        &["deb.debian.org", "security.debian.org", "ftp.debian.org"],
    ),
];

/// The rules of a preset, or an error naming the presets there are.
pub fn preset(name: &str) -> Result<&'static [&'static str], RuleError> {
    PRESETS
        .iter()
        .find(|(n, _)| *n == name.trim())
        .map(|(_, hosts)| *hosts)
        .ok_or_else(|| RuleError {
            rule: name.to_owned(),
            why: format!(
                "there is no such preset (the presets are: {})",
                PRESETS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

/// What the name rules say about a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum NameVerdict {
    /// An allow rule names it (and no deny rule does).
    Allowed {
        /// The allow rule, as written in the policy.
        rule: String,
    },
    /// A deny rule names it.
    Denied {
        /// The deny rule, as written in the policy.
        rule: String,
    },
    /// No rule names it: ask, or deny.
    Unlisted,
}

/// A workspace's network policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
    /// Whether a connection to an unlisted host asks a person (when a
    /// decision hook is there to ask) instead of being denied.
    pub ask: bool,
}

impl Policy {
    /// Builds a policy from the configuration's lists. Every rule and preset
    /// is checked; the first bad one is the error.
    pub fn new<S: AsRef<str>>(
        allow: &[S],
        deny: &[S],
        presets: &[S],
        ask: bool,
    ) -> Result<Policy, RuleError> {
        let mut p = Policy {
            ask,
            ..Policy::default()
        };
        for name in presets {
            for r in preset(name.as_ref())? {
                p.allow.push(Rule::parse(r)?);
            }
        }
        for r in allow {
            p.allow.push(Rule::parse(r.as_ref())?);
        }
        for r in deny {
            p.deny.push(Rule::parse(r.as_ref())?);
        }
        Ok(p)
    }

    /// Adds an allow rule (a grant for this session, or one a person chose to
    /// keep).
    pub fn allow(&mut self, rule: Rule) {
        if !self.allow.contains(&rule) {
            self.allow.push(rule);
        }
    }

    /// The allow rules, presets expanded.
    pub fn allowed(&self) -> impl Iterator<Item = &Rule> {
        self.allow.iter()
    }

    /// The deny rules.
    pub fn denied(&self) -> impl Iterator<Item = &Rule> {
        self.deny.iter()
    }

    /// What the rules say about `target` on `port` before any resolution. An
    /// IP literal is judged by address rules only.
    pub fn check(&self, target: &Target, port: u16) -> NameVerdict {
        let hit = |rules: &[Rule]| {
            rules
                .iter()
                .find(|r| match target {
                    Target::Name(n) => r.matches_name(n, port),
                    Target::Ip(ip) => r.matches_addr(*ip, port),
                })
                .map(|r| r.text.clone())
        };
        if let Some(rule) = hit(&self.deny) {
            return NameVerdict::Denied { rule };
        }
        match hit(&self.allow) {
            Some(rule) => NameVerdict::Allowed { rule },
            None => NameVerdict::Unlisted,
        }
    }

    /// The deny rule naming the resolved address `ip`, if any.
    pub fn address_denied(&self, ip: IpAddr, port: u16) -> Option<&Rule> {
        self.deny.iter().find(|r| r.matches_addr(ip, port))
    }

    /// The allow rule naming the resolved address `ip`, if any: the only way a
    /// loopback, private, link-local or metadata address is reached.
    pub fn address_allowed(&self, ip: IpAddr, port: u16) -> Option<&Rule> {
        self.allow.iter().find(|r| r.matches_addr(ip, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Target {
        Target::Name(s.into())
    }

    #[test]
    fn rule_forms_and_ports() {
        let r = Rule::parse("crates.io").unwrap();
        assert!(r.matches_name("crates.io", 443));
        assert!(r.matches_name("crates.io", 80));
        assert!(!r.matches_name("crates.io", 8080));
        assert!(!r.matches_name("index.crates.io", 443));
        assert!(!r.matches_name("evilcrates.io", 443));

        let r = Rule::parse("*.npmjs.org").unwrap();
        assert!(r.matches_name("registry.npmjs.org", 443));
        assert!(r.matches_name("a.b.npmjs.org", 80));
        assert!(!r.matches_name("npmjs.org", 443));
        assert!(!r.matches_name("evilnpmjs.org", 443));

        let r = Rule::parse("API.GitHub.com.:443").unwrap();
        assert!(r.matches_name("api.github.com", 443));
        assert!(!r.matches_name("api.github.com", 80));

        let r = Rule::parse("example.com:*").unwrap();
        assert!(r.matches_name("example.com", 22));

        let r = Rule::parse("*").unwrap();
        assert!(r.matches_name("anything.example", 443));
        assert!(!r.matches_addr("8.8.8.8".parse().unwrap(), 443));

        let r = Rule::parse("127.0.0.1:8080").unwrap();
        assert!(r.matches_addr("127.0.0.1".parse().unwrap(), 8080));
        assert!(!r.matches_addr("127.0.0.2".parse().unwrap(), 8080));
        assert!(!r.matches_name("127.0.0.1", 8080));
        // A v4-mapped IPv6 address is the IPv4 address it maps.
        assert!(r.matches_addr("::ffff:127.0.0.1".parse().unwrap(), 8080));

        let r = Rule::parse("10.0.0.0/8").unwrap();
        assert!(r.matches_addr("10.200.3.4".parse().unwrap(), 443));
        assert!(!r.matches_addr("11.0.0.1".parse().unwrap(), 443));

        let r = Rule::parse("[::1]:3000").unwrap();
        assert!(r.matches_addr("::1".parse().unwrap(), 3000));
        let r = Rule::parse("fd00::/8").unwrap();
        assert!(r.matches_addr("fd12::1".parse().unwrap(), 80));
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        for (bad, says) in [
            ("", "empty"),
            ("https://crates.io", "not a URL"),
            ("crates.io:0", "port"),
            ("crates.io:http", "port"),
            ("foo*.com", "wildcard"),
            ("a..b", "empty or over-long label"),
            ("ex ample.com", "character"),
            ("10.0.0.1/8", "host bits"),
            ("10.0.0.0/40", "prefix"),
            ("2130706433", "numeric form"),
            ("[::1", "closing"),
        ] {
            let e = Rule::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
            assert!(e.contains("a rule looks like"), "{e}");
        }
    }

    #[test]
    fn targets_read_numeric_hosts_as_addresses() {
        let ip = |s: &str| Target::Ip(s.parse().unwrap());
        assert_eq!(Target::parse("2130706433"), Some(ip("127.0.0.1")));
        assert_eq!(Target::parse("0x7f.1"), Some(ip("127.0.0.1")));
        assert_eq!(Target::parse("0177.0.0.1"), Some(ip("127.0.0.1")));
        assert_eq!(Target::parse("127.1"), Some(ip("127.0.0.1")));
        assert_eq!(Target::parse("[::1]"), Some(ip("::1")));
        assert_eq!(Target::parse("Crates.IO."), Some(name("crates.io")));
        assert_eq!(Target::parse("bad host"), None);
        assert_eq!(Target::parse("a@b"), None);
        assert_eq!(Target::parse(""), None);
        assert_eq!(Target::parse("1.2.3.4.5"), None);
    }

    #[test]
    fn deny_wins_and_literals_need_address_rules() {
        let p = Policy::new(
            &["*.example.com", "*", "192.0.2.7:8443"],
            &["bad.example.com"],
            &[],
            false,
        )
        .unwrap();
        assert_eq!(
            p.check(&name("bad.example.com"), 443),
            NameVerdict::Denied {
                rule: "bad.example.com".into()
            }
        );
        assert_eq!(
            p.check(&name("good.example.com"), 443),
            NameVerdict::Allowed {
                rule: "*.example.com".into()
            }
        );
        // `*` never covers an IP literal.
        assert_eq!(
            p.check(&Target::Ip("8.8.8.8".parse().unwrap()), 443),
            NameVerdict::Unlisted
        );
        assert_eq!(
            p.check(&Target::Ip("192.0.2.7".parse().unwrap()), 8443),
            NameVerdict::Allowed {
                rule: "192.0.2.7:8443".into()
            }
        );
        assert_eq!(
            p.check(&name("other.org"), 22),
            NameVerdict::Unlisted,
            "`*` covers ports 80 and 443 only"
        );
    }

    #[test]
    fn presets_expand_and_unknown_ones_are_named() {
        let p = Policy::new(&[] as &[&str], &[], &["cargo", "npm"], false).unwrap();
        assert!(matches!(
            p.check(&name("index.crates.io"), 443),
            NameVerdict::Allowed { .. }
        ));
        assert!(matches!(
            p.check(&name("registry.npmjs.org"), 443),
            NameVerdict::Allowed { .. }
        ));
        let e = Policy::new(&[] as &[&str], &[], &["maven"], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cargo, npm, pypi, debian"), "{e}");
    }

    #[test]
    fn rule_to_add_is_the_shortest_that_works() {
        assert_eq!(name("crates.io").rule_for(443), "crates.io");
        assert_eq!(name("crates.io").rule_for(8080), "crates.io:8080");
        assert_eq!(
            Target::Ip("::1".parse().unwrap()).rule_for(443),
            "[::1]:443"
        );
        // The suggested rule parses and allows what was asked.
        let t = Target::Ip("127.0.0.1".parse().unwrap());
        let r = Rule::parse(&t.rule_for(8080)).unwrap();
        assert!(r.matches_addr("127.0.0.1".parse().unwrap(), 8080));
    }
}
