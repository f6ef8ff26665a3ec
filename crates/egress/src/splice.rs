//! Relaying between two raw sockets with `splice(2)` (Linux).
//!
//! Why: a blind `CONNECT`/SOCKS5 tunnel and a plain-HTTP body framed by
//! length never need to look at their bytes, yet copying them through user
//! space costs two copies per byte (kernel to proxy, proxy to kernel) on the
//! same cores the server and the command use. Spliced through a pipe, the
//! bytes go from one socket to the other inside the kernel: a TCP socket's
//! pages are moved into the pipe by reference and the write side takes them
//! from there, so the proxy's user-space copies and their system calls go
//! away (see docs/BENCHMARKS.md for what that is worth).
//!
//! Invariants:
//! * Only raw kernel sockets are spliced: tokio's [`TcpStream`] and
//!   [`UnixStream`], and the upstream's [`Counted`] TCP stream ([`probe`]
//!   recognizes exactly these). TLS, the brokered path's masking and any other
//!   stream that must see or change the bytes use the generic copy.
//! * Order is kept: bytes already read into user space (a `Buffered` read
//!   buffer: an early TLS hello after a `CONNECT` head, the start of a body)
//!   are written by the caller before the first splice.
//! * The audit's byte counts stay exact: a byte counts as read from the
//!   upstream when it is spliced out of its socket and as written when it is
//!   spliced into it, the points [`Counted`] counts at.
//! * The pipe never holds more than one read: it is filled only when empty
//!   and drained completely before the next fill.
//! * Readiness: tokio's sockets are non-blocking and every splice runs inside
//!   `try_io`, so `EAGAIN` clears tokio's readiness and the task sleeps until
//!   the socket is ready again. The pipe (`O_NONBLOCK`, `SPLICE_F_NONBLOCK`) is
//!   never waited on: by the invariant above it always has room when filled
//!   and data when drained.
//! * Fallback: when the kernel refuses splice for a socket (`EINVAL`,
//!   `ENOSYS`, no pipe could be made), that direction copies through user
//!   space; bytes already in the pipe are read out and written first, so
//!   none is lost or reordered.
//! * Half-close: when one side ends, the other side's write half is shut
//!   down and the other direction runs on until its own end.

use std::any::Any;
use std::fs::File;
use std::io::{self, Read as _};
use std::os::fd::{AsRawFd, FromRawFd as _, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

use crate::stream::Counted;

/// How the proxy relays between two raw sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `splice(2)` through a pipe (the default).
    Splice,
    /// Through user space, as for any other stream (benches compare).
    #[cfg_attr(not(any(test, feature = "bench-copy")), allow(dead_code))]
    Copy,
    /// Tests: every socket-to-pipe splice fails with `EINVAL`.
    #[cfg(test)]
    FailFill,
    /// Tests: every pipe-to-socket splice fails with `EINVAL` (the pipe holds
    /// data when the fallback starts).
    #[cfg(test)]
    FailDrain,
}

/// Pipe capacity asked for: fewer, larger splices. The kernel may refuse it
/// (`/proc/sys/fs/pipe-max-size`, the per-user pipe budget); the pipe then
/// keeps its default size.
const PIPE_SIZE: usize = 1 << 20;

/// Bodies shorter than this are copied: a pipe costs three system calls.
pub(crate) const SPLICE_MIN: u64 = 64 * 1024;

/// Buffer of the user-space fallback.
const COPY_BUF: usize = 256 * 1024;

/// A raw socket tokio drives.
#[derive(Clone, Copy)]
enum Sock<'a> {
    Tcp(&'a TcpStream),
    Unix(&'a UnixStream),
}

/// One end of a splice: the socket and the counters that count its bytes.
pub(crate) struct Endpoint<'a> {
    sock: Sock<'a>,
    /// Added to for every byte read from this socket.
    read: Option<&'a AtomicU64>,
    /// Added to for every byte written to this socket.
    written: Option<&'a AtomicU64>,
}

/// The socket under `s`, when `s` is one this module can splice.
pub(crate) fn probe<S: 'static>(s: &S) -> Option<Endpoint<'_>> {
    let any = s as &dyn Any;
    let plain = |sock| Endpoint {
        sock,
        read: None,
        written: None,
    };
    if let Some(t) = any.downcast_ref::<TcpStream>() {
        return Some(plain(Sock::Tcp(t)));
    }
    if let Some(u) = any.downcast_ref::<UnixStream>() {
        return Some(plain(Sock::Unix(u)));
    }
    if let Some(c) = any.downcast_ref::<Counted<TcpStream>>() {
        return Some(Endpoint {
            sock: Sock::Tcp(&c.io),
            read: Some(&c.counters.down),
            written: Some(&c.counters.up),
        });
    }
    None
}

impl Endpoint<'_> {
    fn fd(&self) -> RawFd {
        match self.sock {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Runs `f` when the socket is ready for `interest`, until it does not
    /// answer `WouldBlock`.
    async fn io<R>(
        &self,
        interest: Interest,
        mut f: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        loop {
            match (self.sock, interest.is_readable()) {
                (Sock::Tcp(s), true) => s.readable().await?,
                (Sock::Tcp(s), false) => s.writable().await?,
                (Sock::Unix(s), true) => s.readable().await?,
                (Sock::Unix(s), false) => s.writable().await?,
            }
            let r = match self.sock {
                Sock::Tcp(s) => s.try_io(interest, &mut f),
                Sock::Unix(s) => s.try_io(interest, &mut f),
            };
            match r {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                r => return r,
            }
        }
    }

    fn count_read(&self, n: usize) {
        if let Some(c) = self.read {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    fn count_written(&self, n: usize) {
        if let Some(c) = self.written {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self
            .io(Interest::READABLE, || match self.sock {
                Sock::Tcp(s) => s.try_read(buf),
                Sock::Unix(s) => s.try_read(buf),
            })
            .await?;
        self.count_read(n);
        Ok(n)
    }

    async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self
                .io(Interest::WRITABLE, || match self.sock {
                    Sock::Tcp(s) => s.try_write(buf),
                    Sock::Unix(s) => s.try_write(buf),
                })
                .await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            self.count_written(n);
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Shuts the write half down (the peer reads its end). Errors are
    /// ignored: the peer may be gone already, which the other direction
    /// reports.
    fn shutdown_write(&self) {
        // SAFETY: `shutdown` on a descriptor the borrowed socket keeps open
        // for the call; it changes the connection's state, not the
        // descriptor's ownership, and touches no memory of ours.
        unsafe { libc::shutdown(self.fd(), libc::SHUT_WR) };
    }
}

/// A pipe the bytes go through, both ends non-blocking and close-on-exec.
struct Pipe {
    r: File,
    w: File,
    /// Its capacity.
    size: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds: [libc::c_int; 2] = [-1, -1];
        // SAFETY: `pipe2` writes two descriptors into the array it is given,
        // which has room for exactly two; the result is checked.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nothing
        // else: the files own (and close) them from here on.
        let (r, w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        // SAFETY: `fcntl` with integer arguments on a descriptor we own.
        let set =
            unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE as libc::c_int) };
        let size = if set > 0 {
            set
        } else {
            // SAFETY: as above.
            unsafe { libc::fcntl(w.as_raw_fd(), libc::F_GETPIPE_SZ) }
        };
        if size <= 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Pipe {
            r,
            w,
            size: size as usize,
        })
    }
}

/// Send buffer asked for on a client's Unix socket (the kernel doubles it,
/// so 4 MiB: TCP's usual `tcp_wmem` maximum).
const UNIX_SNDBUF: libc::c_int = 2 << 20;

/// Raises a Unix socket's send buffer (capped by `net.core.wmem_max`): a Unix
/// stream holds at most `SO_SNDBUF` bytes in flight (208 KiB by default),
/// where TCP on loopback grows its window to megabytes, so the command would
/// be woken for every 208 KiB of a download. Measured: this, more than the
/// copies, was what the tunnel lost (docs/BENCHMARKS.md). A cap, not an
/// allocation: only bytes the command has not read yet use it.
pub(crate) fn widen_send_buffer(s: &UnixStream) {
    // SAFETY: `setsockopt` on a descriptor the stream keeps open, with a
    // pointer to an int and its size; a refusal keeps the default.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&UNIX_SNDBUF as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// `splice(from, to, len)` without offsets (sockets and pipes have none).
/// `fault` (tests) fails as a kernel without splice for this socket would.
fn splice(from: RawFd, to: RawFd, len: usize, fault: bool) -> io::Result<usize> {
    if fault {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: two descriptors kept open by their owners for the call, null
    // offsets (allowed for pipes and sockets); the kernel moves data between
    // them and reads or writes no memory of ours.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// The kernel cannot splice this pair: copy instead.
fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS))
}

/// Moves bytes from `from` to `to`: until `from` ends (`limit: None`), or
/// exactly `limit` bytes (ending early is `UnexpectedEof`). Returns how many
/// bytes were moved.
pub(crate) async fn pump(
    from: &Endpoint<'_>,
    to: &Endpoint<'_>,
    limit: Option<u64>,
    mode: Mode,
) -> io::Result<u64> {
    let mut pipe = match mode {
        Mode::Copy => None,
        _ => Pipe::new().ok(),
    };
    #[cfg(test)]
    let (fail_fill, fail_drain) = (mode == Mode::FailFill, mode == Mode::FailDrain);
    #[cfg(not(test))]
    let (fail_fill, fail_drain) = (false, false);
    let mut buf = Vec::new();
    let mut moved = 0u64;
    loop {
        let want = limit.map_or(u64::MAX, |l| l - moved);
        if want == 0 {
            return Ok(moved);
        }
        let got = if let Some(p) = &pipe {
            let len = want.min(p.size as u64) as usize;
            let (src, dst) = (from.fd(), p.w.as_raw_fd());
            match from
                .io(Interest::READABLE, || splice(src, dst, len, fail_fill))
                .await
            {
                Err(e) if unsupported(&e) => {
                    pipe = None; // nothing is in it
                    continue;
                }
                r => {
                    let n = r?;
                    from.count_read(n);
                    n
                }
            }
        } else {
            buf.resize(COPY_BUF.min(want.try_into().unwrap_or(usize::MAX)), 0);
            from.read(&mut buf).await?
        };
        if got == 0 {
            return match limit {
                Some(_) => Err(io::ErrorKind::UnexpectedEof.into()),
                None => Ok(moved),
            };
        }
        if let Some(p) = &pipe {
            let mut left = got;
            let (src, dst) = (p.r.as_raw_fd(), to.fd());
            while left > 0 {
                match to
                    .io(Interest::WRITABLE, || splice(src, dst, left, fail_drain))
                    .await
                {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        to.count_written(n);
                        #[cfg(test)]
                        tests::SPLICED.with(|c| c.set(c.get() + n as u64));
                        left -= n;
                    }
                    Err(e) if unsupported(&e) => {
                        // What is in the pipe goes first, through user space.
                        let mut rest = vec![0u8; left];
                        (&p.r).read_exact(&mut rest)?;
                        to.write_all(&rest).await?;
                        pipe = None;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        } else {
            to.write_all(&buf[..got]).await?;
        }
        moved += got as u64;
    }
}

/// Relays both ways between `a` and `b` until both directions have ended;
/// returns the bytes moved from `a` to `b` and from `b` to `a`.
pub(crate) async fn relay(
    a: &Endpoint<'_>,
    b: &Endpoint<'_>,
    mode: Mode,
) -> io::Result<(u64, u64)> {
    let ab = async {
        let n = pump(a, b, None, mode).await?;
        b.shutdown_write();
        Ok::<_, io::Error>(n)
    };
    let ba = async {
        let n = pump(b, a, None, mode).await?;
        a.shutdown_write();
        Ok::<_, io::Error>(n)
    };
    tokio::try_join!(ab, ba)
}

#[cfg(test)]
mod tests {
    //! Through the real proxy on 127.0.0.1 and a Unix socket, in a
    //! current-thread runtime (so [`SPLICED`], per thread, counts the bytes
    //! this test's relay spliced and no other test's).

    use std::cell::Cell;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio_util::sync::CancellationToken;

    use super::Mode;
    use crate::{ConnectionRecord, Policy, Proxy, StaticResolver, bind_unix};

    thread_local! {
        /// Bytes written out of a pipe into a socket on this thread.
        pub(super) static SPLICED: Cell<u64> = const { Cell::new(0) };
    }

    const MB: usize = 1 << 20;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 13) as u8)
            .collect()
    }

    type Records = Arc<Mutex<Vec<ConnectionRecord>>>;

    /// A proxy in `mode` allowing `tunnel.test` (127.0.0.1) on `port`, served
    /// on a Unix socket (as the sandbox bridge reaches it) or on TCP.
    async fn proxy(
        mode: Mode,
        port: u16,
        unix: bool,
        dir: &std::path::Path,
    ) -> (Records, CancellationToken, Client) {
        // The address too: loopback is refused unless a rule names it.
        let allow = [format!("tunnel.test:{port}"), format!("127.0.0.1:{port}")];
        let policy = Policy::new(&allow, &[], &[], false).expect("policy");
        let records: Records = Arc::default();
        let r = records.clone();
        let proxy = Proxy::builder(policy)
            .resolver(
                StaticResolver::new().with("tunnel.test", &["127.0.0.1".parse().expect("ip")]),
            )
            .audit(move |rec| r.lock().expect("lock").push(rec))
            .relay_mode(mode)
            .build();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let client = if unix {
            let path = dir.join("egress.sock");
            let l = bind_unix(&path).expect("bind");
            tokio::spawn(async move { proxy.serve_unix(l, c).await });
            Client::Unix(path)
        } else {
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = l.local_addr().expect("addr");
            tokio::spawn(async move { proxy.serve_tcp(l, c).await });
            Client::Tcp(addr)
        };
        (records, cancel, client)
    }

    enum Client {
        Unix(std::path::PathBuf),
        Tcp(std::net::SocketAddr),
    }

    trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
    impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

    impl Client {
        async fn connect(&self) -> Box<dyn Io> {
            match self {
                Client::Unix(p) => {
                    Box::new(tokio::net::UnixStream::connect(p).await.expect("unix"))
                }
                Client::Tcp(a) => Box::new(tokio::net::TcpStream::connect(a).await.expect("tcp")),
            }
        }
    }

    /// Reads a head up to its blank line, byte by byte.
    async fn head(s: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
        let mut h = Vec::new();
        while !h.ends_with(b"\r\n\r\n") {
            h.push(s.read_u8().await.expect("head"));
        }
        h
    }

    /// The upstream server of a tunnel: sends `down` while it reads what the
    /// command sends up to its half-close, then sends `tail` (which the
    /// command gets after it shut its write half) and closes. Returns what it
    /// received.
    async fn tunnel_server(l: TcpListener, down: Arc<Vec<u8>>, tail: &'static [u8]) -> Vec<u8> {
        let (s, _) = l.accept().await.expect("accept");
        let (mut r, mut w) = s.into_split();
        let sender = tokio::spawn(async move {
            w.write_all(&down).await.expect("send");
            w
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.expect("receive");
        let mut w = sender.await.expect("sender");
        w.write_all(tail).await.expect("tail");
        w.shutdown().await.expect("shutdown");
        got
    }

    /// A CONNECT tunnel carrying `size` bytes each way at once, early bytes
    /// after the head, and a half-close: byte-exact both ways, and the record
    /// counts exactly what the server received and sent.
    async fn tunnel_case(mode: Mode, unix: bool, size: usize) -> u64 {
        SPLICED.with(|c| c.set(0));
        let dir = tempfile::tempdir().expect("tempdir");
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = l.local_addr().expect("addr").port();
        let (records, cancel, client) = proxy(mode, port, unix, dir.path()).await;
        let down = Arc::new(pattern(size, 7));
        let tail: &'static [u8] = b"after your half-close";
        let server = tokio::spawn(tunnel_server(l, down.clone(), tail));

        let mut s = client.connect().await;
        let early = b"early bytes sent with the head";
        let mut first = format!("CONNECT tunnel.test:{port} HTTP/1.1\r\n\r\n").into_bytes();
        first.extend_from_slice(early);
        s.write_all(&first).await.expect("connect");
        let h = head(&mut s).await;
        assert!(
            h.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&h)
        );
        let up = pattern(size, 3);
        let (mut r, mut w) = tokio::io::split(s);
        let up2 = up.clone();
        let writer = async move {
            w.write_all(&up2).await.expect("send up");
            w.shutdown().await.expect("half-close");
        };
        let reader = async move {
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.expect("receive down");
            got
        };
        let ((), got) = tokio::join!(writer, reader);
        let received = server.await.expect("server");

        let mut want_up = early.to_vec();
        want_up.extend_from_slice(&up);
        assert!(received == want_up, "the server got other bytes than sent");
        let mut want_down = down.to_vec();
        want_down.extend_from_slice(tail);
        assert!(
            got == want_down,
            "the command got other bytes than the server sent"
        );

        // The record is sent when the tunnel ends.
        let rec = loop {
            if let Some(r) = records.lock().expect("lock").pop() {
                break r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        cancel.cancel();
        assert_eq!(rec.reason, None, "{rec:?}");
        assert_eq!(rec.bytes_up, want_up.len() as u64);
        assert_eq!(rec.bytes_down, want_down.len() as u64);
        SPLICED.with(|c| c.get())
    }

    #[tokio::test]
    async fn a_tunnel_over_unix_is_spliced_byte_exact_with_exact_counts() {
        let spliced = tunnel_case(Mode::Splice, true, 24 * MB).await;
        assert!(spliced >= 48 * MB as u64, "spliced {spliced}");
    }

    #[tokio::test]
    async fn a_tunnel_over_tcp_is_spliced_byte_exact_with_exact_counts() {
        let spliced = tunnel_case(Mode::Splice, false, 24 * MB).await;
        assert!(spliced >= 48 * MB as u64, "spliced {spliced}");
    }

    #[tokio::test]
    async fn the_copy_relay_is_byte_exact_too() {
        assert_eq!(tunnel_case(Mode::Copy, true, 8 * MB).await, 0);
    }

    #[tokio::test]
    async fn when_the_kernel_refuses_splice_the_tunnel_copies() {
        // Refused on the first splice: nothing is in the pipe yet.
        assert_eq!(tunnel_case(Mode::FailFill, true, 8 * MB).await, 0);
        // Refused after a read went into the pipe: it is read out first.
        assert_eq!(tunnel_case(Mode::FailDrain, false, 8 * MB).await, 0);
    }

    /// A plain-HTTP server: reads one request with a body of `Content-Length`,
    /// answers with `body`. Returns the bytes received and sent.
    async fn http_server(l: TcpListener, body: Arc<Vec<u8>>) -> (Vec<u8>, usize) {
        let (mut s, _) = l.accept().await.expect("accept");
        let mut got = head(&mut s).await;
        let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
        let len: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().expect("length"));
        let mut req_body = vec![0u8; len];
        s.read_exact(&mut req_body).await.expect("body");
        got.extend_from_slice(&req_body);
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(resp.as_bytes()).await.expect("head");
        s.write_all(&body).await.expect("body");
        s.shutdown().await.expect("shutdown");
        (got, resp.len() + body.len())
    }

    #[tokio::test]
    async fn plain_http_bodies_are_spliced_both_ways() {
        SPLICED.with(|c| c.set(0));
        let dir = tempfile::tempdir().expect("tempdir");
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = l.local_addr().expect("addr").port();
        let (records, cancel, client) = proxy(Mode::Splice, port, true, dir.path()).await;
        let down = Arc::new(pattern(6 * MB, 11));
        let server = tokio::spawn(http_server(l, down.clone()));

        let up = pattern(5 * MB, 5);
        let mut s = client.connect().await;
        let req = format!(
            "POST http://tunnel.test:{port}/upload HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            up.len()
        );
        let (mut r, mut w) = tokio::io::split(&mut s);
        let writer = async {
            w.write_all(req.as_bytes()).await.expect("head");
            w.write_all(&up).await.expect("body");
        };
        let reader = async {
            let h = head(&mut r).await;
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.expect("response");
            (h, got)
        };
        let ((), (h, got)) = tokio::join!(writer, reader);
        let (received, sent) = server.await.expect("server");
        assert!(h.starts_with(b"HTTP/1.1 200"));
        assert!(got == *down, "the response body differs");
        assert!(received.ends_with(&up), "the request body differs");

        let rec = loop {
            if let Some(r) = records.lock().expect("lock").pop() {
                break r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        cancel.cancel();
        assert_eq!(rec.bytes_up, received.len() as u64);
        assert_eq!(rec.bytes_down, sent as u64);
        let spliced = SPLICED.with(|c| c.get());
        assert!(spliced >= 10 * MB as u64, "spliced {spliced}");
    }
}
