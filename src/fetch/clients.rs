//! The HTTP clients of one fetcher (ureq agents): direct, through the configured proxies, and
//! from a privileged source port; each sends the headers Ignition sends.

use std::sync::{Arc, LazyLock};

use anyhow::{Context, Result};
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{ConnectProxyConnector, Connector, TcpConnector};

use super::options::Options;
use super::proxy::{AbsoluteFormConnector, ProxyResolver};
use super::tls::{self, TlsConnector};
use spec::config::Version;

/// The Ignition release whose fetch behaviour (headers, retries) the agent follows.
pub const IGNITION_COMPAT_VERSION: &str = "2.26.0";
/// `User-Agent`: servers written for Ignition look for the `Ignition/` prefix.
static USER_AGENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "Ignition/{IGNITION_COMPAT_VERSION} (agent/{})",
        env!("CARGO_PKG_VERSION")
    )
});
/// `Accept`: the newest config spec we read, then anything. The MachineConfigServer picks
/// the spec version of the config it serves from this header (no header: spec 2.2).
pub static ACCEPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "application/vnd.coreos.ignition+json;version={}, */*;q=0.1",
        Version::NEWEST
    )
});
/// `Accept-Encoding`: contents are hashed as served, so no transfer compression.
pub const ACCEPT_ENCODING: &str = "identity";

/// The `User-Agent` the agent sends.
pub fn user_agent() -> &'static str {
    &USER_AGENT
}

/// The clients of one fetcher: direct, and through the configured proxies.
pub struct Agents {
    direct: ureq::Agent,
    /// Plain http through `httpProxy` (absolute-form requests to the proxy).
    http_proxied: Option<ureq::Agent>,
    /// https through `httpsProxy` (CONNECT tunnel).
    https_proxied: Option<ureq::Agent>,
    /// Plain http from a privileged source port ([`super::lowport`]).
    low_port: ureq::Agent,
}

impl Agents {
    pub fn new(opts: &Options, link_scope: Option<u32>) -> Result<Self> {
        let tls = tls::client_config(&opts.ca_pems)?;
        if let Some(scope) = link_scope {
            // Link-local only: no proxy, no privileged port.
            let direct = ureq::Agent::with_parts(
                agent_config(None).build(),
                ().chain(TcpConnector::default())
                    .chain(TlsConnector::new(tls.clone())),
                super::metadata_client::ScopedResolver(scope),
            );
            return Ok(Agents {
                low_port: direct.clone(),
                direct,
                http_proxied: None,
                https_proxied: None,
            });
        }
        let direct = tunnel_agent(&tls, None);
        let p = &opts.proxy;
        let http_proxied = match p.http_proxy.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => Some(http_proxy_agent(&tls, url)?),
            None => None,
        };
        let https_proxied = match p.https_proxy.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => {
                let proxy = ureq::Proxy::new(url).with_context(|| format!("proxy {url}"))?;
                Some(tunnel_agent(&tls, Some(proxy)))
            }
            None => None,
        };
        let low_port = ureq::Agent::with_parts(
            agent_config(None)
                .max_idle_connections(0)
                .max_idle_connections_per_host(0)
                .build(),
            ().chain(super::lowport::LowPortConnector),
            DefaultResolver::default(),
        );
        Ok(Agents {
            direct,
            http_proxied,
            https_proxied,
            low_port,
        })
    }

    /// The client for plain http from a privileged source port.
    pub fn low_port(&self) -> &ureq::Agent {
        &self.low_port
    }

    pub fn for_url(&self, opts: &Options, link_scope: Option<u32>, url: &str) -> &ureq::Agent {
        if link_scope.is_some() || super::proxy::proxy_for(&opts.proxy, url).is_none() {
            return &self.direct;
        }
        let https = url
            .get(..6)
            .is_some_and(|s| s.eq_ignore_ascii_case("https:"));
        let proxied = if https {
            &self.https_proxied
        } else {
            &self.http_proxied
        };
        proxied.as_ref().unwrap_or(&self.direct)
    }
}

fn agent_config(
    proxy: Option<ureq::Proxy>,
) -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(proxy)
        .user_agent(user_agent())
        .accept(ACCEPT.as_str())
        .accept_encoding(ACCEPT_ENCODING)
}

/// Direct connections, or https through `proxy` in a CONNECT tunnel.
fn tunnel_agent(tls: &Arc<rustls::ClientConfig>, proxy: Option<ureq::Proxy>) -> ureq::Agent {
    let connector =
        ().chain(ConnectProxyConnector::default())
            .chain(TcpConnector::default())
            .chain(TlsConnector::new(tls.clone()));
    ureq::Agent::with_parts(
        agent_config(proxy).build(),
        connector,
        DefaultResolver::default(),
    )
}

/// Plain http through the proxy at `url`: every connection goes to the proxy and carries
/// one request in absolute form.
fn http_proxy_agent(tls: &Arc<rustls::ClientConfig>, url: &str) -> Result<ureq::Agent> {
    let p = ureq::Proxy::new(url).with_context(|| format!("proxy {url}"))?;
    if p.protocol() != ureq::ProxyProtocol::Http {
        // Anything but a plain HTTP proxy: ureq's own handling (CONNECT).
        return Ok(tunnel_agent(tls, Some(p)));
    }
    let host = p.host();
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let endpoint: ureq::http::Uri = format!("http://{host}:{}", p.port())
        .parse()
        .with_context(|| format!("proxy {url}"))?;
    let connector =
        ().chain(TcpConnector::default())
            .chain(AbsoluteFormConnector::new(p.username(), p.password()))
            .chain(TlsConnector::new(tls.clone()));
    // One request per connection: the request target is rewritten once per connection.
    let cfg = agent_config(None)
        .max_idle_connections(0)
        .max_idle_connections_per_host(0)
        .build();
    Ok(ureq::Agent::with_parts(
        cfg,
        connector,
        ProxyResolver::new(endpoint),
    ))
}
