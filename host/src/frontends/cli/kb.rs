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
use crate::plugins::services::approval::ApproveMode;
use crate::run::app::App;
use crate::run::builder::Offer;
use crate::run::dispatch::run_task;
use crate::run::orchestrator::RETRIEVAL_KIND;
use crate::{errln, outln};
use capstan_protocol::{Event, EventSink, TaskRequest};

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
                self.bar.suspend(|| crate::term::warn(&message));
                self.warnings
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(message);
            }
            Event::Activity { kind, message, .. } if kind.starts_with("capabilities.") => {
                self.bar.suspend(|| crate::errln!("{message}"))
            }
            // The index was busy (another process writing): say once what was searched.
            Event::Activity { kind, message, .. } if kind == "kb.stale" => {
                self.bar.suspend(|| crate::errln!("{message}"))
            }
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
) -> Result<capstan_protocol::TaskOutcome> {
    let root = workspace_root(global, &workspace)?;
    let app = App::open(global.dirs()?, ApproveMode::None).await?;
    app.check_workspace(&root)?;
    let registry = app.registry(Some(&root)).await;
    let run = app
        .run_builder(Some(root))
        .offer(Offer::IndexOnly)
        .build(sink);
    let input = match op {
        "search" => crate::plugins::services::index::search_input(&run, input).await,
        _ => input,
    };
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
            outln!("{}", ok.summary);
            outln!(
                "{} files in the index; parsed {mb:.2} MB in {secs:.2} s ({:.1} MB/s)",
                ok.data["files_indexed"],
                if secs > 0.0 { mb / secs } else { 0.0 }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(f) => {
            errln!("indexing failed ({}): {}", f.reason, f.message);
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
    // Nothing to refresh: the host answers from its index, as the plugin would.
    let root = workspace_root(global, &args.workspace)?;
    let direct =
        super::kb_direct::search_if_current(&global.dirs()?, &root, &args.query, args.limit);
    let data = match direct {
        Some(data) => data,
        None => {
            let input = json!({"query": args.query, "limit": args.limit});
            match kb_task(global, args.workspace, "search", input, sink).await? {
                Ok(ok) => ok.data,
                Err(f) => {
                    errln!("search failed ({}): {}", f.reason, f.message);
                    return Ok(ExitCode::from(1));
                }
            }
        }
    };
    if args.json {
        outln!("{}", crate::term::json_pretty(&data));
        return Ok(ExitCode::SUCCESS);
    }
    let passages = data["passages"].as_array().cloned().unwrap_or_default();
    if passages.is_empty() {
        outln!("no passages match \"{}\"", args.query);
    }
    for (i, p) in passages.iter().enumerate() {
        let snippet = snippet_text(p["snippet"].as_str().unwrap_or(""));
        outln!(
            "[{}] {}:{}-{}  {}  (score {:.3})",
            i + 1,
            p["path"].as_str().unwrap_or(""),
            p["line_start"],
            p["line_end"],
            p["heading"].as_str().unwrap_or(""),
            p["score"].as_f64().unwrap_or(0.0)
        );
        outln!("    {}", snippet.replace('\n', " "));
    }
    if data["sufficient"] == false && !passages.is_empty() {
        outln!("(the best passage covers only part of the query)");
    }
    Ok(ExitCode::SUCCESS)
}

/// A search snippet as plain text: the index writes HTML (matches in
/// `<b>…</b>`, the document's own text entity-escaped), which a terminal would
/// show as `<b>` and `&quot;`. Every `<` of the document is escaped, so each
/// tag is the index's own and can go.
fn snippet_text(html: &str) -> String {
    let mut text = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(start) = rest.find(['<', '&']) {
        text.push_str(&rest[..start]);
        rest = &rest[start..];
        if rest.starts_with('<') {
            match rest.find('>') {
                Some(end) => rest = &rest[end + 1..],
                None => {
                    text.push_str(rest);
                    rest = "";
                }
            }
            continue;
        }
        match decode_entity(rest) {
            Some((c, len)) => {
                text.push(c);
                rest = &rest[len..];
            }
            None => {
                text.push('&');
                rest = &rest[1..];
            }
        }
    }
    text.push_str(rest);
    text
}

/// The character an HTML entity at the start of `s` stands for, and the
/// entity's length: the named ones an HTML escaper writes, and numeric ones.
fn decode_entity(s: &str) -> Option<(char, usize)> {
    let end = s.get(..12).unwrap_or(s).find(';')?;
    let name = &s[1..end];
    let c = match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => '\u{a0}',
        _ => {
            let code = match name.strip_prefix('#')? {
                hex if hex.starts_with(['x', 'X']) => u32::from_str_radix(&hex[1..], 16).ok()?,
                dec => dec.parse().ok()?,
            };
            char::from_u32(code)?
        }
    };
    Some((c, end + 1))
}

#[cfg(test)]
mod tests {
    use super::snippet_text;

    #[test]
    fn snippets_lose_their_markup_and_keep_their_text() {
        assert_eq!(
            snippet_text("run <b>make</b> &quot;check&quot; &lt;id&gt; &amp; &#39;x&#x27; &#x2F;"),
            "run make \"check\" <id> & 'x' /"
        );
        assert_eq!(snippet_text("a & b; &bogus; <b>c"), "a & b; &bogus; c");
    }
}
