//! Byte plumbing: a read buffer that protocol parsing can look into and give
//! back, and a byte counter for the audit. Bulk copies between two raw
//! sockets go through [`crate::splice`] instead of user space.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::splice::{Endpoint, Mode};

/// A stream with a read buffer: bytes read while looking for the end of a
/// request head stay here, and reads (including [`AsyncRead`], so a tunnel
/// can start right after a head) return them first.
pub(crate) struct Buffered<S> {
    pub io: S,
    buf: Vec<u8>,
    start: usize,
    /// How to splice from or to `io`, when it is a raw socket (see
    /// [`Buffered::splicing`]).
    splice: Option<(Mode, Probe<S>)>,
}

/// Finds the raw socket under a stream ([`crate::splice::probe`] for its type).
type Probe<S> = for<'a> fn(&'a S) -> Option<Endpoint<'a>>;

/// Why a head could not be read.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// Longer than the limit (431).
    TooLarge,
    /// The stream ended in the middle, or failed.
    Io(#[allow(dead_code)] io::Error),
}

impl<S: AsyncRead + Unpin> Buffered<S> {
    pub fn new(io: S) -> Self {
        Buffered {
            io,
            buf: Vec::new(),
            start: 0,
            splice: None,
        }
    }

    /// Lets bulk copies from and to this stream use `splice(2)` in `mode`
    /// when `io` is a raw socket and so is the other end.
    pub fn splicing(mut self, mode: Mode) -> Self
    where
        S: 'static,
    {
        self.splice = Some((mode, crate::splice::probe::<S>));
        self
    }

    /// The raw socket under this stream and the relay mode, when bulk copies
    /// may splice it.
    fn endpoint(&self) -> Option<(Mode, Endpoint<'_>)> {
        let (mode, probe) = self.splice?;
        if mode == Mode::Copy {
            return None;
        }
        Some((mode, probe(&self.io)?))
    }

    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Reads more into the buffer; `Ok(0)` at the end of the stream.
    async fn fill(&mut self) -> io::Result<usize> {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        let old = self.buf.len();
        self.buf.resize(old + 16 * 1024, 0);
        let n = self.io.read(&mut self.buf[old..]).await;
        self.buf.truncate(old + *n.as_ref().unwrap_or(&0));
        n
    }

    /// Reads up to and including the first `\r\n\r\n`. `Ok(None)`: the stream
    /// ended cleanly before a first byte.
    pub async fn read_head(&mut self, limit: usize) -> Result<Option<Vec<u8>>, HeadError> {
        let mut searched: usize = 0;
        loop {
            let pending = self.pending();
            if let Some(i) = find(&pending[searched.saturating_sub(3)..], b"\r\n\r\n") {
                let end = searched.saturating_sub(3) + i + 4;
                let head = pending[..end].to_vec();
                self.consume(end);
                return Ok(Some(head));
            }
            searched = pending.len();
            if searched > limit {
                return Err(HeadError::TooLarge);
            }
            match self.fill().await {
                Ok(0) if self.pending().is_empty() => return Ok(None),
                Ok(0) => {
                    return Err(HeadError::Io(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the stream ended inside a head",
                    )));
                }
                Ok(_) => {}
                Err(e) => return Err(HeadError::Io(e)),
            }
        }
    }

    /// Reads one line, `\r\n` included (chunk sizes, trailers).
    pub async fn read_line(&mut self, limit: usize) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = find(self.pending(), b"\n") {
                let line = self.pending()[..=i].to_vec();
                self.consume(i + 1);
                return Ok(line);
            }
            if self.pending().len() > limit {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "line too long"));
            }
            if self.fill().await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// The next byte, left in the buffer; `None` at the end of the stream.
    pub async fn peek_byte(&mut self) -> io::Result<Option<u8>> {
        while self.pending().is_empty() {
            if self.fill().await? == 0 {
                return Ok(None);
            }
        }
        Ok(Some(self.pending()[0]))
    }

    /// Reads exactly `n` bytes (small protocol fields).
    pub async fn take(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.pending().len() < n {
            if self.fill().await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        let out = self.pending()[..n].to_vec();
        self.consume(n);
        Ok(out)
    }

    /// Copies exactly `n` bytes to `w` (spliced when both are raw sockets
    /// and the rest is large).
    pub async fn copy_n<W>(&mut self, n: u64, w: &mut Buffered<W>) -> io::Result<()>
    where
        W: AsyncRead + AsyncWrite + Unpin,
    {
        let from_buf = (self.pending().len() as u64).min(n) as usize;
        if from_buf > 0 {
            w.write_all(&self.pending()[..from_buf]).await?;
            self.consume(from_buf);
        }
        let mut rest = n - from_buf as u64;
        if rest >= crate::splice::SPLICE_MIN
            && let (Some((mode, from)), Some((_, to))) = (self.endpoint(), w.endpoint())
        {
            crate::splice::pump(&from, &to, Some(rest), mode).await?;
            return Ok(());
        }
        let mut buf = vec![0u8; COPY_BUF.min(rest as usize)];
        while rest > 0 {
            let want = (rest as usize).min(buf.len());
            let got = self.io.read(&mut buf[..want]).await?;
            if got == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            w.write_all(&buf[..got]).await?;
            rest -= got as u64;
        }
        Ok(())
    }

    /// Copies everything until the end of the stream to `w` (spliced when
    /// both are raw sockets).
    pub async fn copy_to_end<W>(&mut self, w: &mut Buffered<W>) -> io::Result<()>
    where
        W: AsyncRead + AsyncWrite + Unpin,
    {
        if !self.pending().is_empty() {
            w.write_all(self.pending()).await?;
            let n = self.pending().len();
            self.consume(n);
        }
        if let (Some((mode, from)), Some((_, to))) = (self.endpoint(), w.endpoint()) {
            crate::splice::pump(&from, &to, None, mode).await?;
            return Ok(());
        }
        let mut buf = vec![0u8; COPY_BUF];
        loop {
            let got = self.io.read(&mut buf).await?;
            if got == 0 {
                return Ok(());
            }
            w.write_all(&buf[..got]).await?;
        }
    }
}

/// Buffer of bulk copies: tokio's default (8 KiB) costs a system call per
/// 8 KiB each way.
const COPY_BUF: usize = 256 * 1024;

/// Relays both ways until both sides are done (a tunnel).
pub(crate) async fn relay<A, B>(a: &mut A, b: &mut B) -> io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    tokio::io::copy_bidirectional_with_sizes(a, b, COPY_BUF, COPY_BUF).await
}

/// Relays a tunnel both ways until both sides are done: spliced when the
/// client is a raw socket (the upstream always is), else through user space.
/// Bytes the client sent after the tunnel's head go first either way.
pub(crate) async fn tunnel<S>(
    client: &mut Buffered<S>,
    upstream: &mut Counted<TcpStream>,
) -> io::Result<(u64, u64)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if client.endpoint().is_some() {
        let early = client.pending().len();
        if early > 0 {
            upstream.write_all(client.pending()).await?;
            client.consume(early);
        }
        if let (Some((mode, c)), Some(u)) = (client.endpoint(), crate::splice::probe(&*upstream)) {
            let (up, down) = crate::splice::relay(&c, &u, mode).await?;
            return Ok((up + early as u64, down));
        }
    }
    relay(client, upstream).await
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl<S: AsyncRead + Unpin> AsyncRead for Buffered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.pending().is_empty() {
            let n = self.pending().len().min(out.remaining());
            out.put_slice(&self.pending()[..n]);
            self.consume(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, out)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Buffered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Bytes that went each way through a [`Counted`] stream.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Written to the stream (command to host).
    pub up: AtomicU64,
    /// Read from the stream (host to command).
    pub down: AtomicU64,
}

/// The upstream connection, counting bytes both ways.
pub(crate) struct Counted<S> {
    pub io: S,
    pub counters: Arc<Counters>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = out.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, out);
        let n = (out.filled().len() - before) as u64;
        self.counters.down.fetch_add(n, Ordering::Relaxed);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            self.counters.up.fetch_add(*n as u64, Ordering::Relaxed);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A writer that replaces every occurrence of a secret with `*`s of the same
/// length (so framing by length stays right) before the bytes go on. The
/// last `secret.len() - 1` bytes written are held back until more arrive or
/// the writer is flushed: an occurrence split across two writes is still
/// found, one split across a flush is not.
pub(crate) struct Masking<W> {
    pub io: W,
    secret: memchr::memmem::Finder<'static>,
    /// Bytes checked and ready to go, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    /// Bytes not yet checked (shorter than the secret).
    held: Vec<u8>,
}

impl<W: AsyncWrite + Unpin> Masking<W> {
    pub fn new(io: W, secret: &[u8]) -> Self {
        Masking {
            io,
            secret: memchr::memmem::Finder::new(secret).into_owned(),
            out: Vec::new(),
            sent: 0,
            held: Vec::new(),
        }
    }

    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n =
                std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.out.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

/// Replaces every occurrence of the secret `finder` looks for in `data`
/// with `*`s.
pub(crate) fn mask(data: &mut [u8], finder: &memchr::memmem::Finder<'_>) {
    let len = finder.needle().len();
    if len == 0 {
        return;
    }
    let mut i = 0;
    while let Some(at) = finder.find(&data[i..]) {
        let s = i + at;
        data[s..s + len].fill(b'*');
        i = s + len;
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Masking<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_drain(cx))?;
        let this = &mut *self;
        let mut data = std::mem::take(&mut this.held);
        data.extend_from_slice(buf);
        mask(&mut data, &this.secret);
        let keep = (this.secret.needle().len().saturating_sub(1)).min(data.len());
        this.held = data.split_off(data.len() - keep);
        this.out = data;
        this.sent = 0;
        // Start sending; what is left goes on the next write or flush.
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_drain(cx))?;
        if !self.held.is_empty() {
            let held = std::mem::take(&mut self.held);
            self.out = held;
            self.sent = 0;
            std::task::ready!(self.poll_drain(cx))?;
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<W: AsyncRead + Unpin> AsyncRead for Masking<W> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn masking_finds_the_secret_across_writes() {
        let mut w = Masking::new(Vec::new(), b"s3cret");
        for part in [&b"a s3"[..], b"cr", b"et b s3cret", b"s3cre"] {
            w.write_all(part).await.unwrap();
        }
        w.flush().await.unwrap();
        assert_eq!(w.io, b"a ****** b ******s3cre");
        let mut v = b"s3crets3cret".to_vec();
        mask(&mut v, &memchr::memmem::Finder::new(b"s3cret"));
        assert_eq!(v, b"************");
    }
}
