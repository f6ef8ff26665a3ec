//! SOCKS5 (RFC 1928), `CONNECT` only, no authentication.
//!
//! A domain name is resolved by the proxy (clients should use `socks5h://`);
//! an address the client resolved itself arrives as an IP literal and needs an
//! address rule, like any IP literal.

use std::net::{Ipv4Addr, Ipv6Addr};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::audit::{Protocol, Verdict};
use crate::proxy::Proxy;
use crate::stream::Buffered;

const NO_AUTH: u8 = 0x00;
const NO_ACCEPTABLE: u8 = 0xff;
const CMD_CONNECT: u8 = 0x01;
const REP_OK: u8 = 0x00;
const REP_NOT_ALLOWED: u8 = 0x02;
const REP_HOST_UNREACHABLE: u8 = 0x04;
const REP_CMD_UNSUPPORTED: u8 = 0x07;
const REP_ATYP_UNSUPPORTED: u8 = 0x08;

pub(crate) async fn serve<S>(proxy: &Proxy, mut client: Buffered<S>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let _ = run(proxy, &mut client).await;
}

async fn reply<S: AsyncWrite + Unpin>(client: &mut S, code: u8) -> std::io::Result<()> {
    // The bound address is not meaningful through the bridge: 0.0.0.0:0.
    client
        .write_all(&[0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0])
        .await
}

async fn run<S>(proxy: &Proxy, client: &mut Buffered<S>) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let hello = client.take(2).await?;
    let methods = client.take(hello[1] as usize).await?;
    if !methods.contains(&NO_AUTH) {
        client.write_all(&[0x05, NO_ACCEPTABLE]).await?;
        return Ok(());
    }
    client.write_all(&[0x05, NO_AUTH]).await?;

    let req = client.take(4).await?;
    if req[0] != 0x05 {
        return Ok(());
    }
    let host = match req[3] {
        0x01 => {
            let a = client.take(4).await?;
            Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string()
        }
        0x03 => {
            let len = client.take(1).await?[0] as usize;
            let name = client.take(len).await?;
            String::from_utf8_lossy(&name).into_owned()
        }
        0x04 => {
            let a: [u8; 16] = client
                .take(16)
                .await?
                .try_into()
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
            format!("[{}]", Ipv6Addr::from(a))
        }
        _ => {
            reply(client, REP_ATYP_UNSUPPORTED).await?;
            return Ok(());
        }
    };
    let p = client.take(2).await?;
    let port = u16::from_be_bytes([p[0], p[1]]);
    if req[1] != CMD_CONNECT {
        // BIND and UDP ASSOCIATE would open the way around the checks.
        reply(client, REP_CMD_UNSUPPORTED).await?;
        return Ok(());
    }
    let mut upstream = match proxy.open(&host, port, Protocol::Socks5).await {
        Ok(u) => u,
        Err(r) => {
            tracing::info!(target: "capstan_egress", "{}", r.reason);
            let code = if r.verdict == Verdict::Denied {
                REP_NOT_ALLOWED
            } else {
                REP_HOST_UNREACHABLE
            };
            reply(client, code).await?;
            return Ok(());
        }
    };
    if let Some(cred) = proxy.credential_for(&host, port) {
        let result = match crate::broker::connect(proxy, &mut upstream, &cred).await {
            Ok(tls) => match reply(client, REP_OK).await {
                Ok(()) => crate::broker::serve(proxy, client, tls, &mut upstream, &cred).await,
                Err(e) => Err(e.to_string()),
            },
            Err(why) => {
                tracing::info!(target: "capstan_egress", "{why}");
                reply(client, REP_HOST_UNREACHABLE).await?;
                Err(why)
            }
        };
        proxy.finish(&upstream, result.err());
        return Ok(());
    }
    let mut stream = upstream.take_stream()?;
    let result = async {
        reply(client, REP_OK).await?;
        crate::stream::tunnel(client, &mut stream).await
    }
    .await;
    proxy.finish(&upstream, result.err().map(|e| e.to_string()));
    Ok(())
}
