//! Addresses the proxy refuses unless a rule names them, and name resolution.
//!
//! Invariant: the proxy connects only to an address it resolved and checked
//! itself, and never resolves the name again for the connection (so a name
//! that answers a public address to the check and `127.0.0.1` to the connect,
//! DNS rebinding, gets nowhere). An address in a [`Special`] range is refused
//! unless an address rule of the policy names it, even for an allowed name.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};

/// Why an address is not an ordinary public one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918 ranges, IPv6 unique-local `fc00::/7` and the local-use NAT64 prefix.
    Private,
    /// 100.64.0.0/10, carrier-grade NAT.
    SharedAddressSpace,
    /// 169.254.169.254 and the IPv6 equivalents clouds use.
    Metadata,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// Broadcast, reserved, benchmarking and protocol-assignment ranges.
    Reserved,
    /// An IPv6 form that carries an IPv4 address the proxy cannot judge
    /// (Teredo) or that is deprecated (IPv4-compatible, site-local).
    Tunnelled,
}

impl std::fmt::Display for Special {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Special::Unspecified => "an unspecified address",
            Special::Loopback => "a loopback address",
            Special::Private => "a private address",
            Special::SharedAddressSpace => "a carrier-grade NAT address",
            Special::Metadata => "a cloud metadata address",
            Special::LinkLocal => "a link-local address",
            Special::Multicast => "a multicast address",
            Special::Reserved => "a reserved address",
            Special::Tunnelled => "a tunnelled or deprecated IPv6 address",
        })
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it
/// is; every other address unchanged.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// The special range `ip` is in, if any.
pub fn special(ip: IpAddr) -> Option<Special> {
    match canonical(ip) {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn in4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let m = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    u32::from(ip) & m == u32::from(Ipv4Addr::from(net)) & m
}

fn special_v4(ip: Ipv4Addr) -> Option<Special> {
    use Special::*;
    let table: &[([u8; 4], u32, Special)] = &[
        ([169, 254, 169, 254], 32, Metadata),
        ([0, 0, 0, 0], 8, Unspecified),
        ([127, 0, 0, 0], 8, Loopback),
        ([10, 0, 0, 0], 8, Private),
        ([172, 16, 0, 0], 12, Private),
        ([192, 168, 0, 0], 16, Private),
        ([100, 64, 0, 0], 10, SharedAddressSpace),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([192, 0, 0, 0], 24, Reserved),
        ([198, 18, 0, 0], 15, Reserved),
        ([224, 0, 0, 0], 4, Multicast),
        ([240, 0, 0, 0], 4, Reserved),
    ];
    table
        .iter()
        .find(|(net, p, _)| in4(ip, *net, *p))
        .map(|(_, _, s)| *s)
}

fn special_v6(ip: Ipv6Addr) -> Option<Special> {
    use Special::*;
    let seg = ip.segments();
    let bits = u128::from(ip);
    let embedded = |v4: u32| special_v4(Ipv4Addr::from(v4));
    if ip.is_unspecified() {
        return Some(Unspecified);
    }
    if ip.is_loopback() {
        return Some(Loopback);
    }
    // fd00:ec2::254, the AWS metadata service over IPv6.
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return Some(Metadata);
    }
    // ::a.b.c.d (IPv4-compatible, deprecated): judged as the IPv4 address,
    // and refused anyway.
    if bits >> 32 == 0 {
        return Some(embedded(bits as u32).unwrap_or(Tunnelled));
    }
    // 64:ff9b::/96, NAT64: the IPv4 address it reaches.
    if bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000 {
        return embedded(bits as u32);
    }
    // 2002::/16, 6to4: the IPv4 address of the relay.
    if seg[0] == 0x2002 {
        return embedded(((seg[1] as u32) << 16) | seg[2] as u32);
    }
    match seg[0] {
        0x0064 if seg[1] == 0xff9b && seg[2] == 1 => Some(Private), // 64:ff9b:1::/48
        0x0100 if seg[1..4] == [0, 0, 0] => Some(Reserved),         // 100::/64 discard
        0x2001 if seg[1] == 0 => Some(Tunnelled),                   // Teredo
        s if s & 0xfe00 == 0xfc00 => Some(Private),                 // fc00::/7
        s if s & 0xffc0 == 0xfe80 => Some(LinkLocal),               // fe80::/10
        s if s & 0xffc0 == 0xfec0 => Some(Tunnelled),               // fec0::/10 site-local
        s if s & 0xff00 == 0xff00 => Some(Multicast),
        _ => None,
    }
}

/// Turns a name into addresses. The proxy calls it from a blocking thread;
/// tests inject a [`StaticResolver`].
pub trait Resolver: Send + Sync + 'static {
    /// The addresses of `host` (a DNS name, lowercase). An empty list or an
    /// error: the name does not resolve.
    fn resolve(&self, host: &str) -> std::io::Result<Vec<IpAddr>>;
}

/// The system resolver (`getaddrinfo`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        let mut out = Vec::new();
        for a in (host, 0u16).to_socket_addrs()? {
            if !out.contains(&a.ip()) {
                out.push(a.ip());
            }
        }
        Ok(out)
    }
}

/// Fixed answers, for tests: each name resolves to the addresses given, every
/// other name fails.
#[derive(Debug, Default, Clone)]
pub struct StaticResolver {
    names: HashMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    /// A resolver that knows no name yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `name` resolves to `addrs`.
    pub fn with(mut self, name: &str, addrs: &[IpAddr]) -> Self {
        self.names.insert(name.to_ascii_lowercase(), addrs.to_vec());
        self
    }
}

impl Resolver for StaticResolver {
    fn resolve(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        self.names.get(host).cloned().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{host}: no such name"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(a: &str) -> Option<Special> {
        special(a.parse().unwrap())
    }

    #[test]
    fn special_ranges_v4() {
        use Special::*;
        for (a, want) in [
            ("127.0.0.1", Some(Loopback)),
            ("127.255.0.9", Some(Loopback)),
            ("10.1.2.3", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.32.0.1", None),
            ("192.168.1.1", Some(Private)),
            ("100.64.0.1", Some(SharedAddressSpace)),
            ("100.128.0.1", None),
            ("169.254.169.254", Some(Metadata)),
            ("169.254.1.1", Some(LinkLocal)),
            ("0.0.0.0", Some(Unspecified)),
            ("224.0.0.1", Some(Multicast)),
            ("255.255.255.255", Some(Reserved)),
            ("8.8.8.8", None),
            ("93.184.216.34", None),
        ] {
            assert_eq!(s(a), want, "{a}");
        }
    }

    #[test]
    fn special_ranges_v6_including_embedded_v4() {
        use Special::*;
        for (a, want) in [
            ("::1", Some(Loopback)),
            ("::", Some(Unspecified)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:10.0.0.1", Some(Private)),
            ("::ffff:169.254.169.254", Some(Metadata)),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some(Loopback)),
            ("::8.8.8.8", Some(Tunnelled)),
            ("64:ff9b::10.0.0.1", Some(Private)),
            ("64:ff9b::8.8.8.8", None),
            ("2002:7f00:1::1", Some(Loopback)),
            ("2002:0808:0808::1", None),
            ("2001:0:4136:e378::1", Some(Tunnelled)),
            ("fd00::1", Some(Private)),
            ("fc00::1", Some(Private)),
            ("fd00:ec2::254", Some(Metadata)),
            ("fe80::1", Some(LinkLocal)),
            ("fec0::1", Some(Tunnelled)),
            ("ff02::1", Some(Multicast)),
            ("2606:4700::1111", None),
        ] {
            assert_eq!(s(a), want, "{a}");
        }
    }

    #[test]
    fn static_resolver_answers_only_what_it_was_given() {
        let r = StaticResolver::new().with("Example.test", &["10.0.0.1".parse().unwrap()]);
        assert_eq!(r.resolve("example.test").unwrap().len(), 1);
        assert!(r.resolve("other.test").is_err());
    }
}
