//! Plugin runtime benchmark: compiling each component (a plugin from a file,
//! first use), a bundled one's first use (its code built into the binary) and a
//! cached load, and the per-task overhead of instantiate + invoke on a trivial
//! capability.
//!
//! Run: cargo bench -p capstan --bench runtime
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A bench prints its own figures for the developer who runs it.
#![allow(clippy::disallowed_macros)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan::plugins::context::{HostServices, RunContext};
use capstan::plugins::manifest::{self, PluginSpec};
use capstan::plugins::runtime::{Capacity, Runtime};
use capstan_protocol::{NullSink, TaskRequest};

const CALLS: usize = 10_000;

fn specs(dir: &std::path::Path) -> Vec<PluginSpec> {
    let mut text = capstan::plugins::bundled::MANIFEST.to_string();
    for (name, krate, kinds) in [("hello", "hello", "echo"), ("fault", "fault", "fault")] {
        let path = std::path::Path::new(capstan::plugins::bundled::PLUGIN_BUILD_DIR)
            .join(format!("{krate}.wasm"));
        let sha = capstan::plugins::manifest::sha256_hex(&std::fs::read(&path).unwrap());
        text.push_str(&format!(
            "\n[[plugin]]\nname = {name:?}\ncomponent = {:?}\nsha256 = {sha:?}\nkinds = [{kinds:?}]\n[plugin.permissions]\nhost = [\"exec\"]\n",
            path.display().to_string()
        ));
    }
    let (specs, errors) = manifest::parse(&text, "bench", Some(dir));
    assert!(errors.is_empty(), "{errors:?}");
    specs
}

/// The same plugins with every bundled component written to a file, so that
/// loading one compiles it.
fn as_files(specs: &[PluginSpec], dir: &std::path::Path) -> Vec<PluginSpec> {
    #[derive(serde::Serialize)]
    struct File {
        plugin: Vec<manifest::PluginEntry>,
    }
    let mut plugin = Vec::new();
    for spec in specs {
        let mut entry = spec.entry.clone();
        if let manifest::ComponentSource::Builtin(n) = &spec.source {
            let path = dir.join(format!("{n}.wasm"));
            let bytes = capstan::plugins::bundled::component(n).unwrap();
            std::fs::write(&path, bytes).unwrap();
            entry.component = path.display().to_string();
            entry.sha256 = Some(manifest::sha256_hex(bytes));
        }
        plugin.push(entry);
    }
    let text = toml::to_string(&File { plugin }).unwrap();
    let (specs, errors) = manifest::parse(&text, "bench", Some(dir));
    assert!(errors.is_empty(), "{errors:?}");
    specs
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tmp = tempfile::tempdir().unwrap();
        let cache = tmp.path().join("cache");
        let runtime = Runtime::new(cache.clone(), vec![], Capacity::OneRun).unwrap();

        // Compiling each component (what a plugin from a file costs on its
        // first use), with a runtime of its own so nothing is cached yet.
        let compile_cache = tmp.path().join("compile-cache");
        let compiler = Runtime::new(compile_cache, vec![], Capacity::OneRun).unwrap();
        let mut compile = std::collections::HashMap::new();
        for spec in as_files(&specs(tmp.path()), tmp.path()) {
            let cold = compiler.load_spec(spec.clone()).await.unwrap();
            assert!(!cold.load.cache_hit, "{} was cached", spec.entry.name);
            compile.insert(spec.entry.name.clone(), cold.load.duration);
        }

        println!("## Plugin load: compiled, precompiled in the binary, cached\n");
        println!(
            "| plugin | component size | compile (first use of a file) | first use, bundled (code built in) | cached load | compile / cached |"
        );
        println!("|---|---|---|---|---|---|");
        let mut hello = None;
        for spec in specs(tmp.path()) {
            let (size, bundled) = match &spec.source {
                manifest::ComponentSource::Builtin(n) => {
                    (capstan::plugins::bundled::component(n).unwrap().len(), true)
                }
                manifest::ComponentSource::File(p) => {
                    (std::fs::metadata(p).unwrap().len() as usize, false)
                }
            };
            let first = runtime.load_spec(spec.clone()).await.unwrap();
            // A bundled component's first use copies the code built into the
            // binary to the cache; a file's compiles it.
            assert_eq!(first.load.cache_hit, bundled, "{}", spec.entry.name);
            // Best of 5 cached loads, each by a runtime of its own (as a new
            // process would): a deserialize from the cache file. Within one
            // runtime a second load reuses the first and costs nothing.
            let mut best = Duration::MAX;
            for _ in 0..5 {
                let fresh = Runtime::new(cache.clone(), vec![], Capacity::OneRun).unwrap();
                let warm = fresh.load_spec(spec.clone()).await.unwrap();
                assert!(warm.load.cache_hit);
                best = best.min(warm.load.duration);
            }
            let compiled = compile[&spec.entry.name];
            println!(
                "| {} | {} KiB | {} | {} | {} | {:.0}x |",
                spec.entry.name,
                size / 1024,
                ms(compiled),
                if bundled {
                    ms(first.load.duration)
                } else {
                    "-".into()
                },
                ms(best),
                compiled.as_secs_f64() / best.as_secs_f64()
            );
            if spec.entry.name == "hello" {
                hello = Some(first);
            }
        }

        let hello = hello.unwrap();
        let run = RunContext::new(None, Arc::new(NullSink), HostServices::default());
        let task = TaskRequest {
            id: "bench".into(),
            kind: "echo".into(),
            operation: "echo".into(),
            input: serde_json::json!({"quiet": true}),
        };
        for _ in 0..500 {
            runtime.invoke(&hello, &task, &run).await.unwrap();
        }
        let mut samples = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let t = Instant::now();
            runtime.invoke(&hello, &task, &run).await.unwrap();
            samples.push(t.elapsed());
        }
        samples.sort();
        println!(
            "\n## Per-task overhead: fresh store + instantiate + invoke (`echo`), {CALLS} calls\n"
        );
        println!("| p50 | p99 | max | tasks/s (one thread) |");
        println!("|---|---|---|---|");
        let total: Duration = samples.iter().sum();
        println!(
            "| {} | {} | {} | {:.0} |",
            us(pct(&samples, 0.5)),
            us(pct(&samples, 0.99)),
            us(*samples.last().unwrap()),
            CALLS as f64 / total.as_secs_f64()
        );
        println!("\nReproduce: cargo bench -p capstan --bench runtime");
    });
}
