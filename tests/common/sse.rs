//! Reading a server-sent event stream (a run's events, AG-UI) in tests.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

/// Reads SSE `data:` payloads (JSON) from a streaming response.
pub struct SseReader {
    body: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buf: String,
    /// Every event must carry an SSE `id` equal to its `seq` (what
    /// `Last-Event-ID` resumes from).
    ids_are_seqs: bool,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> Self {
        Self {
            body: resp.bytes_stream().map(|r| r.map(|b| b.to_vec())).boxed(),
            buf: String::new(),
            ids_are_seqs: false,
        }
    }

    /// As [`Self::new`], checking that each event's SSE id is its `seq`.
    pub fn with_seq_ids(resp: reqwest::Response) -> Self {
        Self {
            ids_are_seqs: true,
            ..Self::new(resp)
        }
    }

    /// The next event's data as JSON; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let data: Vec<&str> = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|l| l.strip_prefix(' ').unwrap_or(l))
                    .collect();
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                let event: Value = serde_json::from_str(&data.join("\n")).unwrap();
                if self.ids_are_seqs {
                    let id = block
                        .lines()
                        .find_map(|l| l.strip_prefix("id:"))
                        .map(|v| v.trim().parse::<u64>().unwrap());
                    assert_eq!(id, event["seq"].as_u64(), "SSE id is the seq: {block}");
                }
                return Some(event);
            }
            let chunk = tokio::time::timeout(Duration::from_secs(120), self.body.next())
                .await
                .expect("no event for 120 s")?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    }

    /// As [`Self::next`], but a broken connection (its server was killed)
    /// ends the stream instead of failing.
    pub async fn next_lenient(&mut self) -> Option<Value> {
        loop {
            if self.buf.contains("\n\n") {
                return self.next().await;
            }
            let chunk = self.body.next().await?.ok()?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Events until (and including) the first of type `t`.
    pub async fn until(&mut self, t: &str, seen: &mut Vec<Value>) -> Value {
        while let Some(e) = self.next().await {
            seen.push(e.clone());
            if e["type"] == t {
                return e;
            }
        }
        panic!("stream ended before {t}: {:?}", types(seen));
    }

    /// Every event left, until the stream ends.
    pub async fn rest(&mut self, seen: &mut Vec<Value>) {
        while let Some(e) = self.next().await {
            seen.push(e);
        }
    }
}

/// The `type` of each event.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect()
}
