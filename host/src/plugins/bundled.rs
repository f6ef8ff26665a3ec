//! The components built into the binary (see host/build.rs) and their manifest.

include!(concat!(env!("OUT_DIR"), "/bundled.rs"));

/// The manifest of the bundled plugins.
pub const MANIFEST: &str = include_str!("bundled.toml");

/// Where host/build.rs left every component it built, the test plugins included.
/// For tests, benchmarks and the plugin author's guide; not used at run time.
pub const PLUGIN_BUILD_DIR: &str = env!("CAPSTAN_PLUGIN_BUILD_DIR");

pub fn component(name: &str) -> Option<&'static [u8]> {
    BUNDLED
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|(_, bytes, ..)| *bytes)
}

/// The hex SHA-256 of a builtin component, computed when the binary was built.
pub fn sha256(name: &str) -> Option<&'static str> {
    BUNDLED
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|(_, _, sha, _)| *sha)
}

/// A builtin's machine code, compiled when the binary was built by an engine
/// whose compatibility key is [`PRECOMPILED_FOR`]; `None` when the build did
/// not compile it (a cross-compiled binary) or the running engine's key is
/// another one (another CPU, or a drifted configuration).
pub fn precompiled(name: &str, engine_key: &str) -> Option<&'static [u8]> {
    if PRECOMPILED_FOR.is_empty() || engine_key != PRECOMPILED_FOR {
        return None;
    }
    BUNDLED
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|(.., code)| *code)
        .filter(|code| !code.is_empty())
}

pub fn names() -> Vec<&'static str> {
    BUNDLED.iter().map(|(n, ..)| *n).collect()
}

#[cfg(test)]
mod tests {
    /// build.rs compiled every builtin for the engine the runtime builds, at
    /// every capacity: if the configurations drift apart, the first run
    /// compiles again.
    #[test]
    fn every_builtin_is_compiled_ahead_for_the_runtime_s_engine() {
        use crate::plugins::engine::Capacity;
        for capacity in [Capacity::OneRun, Capacity::Server] {
            let config = crate::plugins::engine::config(capacity);
            let engine = wasmtime::Engine::new(&config).unwrap();
            let key = crate::plugins::engine::compatibility_key(&engine);
            assert_eq!(super::PRECOMPILED_FOR, key, "{capacity:?}");
            for name in super::names() {
                let code = super::precompiled(name, &key).unwrap_or_default();
                // SAFETY: code this crate's build script compiled for this key.
                let loaded = unsafe { wasmtime::component::Component::deserialize(&engine, code) };
                assert!(loaded.is_ok(), "{name} at {capacity:?}: {:?}", loaded.err());
            }
        }
        assert_eq!(super::precompiled("kb-retrieval", "another-engine"), None);
    }

    /// The hash build.rs recorded is the hash of the bytes it embedded.
    #[test]
    fn every_builtin_hash_matches_its_bytes() {
        for name in super::names() {
            let bytes = super::component(name).unwrap_or_default();
            assert_eq!(
                super::sha256(name),
                Some(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes)).as_str()),
                "{name}"
            );
        }
    }
}
