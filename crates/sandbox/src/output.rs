//! Bounded capture of one output stream: keeps the head and the tail.
//!
//! Invariant: at most `limit` bytes are kept whatever the command prints, and the
//! pipe is read until EOF no matter how much is dropped, so the writer never
//! blocks on a full pipe (a blocked writer would turn an output flood into a
//! hang that only the timeout ends).

use std::collections::VecDeque;

use tokio::io::{AsyncRead, AsyncReadExt};

/// What was kept of one stream.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    /// Bytes seen but not kept.
    pub dropped: u64,
}

impl Captured {
    pub(crate) fn new(limit: usize) -> Self {
        let head_cap = limit / 2;
        Captured {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: limit - head_cap,
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, mut chunk: &[u8]) {
        let room = self.head_cap - self.head.len();
        if room > 0 {
            let n = room.min(chunk.len());
            self.head.extend_from_slice(&chunk[..n]);
            chunk = &chunk[n..];
        }
        if chunk.is_empty() {
            return;
        }
        if chunk.len() >= self.tail_cap {
            // The whole current tail and the front of this chunk fall out.
            let skip = chunk.len() - self.tail_cap;
            self.dropped += (self.tail.len() + skip) as u64;
            self.tail.clear();
            self.tail.extend(&chunk[skip..]);
            return;
        }
        let overflow = (self.tail.len() + chunk.len()).saturating_sub(self.tail_cap);
        if overflow > 0 {
            self.tail.drain(..overflow);
            self.dropped += overflow as u64;
        }
        self.tail.extend(chunk);
    }

    /// Lossy UTF-8 text: everything if nothing was dropped, else head, a marker
    /// line, and tail.
    pub(crate) fn render(&self) -> String {
        let (a, b) = self.tail.as_slices();
        if self.dropped == 0 {
            let mut all = Vec::with_capacity(self.head.len() + self.tail.len());
            all.extend_from_slice(&self.head);
            all.extend_from_slice(a);
            all.extend_from_slice(b);
            return String::from_utf8_lossy(&all).into_owned();
        }
        let mut tail = Vec::with_capacity(self.tail.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        format!(
            "{}\n[... {} bytes dropped ...]\n{}",
            String::from_utf8_lossy(&self.head),
            self.dropped,
            String::from_utf8_lossy(&tail)
        )
    }
}

/// Reads `stream` to EOF (or the first read error), keeping head and tail.
pub(crate) async fn capture<R: AsyncRead + Unpin>(mut stream: R, limit: usize) -> Captured {
    let mut cap = Captured::new(limit);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => cap.push(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    cap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_limit_keeps_everything() {
        let mut c = Captured::new(10);
        c.push(b"abc");
        c.push(b"defg");
        assert_eq!(c.render(), "abcdefg");
        assert_eq!(c.dropped, 0);
    }

    #[test]
    fn over_limit_keeps_head_and_tail() {
        let mut c = Captured::new(6);
        for b in b"0123456789" {
            c.push(&[*b]);
        }
        assert_eq!(c.dropped, 4);
        assert_eq!(c.render(), "012\n[... 4 bytes dropped ...]\n789");
        let mut big = Captured::new(6);
        big.push(b"0123456789");
        assert_eq!(big.render(), c.render());
        let mut mixed = Captured::new(6);
        mixed.push(b"0123");
        mixed.push(b"45678");
        mixed.push(b"9");
        assert_eq!(mixed.render(), c.render());
    }

    #[test]
    fn zero_limit_drops_all() {
        let mut c = Captured::new(0);
        c.push(b"hello");
        assert_eq!(c.dropped, 5);
    }
}
