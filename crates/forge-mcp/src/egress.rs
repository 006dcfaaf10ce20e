//! Egress policy: which HTTP endpoints an MCP client may reach.
//!
//! Deny by default. A rule allows a scheme, a host and ports; a host's addresses must be public
//! unless the rule names the private, loopback or link-local ranges it may resolve to
//! (`addresses`). A name is resolved once per process ([`EgressResolver`]) and every address it
//! resolves to is checked, so a name cannot later be rebound to a forbidden address; the
//! connection can only use the addresses that passed. Redirects are checked against the same rules
//! ([`EgressPolicy::redirect_policy`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use parking_lot::Mutex;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde::Deserialize;

use crate::error::McpError;

/// An IP network, `address/prefix` (an address alone is a single host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is inside the network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let network: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not an address or address/prefix"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?} has a prefix outside 0..={max}"))?,
            None => max,
        };
        Ok(Self {
            network: canonical(network),
            prefix,
        })
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An IPv4-mapped IPv6 address counts as the IPv4 address it carries.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// Why an address is not public, or `None` when it is.
pub fn non_public(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(a) => {
            let [o0, o1, ..] = a.octets();
            if a.is_loopback() {
                Some("loopback")
            } else if a.is_private() {
                Some("private")
            } else if a.is_link_local() {
                Some("link-local")
            } else if a.is_unspecified() || o0 == 0 {
                Some("unspecified")
            } else if a.is_broadcast() || a.is_multicast() {
                Some("broadcast or multicast")
            } else if o0 == 100 && (64..128).contains(&o1) {
                Some("shared (carrier-grade NAT)")
            } else if a.is_documentation() || o0 >= 240 {
                Some("reserved")
            } else {
                None
            }
        }
        IpAddr::V6(a) => {
            let first = a.segments()[0];
            if a.is_loopback() {
                Some("loopback")
            } else if a.is_unspecified() {
                Some("unspecified")
            } else if first & 0xfe00 == 0xfc00 {
                Some("private")
            } else if first & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if a.is_multicast() {
                Some("broadcast or multicast")
            } else {
                None
            }
        }
    }
}

/// One allow rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressRule {
    /// The schemes allowed (default `https` only).
    #[serde(default = "https_only")]
    pub schemes: Vec<String>,
    /// The host: a DNS name (exact, case-insensitive) or an IP address.
    pub host: String,
    /// The ports allowed (default: the scheme's own, 443 or 80).
    #[serde(default)]
    pub ports: Vec<u16>,
    /// The non-public networks the host may resolve to (loopback, private, link-local…). Public
    /// addresses need no entry; a non-public one is refused unless named here.
    #[serde(default)]
    pub addresses: Vec<Cidr>,
}

fn https_only() -> Vec<String> {
    vec!["https".into()]
}

impl EgressRule {
    fn allows_url(&self, url: &Url) -> bool {
        let host = url.host_str().unwrap_or("").trim_matches(['[', ']']);
        let port = url.port_or_known_default();
        let ports_ok = if self.ports.is_empty() {
            port == default_port(url.scheme())
        } else {
            port.is_some_and(|p| self.ports.contains(&p))
        };
        self.schemes
            .iter()
            .any(|s| s.eq_ignore_ascii_case(url.scheme()))
            && self.host.eq_ignore_ascii_case(host)
            && ports_ok
    }

    fn allows_address(&self, ip: IpAddr) -> bool {
        non_public(ip).is_none() || self.addresses.iter().any(|c| c.contains(ip))
    }

    fn describe(&self, index: usize) -> String {
        format!(
            "egress rule #{} ({} {} ports {:?})",
            index + 1,
            self.schemes.join("|"),
            self.host,
            self.ports
        )
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    }
}

/// The deployment's egress policy: a list of allow rules; anything else is refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressPolicy {
    /// The rules.
    #[serde(default)]
    pub allow: Vec<EgressRule>,
}

impl EgressPolicy {
    /// Each rule in words (schemes, host, ports, and the non-public address ranges it admits),
    /// for the configuration's audit record.
    pub fn summary(&self) -> Vec<String> {
        self.allow
            .iter()
            .enumerate()
            .map(|(i, r)| {
                format!(
                    "{}, {} non-public address range(s)",
                    r.describe(i),
                    r.addresses.len()
                )
            })
            .collect()
    }

    /// Checks a URL's scheme, host and port; returns the index of the rule that allows it.
    pub fn check_url(&self, url: &Url) -> Result<usize, McpError> {
        self.allow
            .iter()
            .position(|r| r.allows_url(url))
            .ok_or_else(|| {
                McpError::Egress(format!(
                    "{} is not allowed: no egress rule names scheme {}, host {} and port {}",
                    strip_credentials(url),
                    url.scheme(),
                    url.host_str().unwrap_or("?"),
                    url.port_or_known_default()
                        .map_or("?".into(), |p| p.to_string()),
                ))
            })
    }

    /// Checks that `ip`, an address `url`'s host resolved to, is allowed by a rule allowing
    /// `url`.
    pub fn check_address(&self, url: &Url, ip: IpAddr) -> Result<(), McpError> {
        let index = self.check_url(url)?;
        let matching: Vec<(usize, &EgressRule)> = self
            .allow
            .iter()
            .enumerate()
            .filter(|(_, r)| r.allows_url(url))
            .collect();
        if matching.iter().any(|(_, r)| r.allows_address(ip)) {
            return Ok(());
        }
        Err(McpError::Egress(format!(
            "{} resolves to {ip}, a {} address that {} does not name in `addresses`",
            url.host_str().unwrap_or("?"),
            non_public(ip).unwrap_or("forbidden"),
            self.allow[index].describe(index),
        )))
    }

    /// A redirect policy that follows at most five redirects, each to a URL these rules allow
    /// (an IP-literal target's address is checked here; a name's when it is resolved).
    pub fn redirect_policy(self: &Arc<Self>) -> reqwest::redirect::Policy {
        let policy = Arc::clone(self);
        reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                return attempt.error("too many redirects");
            }
            let url = attempt.url().clone();
            let literal = url
                .host_str()
                .and_then(|h| h.trim_matches(['[', ']']).parse::<IpAddr>().ok());
            let checked = match literal {
                Some(ip) => policy.check_address(&url, ip),
                None => policy.check_url(&url).map(|_| ()),
            };
            match checked {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(format!("redirect refused: {e}")),
            }
        })
    }
}

/// The URL without user name or password, for messages.
pub fn strip_credentials(url: &Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

/// A DNS resolver that resolves each name once per process and hands out only the addresses
/// the policy allows for it, so a connection (first or after a redirect) can only reach an
/// address that was checked.
#[derive(Debug)]
pub struct EgressResolver {
    policy: Arc<EgressPolicy>,
    resolved: Mutex<HashMap<String, Vec<SocketAddr>>>,
}

impl EgressResolver {
    /// A resolver for `policy`.
    pub fn new(policy: Arc<EgressPolicy>) -> Self {
        Self {
            policy,
            resolved: Mutex::new(HashMap::new()),
        }
    }

    /// Resolves `url`'s host now and checks every address (an IP literal is checked as is).
    /// Start-up calls this, so a refused endpoint is a configuration error before any request.
    pub async fn admit(&self, url: &Url) -> Result<Vec<SocketAddr>, McpError> {
        self.policy.check_url(url)?;
        let host = url
            .host_str()
            .ok_or_else(|| McpError::Egress(format!("{} has no host", strip_credentials(url))))?
            .trim_matches(['[', ']'])
            .to_ascii_lowercase();
        let port = url.port_or_known_default().unwrap_or(443);
        if let Ok(ip) = host.parse::<IpAddr>() {
            self.policy.check_address(url, ip)?;
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        if let Some(addrs) = lock(&self.resolved).get(&host) {
            return Ok(addrs.clone());
        }
        let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| McpError::Egress(format!("could not resolve {host}: {e}")))?
            .collect();
        if found.is_empty() {
            return Err(McpError::Egress(format!("{host} resolves to no address")));
        }
        // Every address must pass: a name that resolves to a public and a forbidden address is
        // refused whole, rather than trusting the connector to pick the right one.
        for a in &found {
            self.policy.check_address(url, a.ip())?;
        }
        Ok(lock(&self.resolved).entry(host).or_insert(found).clone())
    }
}

fn lock<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

impl Resolve for EgressResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_ascii_lowercase();
        let cached = lock(&self.resolved).get(&host).cloned();
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            match cached {
                Some(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                // A name never admitted (a redirect target): resolved here, once, and every
                // address checked against a rule naming the host.
                None => {
                    let found: Vec<SocketAddr> =
                        tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
                    let allowed = found.iter().all(|a| {
                        policy
                            .allow
                            .iter()
                            .any(|r| r.host.eq_ignore_ascii_case(&host) && r.allows_address(a.ip()))
                    });
                    if found.is_empty() || !allowed {
                        return Err(McpError::Egress(format!(
                            "{host} resolves to an address no egress rule allows"
                        ))
                        .into());
                    }
                    Ok(Box::new(found.into_iter()) as Addrs)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn policy(toml_text: &str) -> EgressPolicy {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn networks_contain_what_they_should() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(
            c.contains("::ffff:10.0.0.1".parse().unwrap()),
            "mapped v4 counts"
        );
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!(
            "fc00::/7"
                .parse::<Cidr>()
                .unwrap()
                .contains("fd00::1".parse().unwrap())
        );
    }

    #[test]
    fn non_public_ranges_are_named() {
        for (ip, why) in [
            ("127.0.0.1", "loopback"),
            ("10.0.0.1", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("::1", "loopback"),
            ("fd00::1", "private"),
            ("::ffff:127.0.0.1", "loopback"),
        ] {
            assert_eq!(non_public(ip.parse().unwrap()), Some(why), "{ip}");
        }
        assert_eq!(non_public("93.184.216.34".parse().unwrap()), None);
    }

    #[test]
    fn urls_need_a_rule_for_scheme_host_and_port() {
        let p = policy(
            r#"
            [[allow]]
            host = "mcp.example.com"
            [[allow]]
            schemes = ["http"]
            host = "127.0.0.1"
            ports = [3001]
            addresses = ["127.0.0.1"]
            "#,
        );
        assert!(p.check_url(&url("https://mcp.example.com/mcp")).is_ok());
        assert!(p.check_url(&url("https://MCP.example.com:443/mcp")).is_ok());
        assert!(
            p.check_url(&url("http://mcp.example.com/mcp")).is_err(),
            "scheme"
        );
        assert!(
            p.check_url(&url("https://mcp.example.com:8443/")).is_err(),
            "port"
        );
        assert!(
            p.check_url(&url("https://evil.example.com/")).is_err(),
            "host"
        );
        assert!(p.check_url(&url("http://127.0.0.1:3001/mcp")).is_ok());
        let e = p.check_url(&url("http://127.0.0.1:3002/mcp")).unwrap_err();
        assert!(e.to_string().contains("no egress rule"), "{e}");
    }

    #[test]
    fn a_non_public_address_needs_the_rule_to_name_it() {
        let p = policy(
            r#"
            [[allow]]
            schemes = ["http"]
            host = "internal.test"
            ports = [80]
            "#,
        );
        let u = url("http://internal.test/");
        assert!(
            p.check_address(&u, "93.184.216.34".parse().unwrap())
                .is_ok()
        );
        let e = p
            .check_address(&u, "169.254.169.254".parse().unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("link-local"), "{e}");
        assert!(e.to_string().contains("egress rule #1"), "{e}");
    }

    #[tokio::test]
    async fn admission_resolves_once_and_refuses_a_name_bound_to_a_forbidden_address() {
        // `localhost` resolves to loopback: refused unless the rule names loopback.
        let strict = Arc::new(policy(
            "[[allow]]\nschemes = [\"http\"]\nhost = \"localhost\"\nports = [9]\n",
        ));
        let e = EgressResolver::new(strict)
            .admit(&url("http://localhost:9/"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("loopback"), "{e}");
        let named = Arc::new(policy(
            "[[allow]]\nschemes = [\"http\"]\nhost = \"localhost\"\nports = [9]\naddresses = [\"127.0.0.0/8\", \"::1\"]\n",
        ));
        let r = EgressResolver::new(named);
        let first = r.admit(&url("http://localhost:9/")).await.unwrap();
        assert!(!first.is_empty());
        assert_eq!(r.admit(&url("http://localhost:9/")).await.unwrap(), first);
    }
}
