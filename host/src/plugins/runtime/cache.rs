//! Compiled components on disk.
//!
//! Compiling a component with Cranelift costs 0.1 s to seconds; loading a
//! precompiled one costs milliseconds. Entries are keyed by the component's
//! sha256 and the engine's compatibility hash (wasmtime version and every setting
//! that affects code generation), so a new Capstan or a changed engine config never
//! loads stale code. Files are written to a temp file and renamed, so a crash or a
//! concurrent writer never leaves a torn entry.
//!
//! Invariant: the cache dir is never inside a directory a plugin can see (the
//! runtime refuses such a workspace), because loading a cached file runs it as
//! trusted machine code.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use wasmtime::Engine;
use wasmtime::component::Component;

pub struct ComponentCache {
    dir: PathBuf,
    engine_key: String,
}

impl ComponentCache {
    pub fn new(dir: PathBuf, engine: &Engine) -> Self {
        let engine_key = crate::plugins::engine::compatibility_key(engine);
        Self { dir, engine_key }
    }

    /// The engine's compatibility key: compiled code filed under another key
    /// is never loaded.
    pub fn engine_key(&self) -> &str {
        &self.engine_key
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.cwasm", self.engine_key))
    }

    /// Whether a compiled entry for the component with this sha256 is on disk.
    pub fn contains(&self, sha256: &str) -> bool {
        self.entry(sha256).is_file()
    }

    /// The compiled component: from the cache, else `ahead` (a builtin's code
    /// compiled when the binary was built, for this engine's key), else
    /// compiled now; the last two are cached for later processes. Returns
    /// whether compiling was avoided. A corrupt entry is replaced, not fatal.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        bytes: &[u8],
        sha256: &str,
        ahead: Option<&'static [u8]>,
    ) -> Result<(Component, bool)> {
        let path = self.entry(sha256);
        if path.exists() {
            // SAFETY: the file was written by `store` below from wasmtime's own
            // serialization for this engine configuration (the key says so), in a
            // directory no plugin can reach.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, true)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), "discarding unusable cache entry: {e:#}")
                }
            }
        }
        if let Some(code) = ahead {
            // Written to the cache and mapped from there: mapping a file costs a
            // process a fraction of copying the code out of the binary (17 vs 46
            // ms for a question), and its pages stay file-backed.
            let mapped = self.store(&path, code).and_then(|()| {
                // SAFETY: host/build.rs wrote these bytes with wasmtime's own
                // `precompile_component` for an engine with this compatibility
                // key; they are part of this binary, as trusted as the code reading
                // them, and were just copied into a directory no plugin can reach.
                unsafe { Component::deserialize_file(engine, &path) }.map_err(anyhow::Error::from)
            });
            match mapped {
                Ok(component) => {
                    release_pages(code);
                    return Ok((component, true));
                }
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), "cannot cache bundled code: {e:#}")
                }
            }
            // SAFETY: as above, from the binary's own bytes.
            match unsafe { Component::deserialize(engine, code) } {
                Ok(component) => return Ok((component, true)),
                Err(e) => tracing::warn!("bundled compiled code unusable, compiling: {e:#}"),
            }
        }
        let component = Component::new(engine, bytes)?;
        self.keep(&path, &component.serialize()?);
        Ok((component, false))
    }

    fn keep(&self, path: &Path, code: &[u8]) {
        if let Err(e) = self.store(path, code) {
            // A read-only or full cache dir makes loads slower, nothing more.
            tracing::warn!(dir = %self.dir.display(), "cannot cache compiled component: {e:#}");
        }
    }

    fn store(&self, path: &Path, code: &[u8]) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        std::io::Write::write_all(&mut tmp, code)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path)?;
        Ok(())
    }
}

/// Lets the kernel drop this process's pages of `code`, read-only data of the
/// binary that was just copied to the cache and is not read again: otherwise
/// they stay resident (7 MiB for kb-retrieval, an eighth of an idle server).
/// The pages are clean and file-backed, so dropping them loses nothing; a
/// later read would fault them in again from the binary.
fn release_pages(code: &[u8]) {
    #[cfg(target_os = "linux")]
    {
        unsafe extern "C" {
            fn madvise(
                addr: *mut std::ffi::c_void,
                len: usize,
                advice: std::ffi::c_int,
            ) -> std::ffi::c_int;
        }
        const MADV_DONTNEED: std::ffi::c_int = 4;
        // Whole pages inside the slice only, for any page size up to 64 KiB.
        const ALIGN: usize = 64 * 1024;
        let start = (code.as_ptr() as usize).next_multiple_of(ALIGN);
        let end = (code.as_ptr() as usize + code.len()) / ALIGN * ALIGN;
        if end > start {
            // SAFETY: the range lies inside a `&'static [u8]` of the binary's
            // read-only, never written data; MADV_DONTNEED on such a private file
            // mapping only drops page-table entries, and any later access reads
            // the same bytes back from the file.
            unsafe {
                madvise(start as *mut std::ffi::c_void, end - start, MADV_DONTNEED);
            }
        }
    }
}
