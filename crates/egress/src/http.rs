//! HTTP/1.x proxying: `CONNECT` tunnels and absolute-form plain-HTTP requests.
//!
//! Plain-HTTP requests are parsed one by one (framing by `Content-Length` or
//! chunked encoding, both ways), so on a keep-alive connection each request is
//! decided on its own host. A request carrying both `Content-Length` and
//! `Transfer-Encoding`, or two different lengths, is refused (request
//! smuggling). The upstream `Host` header is the one of the checked URL.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::audit::{Protocol, Verdict};
use crate::proxy::{Proxy, Upstream};
use crate::stream::{Buffered, Counted, HeadError};

/// Largest request or response head.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
pub(crate) const MAX_HEADERS: usize = 128;

/// How a body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Body {
    None,
    Length(u64),
    Chunked,
    /// Until the upstream closes (responses only).
    UntilClose,
}

pub(crate) struct Head {
    /// Header names (as sent) and values.
    pub headers: Vec<(String, Vec<u8>)>,
    pub version: u8,
}

impl Head {
    fn get(&self, name: &str) -> impl Iterator<Item = &[u8]> {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        self.get(name).any(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case(token))
        })
    }

    /// The framing the headers declare; `Err`: contradictory or unknown.
    pub(crate) fn framing(&self) -> Result<Option<Body>, &'static str> {
        let te: Vec<&[u8]> = self.get("transfer-encoding").collect();
        let cl: Vec<&[u8]> = self.get("content-length").collect();
        if !te.is_empty() {
            if !cl.is_empty() {
                return Err("both Content-Length and Transfer-Encoding");
            }
            let last = te.last().and_then(|v| {
                String::from_utf8_lossy(v)
                    .rsplit(',')
                    .next()
                    .map(|s| s.trim().to_ascii_lowercase())
            });
            return match last.as_deref() {
                Some("chunked") => Ok(Some(Body::Chunked)),
                _ => Err("a Transfer-Encoding that does not end in chunked"),
            };
        }
        let mut len = None;
        for v in cl {
            let s = std::str::from_utf8(v).map_err(|_| "a malformed Content-Length")?;
            for part in s.split(',') {
                let n: u64 = part
                    .trim()
                    .parse()
                    .map_err(|_| "a malformed Content-Length")?;
                if len.is_some_and(|l| l != n) {
                    return Err("two different Content-Length values");
                }
                len = Some(n);
            }
        }
        Ok(len.map(Body::Length))
    }

    fn keep_alive(&self) -> bool {
        if self.version == 0 {
            self.has_token("connection", "keep-alive")
        } else {
            !self.has_token("connection", "close")
        }
    }
}

pub(crate) fn collect(headers: &[httparse::Header<'_>]) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|h| (h.name.to_owned(), h.value.to_vec()))
        .collect()
}

/// One request head read from a client.
pub(crate) struct Request {
    pub method: String,
    pub target: String,
    pub head: Head,
}

/// The client's next request head, or `None` when the conversation is over:
/// the client went away, or its head was too large or malformed and it got
/// the error (`malformed` is the text of a 400).
pub(crate) async fn next_request<S>(client: &mut Buffered<S>, malformed: &str) -> Option<Request>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let raw = match client.read_head(MAX_HEAD).await {
        Ok(Some(h)) => h,
        Ok(None) | Err(HeadError::Io(_)) => return None,
        Err(HeadError::TooLarge) => {
            respond(
                client,
                "431 Request Header Fields Too Large",
                "capstan egress: request head too large",
            )
            .await;
            return None;
        }
    };
    let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut hs);
    if !matches!(req.parse(&raw), Ok(httparse::Status::Complete(_))) {
        respond(client, "400 Bad Request", malformed).await;
        return None;
    }
    Some(Request {
        method: req.method.unwrap_or("").to_owned(),
        target: req.path.unwrap_or("").to_owned(),
        head: Head {
            headers: collect(req.headers),
            version: req.version.unwrap_or(1),
        },
    })
}

pub(crate) async fn respond<S: AsyncWrite + Unpin>(client: &mut S, status: &str, text: &str) {
    let body = format!("{text}\n");
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\nX-Capstan-Egress: refused\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(msg.as_bytes()).await;
    let _ = client.flush().await;
}

pub(crate) async fn refuse<S: AsyncWrite + Unpin>(client: &mut S, r: &crate::proxy::Refusal) {
    let status = if r.verdict == Verdict::Denied {
        "403 Forbidden"
    } else {
        "502 Bad Gateway"
    };
    respond(client, status, &format!("capstan egress: {}", r.reason)).await;
}

/// `host:port` of a CONNECT target, or of a URL's authority (with the
/// scheme's default port).
fn split_authority(authority: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    if authority.contains('@') {
        return None; // userinfo: never part of where we go
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return None,
        };
        (format!("[{h}]"), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default_port?,
    };
    (!host.is_empty()).then_some((host, port))
}

/// An absolute-form `http://` URL: host, port and the origin-form path.
fn split_url(target: &str) -> Option<(String, u16, String)> {
    let rest = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("HTTP://"))?;
    let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(cut);
    let (host, port) = split_authority(authority, Some(80))?;
    let path = match path {
        "" => "/".to_owned(),
        p if p.starts_with('/') => p.to_owned(),
        p => format!("/{p}"),
    };
    Some((host, port, path))
}

pub(crate) async fn serve<S>(proxy: &Proxy, mut client: Buffered<S>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let mut current: Option<(Upstream, Buffered<Counted<tokio::net::TcpStream>>)> = None;
    let error = session(proxy, &mut client, &mut current).await.err();
    if let Some((up, _)) = current {
        proxy.finish(&up, error);
    }
}

/// Serves requests until the connection ends. `current` is the open upstream
/// connection (its record is sent by the caller or when the host changes).
async fn session<S>(
    proxy: &Proxy,
    client: &mut Buffered<S>,
    current: &mut Option<(Upstream, Buffered<Counted<tokio::net::TcpStream>>)>,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    loop {
        let Some(Request {
            method,
            target,
            head,
        }) = next_request(client, "capstan egress: malformed request").await
        else {
            return Ok(());
        };

        if method.eq_ignore_ascii_case("CONNECT") {
            // A tunnel ends the HTTP conversation: close what was open.
            if let Some((up, _)) = current.take() {
                proxy.finish(&up, None);
            }
            return tunnel(proxy, client, &target).await;
        }

        let Some((host, port, path)) = split_url(&target) else {
            let why = if target.starts_with("https://") {
                "use CONNECT for https:// (set HTTPS_PROXY)".to_owned()
            } else {
                format!("this is a proxy: send an absolute http:// URL or CONNECT, not {target:?}")
            };
            respond(client, "400 Bad Request", &format!("capstan egress: {why}")).await;
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

        // The same host and port reuse the connection; anything else is decided anew.
        if current
            .as_ref()
            .is_some_and(|(u, _)| u.host != host || u.port != port)
            && let Some((up, _)) = current.take()
        {
            proxy.finish(&up, None);
        }
        if current.is_none() {
            match proxy.open(&host, port, Protocol::Http).await {
                Ok(mut up) => {
                    let stream = Buffered::new(up.take_stream().map_err(|e| e.to_string())?)
                        .splicing(proxy.relay_mode());
                    *current = Some((up, stream));
                }
                Err(r) => {
                    refuse(client, &r).await;
                    return Ok(());
                }
            }
        }
        let Some((up, upstream)) = current.as_mut() else {
            return Err("no upstream connection".into());
        };
        if let Some(c) = proxy.credential_for(&host, port) {
            // Never over plain HTTP: the request goes without it.
            up.note = Some(format!(
                "plain HTTP to a credential host: the {} credential was not sent (use https://)",
                c.header
            ));
        }

        // Request head, origin-form, Host from the checked URL.
        let authority = if port == 80 {
            host.clone()
        } else {
            format!("{host}:{port}")
        };
        if !exchange(
            client, upstream, &method, &path, &head, req_body, &authority, None,
        )
        .await?
        {
            return Ok(());
        }
    }
}

/// One request and its response: sends the request (origin-form `path`,
/// `Host: authority`, the client's headers but hop-by-hop proxy ones, and
/// `inject` in place of any header of that name) and its body upstream, then
/// relays the response back. `Ok(false)`: the connection is done.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn exchange<C, U>(
    client: &mut Buffered<C>,
    upstream: &mut Buffered<U>,
    method: &str,
    path: &str,
    head: &Head,
    req_body: Body,
    authority: &str,
    inject: Option<(&str, &str)>,
) -> Result<bool, String>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "host" | "proxy-connection" | "proxy-authorization" | "expect"
        ) || inject.is_some_and(|(h, _)| h.eq_ignore_ascii_case(name))
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if let Some((name, value)) = inject {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    if head.version == 0 && !head.has_token("connection", "keep-alive") {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(format!("Host: {authority}\r\n\r\n").as_bytes());
    let io = |e: std::io::Error| e.to_string();
    upstream.write_all(&out).await.map_err(io)?;
    match req_body {
        Body::Length(n) => client.copy_n(n, upstream).await.map_err(io)?,
        Body::Chunked => relay_chunked(client, upstream).await.map_err(io)?,
        Body::None | Body::UntilClose => {}
    }
    upstream.flush().await.map_err(io)?;

    // Response: informational heads are relayed until the final one.
    let (status, resp) = loop {
        let raw = match upstream.read_head(MAX_HEAD).await {
            Ok(Some(h)) => h,
            Ok(None) | Err(HeadError::Io(_)) => {
                respond(
                    client,
                    "502 Bad Gateway",
                    "capstan egress: the host closed the connection without an answer",
                )
                .await;
                return Err("no response".into());
            }
            Err(HeadError::TooLarge) => {
                respond(
                    client,
                    "502 Bad Gateway",
                    "capstan egress: the host's response head is too large",
                )
                .await;
                return Err("response head too large".into());
            }
        };
        let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut hs);
        if !matches!(resp.parse(&raw), Ok(httparse::Status::Complete(_))) {
            respond(
                client,
                "502 Bad Gateway",
                "capstan egress: malformed response from the host",
            )
            .await;
            return Err("malformed response".into());
        }
        let status = resp.code.unwrap_or(0);
        let parsed = Head {
            headers: collect(resp.headers),
            version: resp.version.unwrap_or(1),
        };
        client.write_all(&raw).await.map_err(io)?;
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        break (status, parsed);
    };
    if status == 101 {
        // Protocol switch (WebSocket) with the checked host: relay as is.
        crate::stream::relay(client, upstream).await.map_err(io)?;
        return Ok(false);
    }
    let body = if method.eq_ignore_ascii_case("HEAD") || status == 204 || status == 304 {
        Body::None
    } else {
        match resp.framing() {
            Ok(Some(b)) => b,
            Ok(None) => Body::UntilClose,
            Err(why) => {
                return Err(format!("the response has {why}"));
            }
        }
    };
    match body {
        Body::None => {}
        Body::Length(n) => upstream.copy_n(n, client).await.map_err(io)?,
        Body::Chunked => relay_chunked(upstream, client).await.map_err(io)?,
        Body::UntilClose => {
            upstream.copy_to_end(client).await.map_err(io)?;
            let _ = client.shutdown().await;
            return Ok(false);
        }
    }
    client.flush().await.map_err(io)?;
    if !head.keep_alive() || !resp.keep_alive() {
        let _ = client.shutdown().await;
        return Ok(false);
    }
    Ok(true)
}

/// Copies one chunked body, chunk by chunk, trailers included.
async fn relay_chunked<R, W>(from: &mut Buffered<R>, to: &mut Buffered<W>) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncRead + AsyncWrite + Unpin,
{
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed chunked body");
    loop {
        let line = from.read_line(4096).await?;
        to.write_all(&line).await?;
        let text = std::str::from_utf8(&line).map_err(|_| bad())?;
        let size = text.split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(size, 16).map_err(|_| bad())?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let line = from.read_line(8192).await?;
                to.write_all(&line).await?;
                if line == b"\r\n" || line == b"\n" {
                    return Ok(());
                }
            }
        }
        from.copy_n(size + 2, to).await?;
    }
}

/// `CONNECT host:port`: decide, connect, answer 200, then relay bytes both
/// ways to that one address.
async fn tunnel<S>(proxy: &Proxy, client: &mut Buffered<S>, target: &str) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let Some((host, port)) = split_authority(target, None) else {
        respond(
            client,
            "400 Bad Request",
            &format!("capstan egress: CONNECT needs host:port, not {target:?}"),
        )
        .await;
        return Ok(());
    };
    let mut upstream = match proxy.open(&host, port, Protocol::Connect).await {
        Ok(u) => u,
        Err(r) => {
            refuse(client, &r).await;
            return Ok(());
        }
    };
    if let Some(cred) = proxy.credential_for(&host, port) {
        let result = match crate::broker::connect(proxy, &mut upstream, &cred).await {
            Ok(tls) => {
                let ok = client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                match ok {
                    Ok(()) => crate::broker::serve(proxy, client, tls, &mut upstream, &cred).await,
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(why) => {
                respond(client, "502 Bad Gateway", &format!("capstan egress: {why}")).await;
                Err(why)
            }
        };
        proxy.finish(&upstream, result.err());
        return Ok(());
    }
    let mut stream = upstream.take_stream().map_err(|e| e.to_string())?;
    let result = async {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
        // Bytes the client sent after the head (an early TLS hello) are in
        // the buffer and go first.
        crate::stream::tunnel(client, &mut stream).await
    }
    .await;
    proxy.finish(&upstream, result.err().map(|e| e.to_string()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_authorities() {
        assert_eq!(
            split_url("http://example.com/a?b"),
            Some(("example.com".into(), 80, "/a?b".into()))
        );
        assert_eq!(
            split_url("http://example.com:8080"),
            Some(("example.com".into(), 8080, "/".into()))
        );
        assert_eq!(
            split_url("http://[::1]:81/x"),
            Some(("[::1]".into(), 81, "/x".into()))
        );
        assert_eq!(split_url("http://user@evil.com@good.com/"), None);
        assert_eq!(split_url("https://example.com/"), None);
        assert_eq!(split_url("/relative"), None);
        assert_eq!(
            split_authority("example.com:443", None),
            Some(("example.com".into(), 443))
        );
        assert_eq!(split_authority("example.com", None), None);
        assert_eq!(split_authority("example.com:99999", None), None);
    }

    #[test]
    fn contradictory_framing_is_refused() {
        let head = |h: &[(&str, &str)]| Head {
            headers: h
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            version: 1,
        };
        assert!(
            head(&[("Content-Length", "5"), ("Transfer-Encoding", "chunked")])
                .framing()
                .is_err()
        );
        assert!(
            head(&[("Content-Length", "5"), ("Content-Length", "6")])
                .framing()
                .is_err()
        );
        assert!(
            head(&[("Transfer-Encoding", "chunked, gzip")])
                .framing()
                .is_err()
        );
        assert_eq!(
            head(&[("Content-Length", "5, 5")]).framing(),
            Ok(Some(Body::Length(5)))
        );
        assert_eq!(
            head(&[("transfer-encoding", "gzip, chunked")]).framing(),
            Ok(Some(Body::Chunked))
        );
        assert_eq!(head(&[]).framing(), Ok(None));
        assert!(!head(&[("Connection", "keep-alive, close")]).keep_alive());
    }
}
