//! Where a decode engine may dial: `--kv-peer-allow` (CIDRs and host
//! names), the connect timeout, and peer names made safe for log lines.
//!
//! vLLM's decode dials whatever `remote_host`/`remote_port` the proxy puts
//! in `kv_transfer_params` (`NixlConnectorWorker._nixl_handshake`,
//! `vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`,
//! connects a ZMQ socket there); the proxy is trusted. Here the params come
//! from any HTTP client, so the engine checks them first: an address
//! literal outside the list is refused before any dial, a host name is
//! allowed when listed by name or when every address it resolves to is in
//! a listed network (an empty resolution is refused). The default list is
//! loopback and the private-use networks (RFC 1918, RFC 4193), which is
//! where the peers of a pod deployment live; `any` allows everything.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// The default connect timeout (`--kv-connect-timeout-ms`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Entries `--kv-peer-allow` takes at most.
pub const MAX_ALLOW: usize = 256;

/// Characters of a peer's name a log line shows at most.
const MAX_LOGGED: usize = 80;

/// One `--kv-peer-allow` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allow {
    /// `any`: every address.
    Any,
    /// A network (`10.0.0.0/8`, `::1/128`; an address alone is its /32 or
    /// /128).
    Net {
        /// Its address, host bits zero.
        addr: IpAddr,
        /// Its prefix length.
        prefix: u8,
    },
    /// A host name, matched as written (ASCII case-insensitively).
    Host(String),
}

impl Allow {
    fn contains(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Allow::Any, _) => true,
            (Allow::Net { addr, prefix }, ip) => in_net(*addr, *prefix, ip),
            (Allow::Host(_), _) => false,
        }
    }
}

fn in_net(net: IpAddr, prefix: u8, ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

/// Why `--kv-peer-allow` did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowError {
    /// The entry, sanitized.
    pub entry: String,
    /// What is wrong.
    pub why: &'static str,
}

impl fmt::Display for AllowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--kv-peer-allow entry {:?}: {}", self.entry, self.why)
    }
}

impl std::error::Error for AllowError {}

/// `--kv-peer-allow`: where a decode engine may dial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerAllow(Vec<Allow>);

impl Default for PeerAllow {
    /// Loopback, `localhost`, and the private-use networks.
    fn default() -> Self {
        let net = |addr: IpAddr, prefix| Allow::Net { addr, prefix };
        PeerAllow(vec![
            net(Ipv4Addr::new(127, 0, 0, 0).into(), 8),
            net(Ipv6Addr::LOCALHOST.into(), 128),
            Allow::Host("localhost".into()),
            net(Ipv4Addr::new(10, 0, 0, 0).into(), 8),
            net(Ipv4Addr::new(172, 16, 0, 0).into(), 12),
            net(Ipv4Addr::new(192, 168, 0, 0).into(), 16),
            net(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0).into(), 7),
        ])
    }
}

impl PeerAllow {
    /// Parses a comma-separated list of `any`, CIDRs, addresses and host
    /// names.
    pub fn parse(text: &str) -> Result<PeerAllow, AllowError> {
        let mut out = Vec::new();
        for raw in text.split(',') {
            let entry = raw.trim();
            let bad = |why| AllowError {
                entry: sanitize(entry),
                why,
            };
            if out.len() == MAX_ALLOW {
                return Err(bad("more than 256 entries"));
            }
            if entry.is_empty() {
                return Err(bad("an empty entry"));
            }
            if entry.eq_ignore_ascii_case("any") {
                out.push(Allow::Any);
                continue;
            }
            let (addr, prefix) = match entry.split_once('/') {
                Some((a, p)) => (a, Some(p)),
                None => (entry, None),
            };
            let addr = addr.trim_start_matches('[').trim_end_matches(']');
            match (addr.parse::<IpAddr>(), prefix) {
                (Ok(ip), p) => {
                    let max = if ip.is_ipv4() { 32 } else { 128 };
                    let prefix = match p.map(str::parse::<u8>) {
                        None => max,
                        Some(Ok(n)) if n <= max => n,
                        Some(_) => return Err(bad("a prefix length up to 32 (IPv4) or 128")),
                    };
                    out.push(Allow::Net { addr: ip, prefix });
                }
                (Err(_), None) if valid_host(entry) => {
                    out.push(Allow::Host(entry.to_ascii_lowercase()))
                }
                (Err(_), _) => return Err(bad("not `any`, an address, a CIDR or a host name")),
            }
        }
        Ok(PeerAllow(out))
    }

    /// Whether `host` is allowed without resolving it: `Some` for a listed
    /// name or an address literal, `None` for a name to resolve.
    pub fn host(&self, host: &str) -> Option<bool> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Some(self.0.iter().any(|a| a.contains(ip)));
        }
        let listed = self.0.iter().any(|a| match a {
            Allow::Host(h) => h.eq_ignore_ascii_case(host),
            Allow::Any => true,
            Allow::Net { .. } => false,
        });
        listed.then_some(true)
    }

    /// Whether every one of `addrs` is in a listed network (none: no).
    pub fn addrs(&self, addrs: &[SocketAddr]) -> bool {
        !addrs.is_empty()
            && addrs
                .iter()
                .all(|a| self.0.iter().any(|n| n.contains(a.ip())))
    }
}

/// Whether `h` is a host name as DNS writes one (letters, digits, `-`,
/// `.`, `_`; at most 253 bytes), or an address literal.
pub fn valid_host(h: &str) -> bool {
    let bare = h.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().is_ok()
        || (!h.is_empty()
            && h.len() <= 253
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')))
}

/// `name` made safe for a log line: control and non-ASCII characters as
/// `?`, at most [`MAX_LOGGED`] characters (then `…`).
pub fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .take(MAX_LOGGED)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect();
    if name.chars().count() > MAX_LOGGED {
        out.push('…');
    }
    out
}

/// How a decode engine dials its prefill engines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerPolicy {
    /// Where it may dial.
    pub allow: PeerAllow,
    /// How long a connect (and then the peer's hello) may take.
    pub connect_timeout: Duration,
}

impl Default for PeerPolicy {
    fn default() -> Self {
        PeerPolicy {
            allow: PeerAllow::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

/// Why a dial failed.
#[derive(Debug)]
pub enum DialError {
    /// The host (or what it resolves to) is not in `--kv-peer-allow`.
    NotAllowed,
    /// The name did not resolve.
    Resolve(std::io::Error),
    /// Connecting or the handshake failed.
    Connect(handoff_transport::ConnectError),
    /// No thread to dial on.
    Spawn(std::io::Error),
}

impl fmt::Display for DialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DialError::NotAllowed => f.write_str("not in --kv-peer-allow"),
            DialError::Resolve(e) => write!(f, "does not resolve: {e}"),
            DialError::Connect(e) => e.fmt(f),
            DialError::Spawn(e) => write!(f, "no thread to dial on: {e}"),
        }
    }
}

impl PeerPolicy {
    /// Resolves `host:port` and dials it from `ep` if allowed (call off
    /// the driver's thread: resolving may block).
    pub fn dial(
        &self,
        ep: &handoff_transport::TcpEndpoint,
        host: &str,
        port: u16,
    ) -> Result<handoff_transport::PeerHello, DialError> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(DialError::Resolve)?
            .collect();
        if self.allow.host(host) != Some(true) && !self.allow.addrs(&addrs) {
            return Err(DialError::NotAllowed);
        }
        ep.connect_within(addrs.as_slice(), self.connect_timeout)
            .map_err(DialError::Connect)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_allows_loopback_and_private_networks_only() {
        let d = PeerAllow::default();
        for ok in [
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "[::1]",
            "10.2.3.4",
            "172.31.0.1",
        ] {
            assert_eq!(d.host(ok), Some(true), "{ok}");
        }
        assert_eq!(d.host("192.168.1.1"), Some(true));
        assert_eq!(d.host("localhost"), Some(true));
        for no in ["8.8.8.8", "172.32.0.1", "2001:db8::1", "169.254.169.254"] {
            assert_eq!(d.host(no), Some(false), "{no}");
        }
        assert_eq!(d.host("prefill-0.svc"), None, "a name is resolved first");
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(d.addrs(&[at("10.0.0.5:5600")]));
        assert!(d.addrs(&[at("[::ffff:127.0.0.1]:1")]), "v4-mapped loopback");
        assert!(!d.addrs(&[at("10.0.0.5:5600"), at("1.1.1.1:5600")]));
        assert!(!d.addrs(&[]));
    }

    #[test]
    fn the_flag_parses_cidrs_hosts_and_any_and_locates_errors() {
        let p = PeerAllow::parse("10.1.0.0/16, prefill.example ,::1,any").unwrap();
        assert_eq!(p.0.len(), 4);
        let only = PeerAllow::parse("10.1.0.0/16,prefill.example").unwrap();
        assert_eq!(only.host("10.1.200.3"), Some(true));
        assert_eq!(only.host("10.2.0.1"), Some(false));
        assert_eq!(only.host("127.0.0.1"), Some(false));
        assert_eq!(only.host("PREFILL.example"), Some(true));
        assert_eq!(PeerAllow::parse("any").unwrap().host("8.8.8.8"), Some(true));
        for (bad, why) in [
            ("", "an empty entry"),
            ("10.0.0.0/33", "a prefix length up to 32 (IPv4) or 128"),
            ("a b", "not `any`, an address, a CIDR or a host name"),
            ("host/8", "not `any`, an address, a CIDR or a host name"),
        ] {
            assert_eq!(PeerAllow::parse(bad).unwrap_err().why, why, "{bad}");
        }
        let e = PeerAllow::parse("ok,\u{1b}[2Jx\ny").unwrap_err();
        assert!(!e.to_string().contains('\n') && !e.to_string().contains('\u{1b}'));
    }

    #[test]
    fn names_are_sanitized_and_bounded_for_logs() {
        assert_eq!(sanitize("evil\nhost\u{1b}[31m"), "evil?host?[31m");
        let long = "a".repeat(1000);
        assert_eq!(sanitize(&long).chars().count(), MAX_LOGGED + 1);
        assert!(valid_host("prefill-0.prefill.default.svc.cluster.local"));
        assert!(valid_host("[::1]") && valid_host("10.0.0.1"));
        for bad in ["", "a\nb", "a b", "a:b", "é.com", &"a".repeat(254)] {
            assert!(!valid_host(bad), "{bad:?}");
        }
    }
}
