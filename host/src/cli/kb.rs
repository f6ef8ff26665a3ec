//! `capstan index` and `capstan search`: the workspace knowledge base by hand.
//! (Asking a question indexes on its own; these are for looking closer.)

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::{GlobalArgs, workspace_root};
use crate::app::App;
use crate::dispatch::run_task;
use crate::orchestrator::RETRIEVAL_KIND;
use crate::protocol::{Event, EventSink, TaskRequest};
use crate::services::approval::ApproveMode;
use crate::services::{HostServices, RunContext};

#[derive(clap::Args, Debug)]
pub struct IndexArgs {
    /// The workspace to index (default: the current directory).
    #[arg(long, short, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct SearchArgs {
    /// What to look for.
    pub query: String,
    #[arg(long, short, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,
    /// Passages to show.
    #[arg(long, short = 'n', default_value_t = 6)]
    pub limit: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Shows the plugin's progress on a bar (bytes, rate and ETA; files as its message)
/// and its warnings above it.
struct BarSink {
    bar: ProgressBar,
    warnings: Mutex<Vec<String>>,
}

impl BarSink {
    fn line(&self, text: String) {
        // A hidden bar (not a terminal, or `search`) prints nothing of its own.
        if self.bar.is_hidden() {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }
}

impl EventSink for BarSink {
    fn emit(&self, event: Event) {
        match event {
            Event::Progress {
                done, total, unit, ..
            } if unit == "bytes" => {
                self.bar.set_length(total);
                self.bar.set_position(done);
            }
            Event::Progress {
                done, total, unit, ..
            } => self.bar.set_message(format!("{done}/{total} {unit}")),
            Event::Activity { kind, message, .. } if kind == "kb.warning" => {
                self.line(format!("warning: {message}"));
                self.warnings
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(message);
            }
            // The index was busy (another process writing): say once what was searched.
            Event::Activity { kind, message, .. } if kind == "kb.stale" => self.line(message),
            _ => {}
        }
    }
}

async fn kb_task(
    global: &GlobalArgs,
    workspace: PathBuf,
    op: &str,
    input: serde_json::Value,
    sink: Arc<dyn EventSink>,
) -> Result<crate::protocol::TaskOutcome> {
    let root = workspace_root(&workspace)?;
    let app = App::open(global.dirs()?, ApproveMode::None).await?;
    app.check_workspace(&root)?;
    let registry = app.registry(Some(&root)).await;
    let services = HostServices {
        index: Some(app.indexes.clone()),
        ..Default::default()
    };
    let run = RunContext::new(Some(root), sink, services);
    let task = TaskRequest {
        id: op.into(),
        kind: RETRIEVAL_KIND.into(),
        operation: op.into(),
        input,
    };
    Ok(run_task(&app.runtime, &registry, &task, &run).await)
}

pub async fn index(global: &GlobalArgs, args: IndexArgs) -> Result<ExitCode> {
    let bar = ProgressBar::new(0);
    // Bytes drive the bar: a few big files and many small ones give an honest rate and ETA.
    let style = ProgressStyle::with_template(
        "{spinner} indexing [{bar:30}] {binary_bytes}/{binary_total_bytes} \
         {binary_bytes_per_sec}, ETA {eta} ({msg})",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    // Keeps the rate and ETA moving between the plugin's progress reports.
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let sink = Arc::new(BarSink {
        bar: bar.clone(),
        warnings: Mutex::default(),
    });
    let started = Instant::now();
    let outcome = kb_task(global, args.workspace, "index", json!({}), sink.clone()).await?;
    bar.finish_and_clear();
    match outcome {
        Ok(ok) => {
            let secs = started.elapsed().as_secs_f64();
            let mb = ok.data["bytes_parsed"].as_u64().unwrap_or(0) as f64 / 1e6;
            println!("{}", ok.summary);
            println!(
                "{} files in the index; parsed {mb:.2} MB in {secs:.2} s ({:.1} MB/s)",
                ok.data["files_indexed"],
                if secs > 0.0 { mb / secs } else { 0.0 }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(f) => {
            eprintln!("indexing failed ({}): {}", f.reason, f.message);
            Ok(ExitCode::from(1))
        }
    }
}

pub async fn search(global: &GlobalArgs, args: SearchArgs) -> Result<ExitCode> {
    let bar = ProgressBar::hidden();
    let sink = Arc::new(BarSink {
        bar,
        warnings: Mutex::default(),
    });
    let input = json!({"query": args.query, "limit": args.limit});
    let outcome = kb_task(global, args.workspace, "search", input, sink).await?;
    let data = match outcome {
        Ok(ok) => ok.data,
        Err(f) => {
            eprintln!("search failed ({}): {}", f.reason, f.message);
            return Ok(ExitCode::from(1));
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&data)?);
        return Ok(ExitCode::SUCCESS);
    }
    let passages = data["passages"].as_array().cloned().unwrap_or_default();
    if passages.is_empty() {
        println!("no passages match \"{}\"", args.query);
    }
    for (i, p) in passages.iter().enumerate() {
        let snippet = p["snippet"]
            .as_str()
            .unwrap_or("")
            .replace("<b>", "\x1b[1m")
            .replace("</b>", "\x1b[0m");
        println!(
            "[{}] {}:{}-{}  {}  (score {:.3})",
            i + 1,
            p["path"].as_str().unwrap_or(""),
            p["line_start"],
            p["line_end"],
            p["heading"].as_str().unwrap_or(""),
            p["score"].as_f64().unwrap_or(0.0)
        );
        println!("    {}", snippet.replace('\n', " "));
    }
    if data["sufficient"] == false && !passages.is_empty() {
        println!("(the best passage covers only part of the query)");
    }
    Ok(ExitCode::SUCCESS)
}
