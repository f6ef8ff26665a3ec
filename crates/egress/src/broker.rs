//! Terminating TLS for a credential host: the proxy's side of
//! [`crate::credential`].
//!
//! The upstream TLS connection is made (and the host's certificate verified)
//! before the command is told the tunnel is open, so a host whose certificate
//! is not trusted is refused like any failed connection, with the reason in
//! the record. Inside, requests are read one by one with the same parsing
//! and framing as plain-HTTP forwarding ([`crate::http::exchange`]), the
//! credential header replaces whatever the command sent under that name,
//! `Host` is the granted host, and the answer reaches the command through a
//! [`Masking`] writer.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::credential::{Credential, client_config};
use crate::http::{Body, Request, exchange, next_request, respond};
use crate::proxy::{CONNECT_TIMEOUT, Proxy, Upstream};
use crate::stream::{Buffered, Counted, Masking};

pub(crate) type UpstreamTls = tokio_rustls::client::TlsStream<Counted<TcpStream>>;

/// TLS with the credential host, its certificate verified against the system
/// roots and the proxy's upstream CAs. `Err`: a sentence for the record.
/// The name checked and sent (SNI, `Host`) is the credential's, normalised.
pub(crate) async fn connect(
    proxy: &Proxy,
    upstream: &mut Upstream,
    cred: &Credential,
) -> Result<UpstreamTls, String> {
    let broker = proxy.broker();
    let cfg = broker
        .client_config
        .get_or_init(|| client_config(&broker.upstream_roots).map_err(|e| e.0))
        .clone()?;
    let (host, port) = (cred.host.clone(), upstream.port);
    let name = rustls::pki_types::ServerName::try_from(host.clone())
        .map_err(|e| format!("{host} is not a TLS server name: {e}"))?;
    let stream = upstream.take_stream().map_err(|e| e.to_string())?;
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        TlsConnector::from(cfg).connect(name, stream),
    )
    .await
    {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) => {
            let untrusted = e
                .get_ref()
                .and_then(|i| i.downcast_ref::<rustls::Error>())
                .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)));
            Err(if untrusted {
                format!(
                    "the certificate of {host}:{port} is not trusted ({e}); the credential was \
                     not sent (if {host} uses a private CA, give the proxy that CA as an \
                     upstream CA)"
                )
            } else {
                format!("TLS with {host}:{port} failed ({e}); the credential was not sent")
            })
        }
        Err(_) => Err(format!(
            "TLS with {host}:{port}: no answer in {CONNECT_TIMEOUT:?}; the credential was not sent"
        )),
    }
}

/// Answers the command's TLS with a certificate of the workspace CA, then
/// relays its requests to `tls` with the credential set. The caller sends
/// the record.
pub(crate) async fn serve<S>(
    proxy: &Proxy,
    client: &mut Buffered<S>,
    tls: UpstreamTls,
    upstream: &mut Upstream,
    cred: &Credential,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let ca = proxy
        .broker()
        .ca
        .clone()
        .ok_or("credential brokering has no CA")?;
    let host = cred.host.clone();
    let cfg = ca.server_config(&host).map_err(|e| e.0)?;
    // Early bytes (the command's hello) are in `client`'s buffer and go first.
    let accepted = TlsAcceptor::from(cfg).accept(client).await.map_err(|e| {
        format!(
            "the command's TLS handshake for {host} failed ({e}); it must trust the workspace \
             CA (the variables of Ca::sandbox_env)"
        )
    })?;
    upstream.credential = Some(cred.header.clone());
    let secret = cred.value().expose();
    let mut client = Buffered::new(Masking::new(accepted, secret.as_bytes()));
    let mut up = Buffered::new(tls);
    let authority = if upstream.port == 443 {
        host.clone()
    } else {
        format!("{host}:{}", upstream.port)
    };
    let result = requests(&mut client, &mut up, &host, &authority, cred).await;
    let _ = client.shutdown().await;
    result
}

async fn requests<C, U>(
    client: &mut Buffered<C>,
    up: &mut Buffered<U>,
    host: &str,
    authority: &str,
    cred: &Credential,
) -> Result<(), String>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let inject = Some((cred.header.as_str(), cred.value().expose()));
    loop {
        let Some(Request {
            method,
            target,
            head,
        }) = next_request(
            client,
            "capstan egress: malformed request (HTTP/1.1 only on a brokered host)",
        )
        .await
        else {
            return Ok(());
        };
        let Some(path) = origin_form(&target, host) else {
            respond(
                client,
                "400 Bad Request",
                &format!(
                    "capstan egress: this connection goes to {host} only; send an origin-form \
                     target (/path), not {target:?}"
                ),
            )
            .await;
            return Ok(());
        };
        let req_body = match head.framing() {
            Ok(b) => b.unwrap_or(Body::None),
            Err(why) => {
                respond(
                    client,
                    "400 Bad Request",
                    &format!("capstan egress: the request has {why}"),
                )
                .await;
                return Ok(());
            }
        };
        if !exchange(
            client, up, &method, &path, &head, req_body, authority, inject,
        )
        .await?
        {
            return Ok(());
        }
    }
}

/// The origin-form path of a request inside a terminated tunnel: `/...`,
/// `*`, or an absolute `https://` URL naming the tunnel's own host.
fn origin_form(target: &str, host: &str) -> Option<String> {
    if target.starts_with('/') || target == "*" {
        return Some(target.to_owned());
    }
    let rest = target.strip_prefix("https://")?;
    let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(cut);
    let name = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_end_matches('.');
    if !name.eq_ignore_ascii_case(host) || authority.contains('@') {
        return None;
    }
    Some(if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    })
}

#[cfg(test)]
mod tests {
    use super::origin_form;

    #[test]
    fn only_the_tunnel_host_is_reachable_inside() {
        assert_eq!(origin_form("/a?b", "h.test").as_deref(), Some("/a?b"));
        assert_eq!(
            origin_form("https://H.test/x", "h.test").as_deref(),
            Some("/x")
        );
        assert_eq!(
            origin_form("https://h.test", "h.test").as_deref(),
            Some("/")
        );
        assert_eq!(origin_form("https://other.test/x", "h.test"), None);
        assert_eq!(origin_form("https://u@h.test/x", "h.test"), None);
        assert_eq!(origin_form("http://h.test/x", "h.test"), None);
    }
}
