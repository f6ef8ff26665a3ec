//! Host loop benchmark with zero-latency models: host overhead per run, per-token
//! overhead of the streaming path, and cancel-to-`run.cancelled` latency with a
//! running child process.
//!
//! Run: cargo bench -p capstan --bench host_loop
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A bench prints its own figures for the developer who runs it.
#![allow(clippy::disallowed_macros)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan::plugins::services::approval::ApproveMode;
use capstan::run::app::{App, AskRequest, Frontend};
use capstan_models::scripted::{Reply, ScriptedServer};
use capstan_protocol::{Envelope, Event};
use tokio_util::sync::CancellationToken;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

async fn app(config: &str, approve: ApproveMode) -> (tempfile::TempDir, App) {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("config")).unwrap();
    std::fs::write(home.path().join("config/capstan.toml"), config).unwrap();
    let app = App::open(capstan::dirs::Dirs::under(home.path()), approve)
        .await
        .unwrap();
    (home, app)
}

fn main() {
    capstan_sandbox::set_launcher(env!("CARGO_BIN_EXE_capstan"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // 1. Host overhead per run: the offline model answers at once, so the
        // time is the host's (session, SQLite turns and events, orchestration).
        let (_h, a) = app("", ApproveMode::None).await;
        let quiet: Frontend = Arc::new(|_: &Arc<Envelope>| {});
        let mut session = None;
        let n = 300;
        let mut samples = Vec::new();
        let started = Instant::now();
        for i in 0..n {
            let t = Instant::now();
            let out = a
                .ask(AskRequest { message: format!("hello {i}"), session_id: session.clone(), workspace: None, quota: None }, quiet.clone(), CancellationToken::new())
                .await
                .unwrap();
            samples.push(t.elapsed());
            session = Some(out.session_id);
        }
        let total = started.elapsed();
        samples.sort();
        println!("## Host overhead per run (offline model, no workspace, {n} runs in one session)\n");
        println!("| runs/s | p50 | p99 |\n|---|---|---|");
        println!("| {:.0} | {} | {} |", n as f64 / total.as_secs_f64(), ms(pct(&samples, 0.5)), ms(pct(&samples, 0.99)));

        // 2. Streaming: a scripted model sends 5,000 tokens with no delay; the
        // host's per-token cost is the run's streaming time divided by tokens.
        let server = ScriptedServer::start().await.unwrap();
        let tokens = 5000;
        let config = format!("[model]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"bench\"\n", server.openai_base_url());
        let (_h2, b) = app(&config, ApproveMode::None).await;
        let mut per_token = Vec::new();
        for _ in 0..5 {
            server.push(Reply::text([r#"{"action":"answer","reason":"bench"}"#]).with_usage(10, 10));
            server.push(Reply::text((0..tokens).map(|i| format!("t{i} "))).with_usage(10, tokens as u64));
            let first = Arc::new(Mutex::new(None::<Instant>));
            let last = Arc::new(Mutex::new(None::<Instant>));
            let (f, l) = (first.clone(), last.clone());
            let fe: Frontend = Arc::new(move |e: &Arc<Envelope>| {
                if let Event::ResponseDelta { .. } = e.event {
                    let now = Instant::now();
                    f.lock().unwrap().get_or_insert(now);
                    *l.lock().unwrap() = Some(now);
                }
            });
            b.ask(AskRequest { message: "stream".into(), ..Default::default() }, fe, CancellationToken::new()).await.unwrap();
            let span = last.lock().unwrap().unwrap() - first.lock().unwrap().unwrap();
            per_token.push(span / tokens);
        }
        per_token.sort();
        println!("\n## Streaming: model token to `response.delta` at the frontend ({tokens} tokens x 5 runs)\n");
        println!("| per-token host cost p50 | max |\n|---|---|");
        println!("| {:.1} µs | {:.1} µs |", pct(&per_token, 0.5).as_secs_f64() * 1e6, per_token.last().unwrap().as_secs_f64() * 1e6);

        // 3. Cancel latency with a running child process in the sandbox.
        let ws = tempfile::tempdir().unwrap();
        let (_h3, c) = app("", ApproveMode::All).await;
        let mut lat = Vec::new();
        for _ in 0..10 {
            let cancel = CancellationToken::new();
            let cancelled_at = Arc::new(Mutex::new(None::<Instant>));
            let ended_at = Arc::new(Mutex::new(None::<Instant>));
            let (ca, ea) = (cancelled_at.clone(), ended_at.clone());
            let trigger = cancel.clone();
            let fe: Frontend = Arc::new(move |e: &Arc<Envelope>| match &e.event {
                Event::Activity { kind, .. } if kind == "plan" => {
                    let (t, ca) = (trigger.clone(), ca.clone());
                    tokio::spawn(async move {
                        // Let the command start, then cancel.
                        tokio::time::sleep(Duration::from_millis(400)).await;
                        *ca.lock().unwrap() = Some(Instant::now());
                        t.cancel();
                    });
                }
                Event::RunCancelled { .. } => *ea.lock().unwrap() = Some(Instant::now()),
                _ => {}
            });
            let req = AskRequest { message: "run `sleep 30`".into(), workspace: Some(ws.path().canonicalize().unwrap()), ..Default::default() };
            let out = c.ask(req, fe, cancel).await.unwrap();
            let (Some(a), Some(b)) = (*cancelled_at.lock().unwrap(), *ended_at.lock().unwrap()) else {
                panic!("the run was not cancelled: {:?}", out.outcome);
            };
            lat.push(b - a);
        }
        lat.sort();
        println!("\n## Cancel to `run.cancelled`, `sleep 30` running in the sandbox (10 runs)\n");
        println!("| p50 | max |\n|---|---|");
        println!("| {} | {} |", ms(pct(&lat, 0.5)), ms(*lat.last().unwrap()));
        println!("\nReproduce: cargo bench -p capstan --bench host_loop");
    });
}
