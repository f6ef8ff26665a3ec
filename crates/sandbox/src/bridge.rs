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

/// `std::io::copy` with a buffer large enough for bulk transfers.
fn copy(from: &mut impl std::io::Read, to: &mut impl std::io::Write) -> std::io::Result<()> {
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
