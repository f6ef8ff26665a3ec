//! Shared helpers for the end-to-end tests: temp Capstan homes, manifests for the
//! test plugins built by host/build.rs, and the real binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use capstan_protocol::{Event, EventSink};

pub mod procs;
pub mod server;
pub mod sse;

/// A built component from plugins/ (test plugins included).
pub fn built_component(crate_name: &str) -> PathBuf {
    let path =
        Path::new(capstan::plugins::bundled::PLUGIN_BUILD_DIR).join(format!("{crate_name}.wasm"));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// An executable from a pinned npm group under tests/npm (installed by `bash tests/run`).
/// Fails, never skips, when it is missing: these tests exist to drive the real program.
pub fn npm_bin(group: &str, bin: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/npm")
        .join(group);
    let path = dir.join("node_modules/.bin").join(bin);
    assert!(
        path.exists(),
        "{} is not installed: run `bash tests/run` or `npm ci --prefix {}`",
        path.display(),
        dir.display()
    );
    path
}

/// The node_modules directory of a pinned npm group (for `NODE_PATH` in node scripts).
pub fn npm_modules(group: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/npm")
        .join(group)
        .join("node_modules");
    assert!(
        dir.exists(),
        "{} is not installed: run `bash tests/run`",
        dir.display()
    );
    dir
}

pub fn sha256_file(path: &Path) -> String {
    capstan::plugins::manifest::sha256_hex(&std::fs::read(path).unwrap())
}

/// A `[[plugin]]` entry for a built component.
pub fn plugin_entry(name: &str, crate_name: &str, kinds: &[&str], extra: &str) -> String {
    let path = built_component(crate_name);
    format!(
        "[[plugin]]\nname = {name:?}\ncomponent = {:?}\nsha256 = {:?}\nkinds = {kinds:?}\n{extra}\n",
        path.display().to_string(),
        sha256_file(&path)
    )
}

/// A temporary Capstan home (config, data, cache) with an optional user manifest.
pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    pub fn new(manifest: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        std::fs::write(dir.path().join("config/capstan.toml"), manifest).unwrap();
        Self { dir }
    }

    pub fn dirs(&self) -> capstan::dirs::Dirs {
        capstan::dirs::Dirs::under(self.dir.path())
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The real binary, with this home.
    pub fn capstan(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"));
        cmd.env("CAPSTAN_HOME", self.dir.path())
            .env_remove("CAPSTAN_CONFIG_DIR")
            .env_remove("CAPSTAN_DATA_DIR")
            .env_remove("CAPSTAN_CACHE_DIR");
        cmd
    }
}

/// Collects events for assertions.
#[derive(Default, Clone)]
pub struct Recorder(pub Arc<Mutex<Vec<Event>>>);

impl EventSink for Recorder {
    fn emit(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }
}

impl Recorder {
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }

    pub fn types(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| {
                serde_json::to_value(e).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }
}
