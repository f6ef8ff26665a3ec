//! The bridge between the command's network namespace and the egress proxy.
//!
//! With [`crate::Network::Proxy`] the task's network namespace stays private:
//! only its loopback is brought up, and a forwarder process listens on
//! `127.0.0.1:PROXY_PORT` there and relays each connection to the proxy's
//! Unix socket on the host. The namespace has no route out, so the proxy is
//! the only way any byte leaves.
//!
//! Invariants:
//! * The proxy's socket is opened (`O_PATH`) by init before the command's
//!   filesystem view is built; the forwarder reaches it through that
//!   descriptor (`/proc/self/fd/N`), so the socket's host path never appears
//!   in the command's view.
//! * The forwarder is forked by init after the view is built: it sees what the
//!   command sees, holds no capability (as root it drops to the sandbox ids
//!   like the command), is not dumpable (the command cannot read its memory
//!   or descriptors through `/proc`) and dies with init.
//! * Any failure here stops the task before the command starts (fail closed).
//! * The forwarder moves bytes with `splice(2)` through a pipe per direction
//!   (socket to pipe, pipe to socket: they never enter its memory), and
//!   copies through a buffer only where the kernel refuses splice; bytes
//!   already in the pipe then go first, so none is lost or reordered.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream;

use crate::launcher::ProxyBridge;

/// The bridge's two ends, made by init before the view.
pub(crate) struct Bridge {
    /// `O_PATH` descriptor of the proxy's socket on the host.
    socket: OwnedFd,
    listener: TcpListener,
}

impl Bridge {
    /// Brings the namespace's loopback up, opens the proxy's socket and
    /// listens on the bridge port. Runs in init, in the task's fresh network
    /// namespace, before the filesystem view exists.
    pub(crate) fn prepare(config: &ProxyBridge) -> Result<Bridge, String> {
        loopback_up()?;
        let path = std::ffi::CString::new(config.socket.as_os_str().as_encoded_bytes())
            .map_err(|_| "the socket path contains a NUL byte".to_owned())?;
        // SAFETY: a valid C string; the result is checked.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!(
                "cannot open the proxy socket {}: {}",
                config.socket.display(),
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: a descriptor we just opened and own.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        let listener = TcpListener::bind(("127.0.0.1", config.port))
            .map_err(|e| format!("cannot listen on 127.0.0.1:{}: {e}", config.port))?;
        // One connection through the bridge proves the path works before
        // the command relies on it.
        UnixStream::connect(format!("/proc/self/fd/{}", socket.as_raw_fd()))
            .map_err(|e| format!("the proxy does not answer on its socket: {e}"))?;
        Ok(Bridge { socket, listener })
    }

    /// Forks the forwarder (init's child) and closes init's copies.
    pub(crate) fn start(self, drop_root: bool) -> Result<(), String> {
        // SAFETY: init is single-threaded.
        match unsafe { nix::unistd::fork() }.map_err(|e| format!("fork: {e}"))? {
            nix::unistd::ForkResult::Child => {
                let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
                // SAFETY: prctl with integer arguments.
                unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
                if (drop_root && crate::identity::drop_root().is_err()) || !drop_all_capabilities()
                {
                    // SAFETY: _exit is always safe.
                    unsafe { libc::_exit(1) }
                }
                let _ = nix::sys::prctl::set_no_new_privs();
                self.close_others();
                self.forward()
            }
            nix::unistd::ForkResult::Parent { .. } => Ok(()),
        }
    }

    /// Closes every descriptor the forwarder inherited from init but its own
    /// two (the control socket, the lifeline).
    fn close_others(&self) {
        let mut keep = [self.socket.as_raw_fd(), self.listener.as_raw_fd()];
        keep.sort_unstable();
        let mut from = 3u32;
        for fd in keep {
            let fd = fd as u32;
            if fd > from {
                // SAFETY: closes descriptors this process does not use.
                unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0u32) };
            }
            from = fd + 1;
        }
        // SAFETY: as above.
        unsafe { libc::syscall(libc::SYS_close_range, from, u32::MAX, 0u32) };
    }

    /// The forwarder's loop: one thread per direction per connection.
    fn forward(self) -> ! {
        let target = format!("/proc/self/fd/{}", self.socket.as_raw_fd());
        for conn in self.listener.incoming() {
            let Ok(tcp) = conn else { continue };
            let target = target.clone();
            let _ = std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || relay(tcp, &target));
        }
        // SAFETY: _exit is always safe.
        unsafe { libc::_exit(0) }
    }
}

fn relay(tcp: TcpStream, target: &str) {
    let Ok(unix) = UnixStream::connect(target) else {
        return; // the client sees the connection close
    };
    let _ = tcp.set_nodelay(true);
    widen_send_buffer(&unix);
    let (Ok(mut tcp_in), Ok(mut unix_in)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let (mut tcp_out, mut unix_out) = (tcp, unix);
    let up = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let _ = copy(&mut tcp_in, &mut unix_out);
            let _ = unix_out.shutdown(Shutdown::Write);
        });
    let _ = copy(&mut unix_in, &mut tcp_out);
    let _ = tcp_out.shutdown(Shutdown::Write);
    if let Ok(t) = up {
        let _ = t.join();
    }
}

/// Raises the Unix socket's send buffer toward the proxy (uploads) to 4 MiB
/// (capped by `net.core.wmem_max`): 208 KiB by default, where TCP grows its
/// window to megabytes. The proxy does the same on its end (downloads).
fn widen_send_buffer(s: &UnixStream) {
    let size: libc::c_int = 2 << 20; // the kernel doubles it
    // SAFETY: `setsockopt` on a descriptor the stream keeps open, with a
    // pointer to an int and its size; a refusal keeps the default.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Copies `from` to `to` until `from` ends: spliced through a pipe, or
/// through user space where the kernel cannot splice these sockets.
fn copy<R, W>(from: &mut R, to: &mut W) -> std::io::Result<()>
where
    R: std::io::Read + std::os::fd::AsRawFd,
    W: std::io::Write + std::os::fd::AsRawFd,
{
    match splice_all(from.as_raw_fd(), to.as_raw_fd()) {
        Spliced::Done(r) => r,
        Spliced::Unsupported { pending } => {
            to.write_all(&pending)?;
            copy_buffered(from, to)
        }
    }
}

/// How [`splice_all`] ended.
enum Spliced {
    /// `from` ended (`Ok`) or a socket failed.
    Done(std::io::Result<()>),
    /// The kernel refused to splice (`EINVAL`, `ENOSYS`, no pipe): the bytes
    /// that were in the pipe, to write before copying the rest.
    Unsupported { pending: Vec<u8> },
}

/// Pipe capacity asked for (the kernel may keep its default).
const PIPE_SIZE: libc::c_int = 1 << 20;

/// Blocking `splice(2)` from socket `from` to socket `to` through a pipe
/// until `from` ends. The pipe is filled only when empty and drained
/// completely before the next fill.
fn splice_all(from: i32, to: i32) -> Spliced {
    use std::io::Read as _;
    let mut fds: [libc::c_int; 2] = [-1, -1];
    // SAFETY: `pipe2` writes two descriptors into an array of two; checked.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Spliced::Unsupported {
            pending: Vec::new(),
        };
    }
    // SAFETY: fresh descriptors owned by nothing else; the files close them.
    let (pipe_r, pipe_w) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    // SAFETY: `fcntl` with integer arguments on a descriptor we own; a
    // refusal leaves the default size, which works too.
    let size = unsafe { libc::fcntl(pipe_w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
    // SAFETY: as above.
    let size = if size > 0 {
        size
    } else {
        unsafe { libc::fcntl(pipe_w.as_raw_fd(), libc::F_GETPIPE_SZ) }
    };
    let size = if size > 0 { size as usize } else { 64 * 1024 };
    let unsupported =
        |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS));
    loop {
        let got = match splice(from, pipe_w.as_raw_fd(), size) {
            Ok(0) => return Spliced::Done(Ok(())),
            Ok(n) => n,
            Err(e) if unsupported(&e) => {
                return Spliced::Unsupported {
                    pending: Vec::new(),
                };
            }
            Err(e) => return Spliced::Done(Err(e)),
        };
        let mut left = got;
        while left > 0 {
            match splice(pipe_r.as_raw_fd(), to, left) {
                Ok(0) => return Spliced::Done(Err(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => left -= n,
                Err(e) if unsupported(&e) => {
                    let mut pending = vec![0u8; left];
                    return match (&pipe_r).read_exact(&mut pending) {
                        Ok(()) => Spliced::Unsupported { pending },
                        Err(e) => Spliced::Done(Err(e)),
                    };
                }
                Err(e) => return Spliced::Done(Err(e)),
            }
        }
    }
}

/// One blocking `splice(2)` of up to `len` bytes, retried on `EINTR`.
fn splice(from: i32, to: i32, len: usize) -> std::io::Result<usize> {
    loop {
        // SAFETY: two descriptors their owners keep open for the call and
        // null offsets (pipes and sockets have none); the kernel moves data
        // between them and touches no memory of ours.
        let n = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `std::io::copy` with a buffer large enough for bulk transfers.
fn copy_buffered(
    from: &mut impl std::io::Read,
    to: &mut impl std::io::Write,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
    }
}

/// Clears the effective, permitted and inheritable capability sets (init in
/// a user namespace holds them all there, whatever its uid).
fn drop_all_capabilities() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset with a valid header and two data structs (version 3).
    unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) == 0 }
}

/// `ifreq` with the flags member, as `SIOCGIFFLAGS`/`SIOCSIFFLAGS` use it.
#[repr(C)]
struct IfreqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Brings up `lo` in the current network namespace (needs `CAP_NET_ADMIN`
/// there: init has it, in its own user namespace or as root).
fn loopback_up() -> Result<(), String> {
    // SAFETY: plain socket and ioctl calls on a struct of the layout the
    // kernel expects; every result is checked.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        let fd = OwnedFd::from_raw_fd(fd);
        let mut req = IfreqFlags {
            name: [0; libc::IFNAMSIZ],
            flags: 0,
            _pad: [0; 22],
        };
        req.name[..2].copy_from_slice(b"lo");
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(format!(
                "reading the loopback's flags: {}",
                std::io::Error::last_os_error()
            ));
        }
        req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(format!(
                "bringing the loopback up: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::net::UnixStream;

    use super::copy;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(29) ^ (i >> 11) as u8)
            .collect()
    }

    /// A TCP connection whose far end sends `data` then closes: the near end.
    fn sender(data: Vec<u8>) -> (TcpStream, std::thread::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut far = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (near, _) = l.accept().expect("accept");
        let t = std::thread::spawn(move || far.write_all(&data).expect("send"));
        (near, t)
    }

    #[test]
    fn the_forwarder_relays_tcp_to_unix_byte_exact() {
        let data = pattern(16 << 20);
        let (mut from, t) = sender(data.clone());
        let (mut to, mut other) = UnixStream::pair().expect("pair");
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            other.read_to_end(&mut got).expect("read");
            got
        });
        copy(&mut from, &mut to).expect("copy");
        drop(to);
        t.join().expect("sender");
        assert!(
            reader.join().expect("reader") == data,
            "other bytes arrived"
        );
    }

    #[test]
    fn where_the_kernel_refuses_splice_the_forwarder_copies_and_loses_nothing() {
        // splice(2) into a file opened for appending is EINVAL: the first
        // read is already in the pipe when the kernel refuses.
        let data = pattern(4 << 20);
        let (mut from, t) = sender(data.clone());
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out");
        let mut to = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open");
        copy(&mut from, &mut to).expect("copy");
        t.join().expect("sender");
        assert!(
            std::fs::read(&path).expect("read") == data,
            "other bytes arrived"
        );
    }
}
