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
        .find(|(n, _)| *n == name)
        .map(|(_, bytes)| *bytes)
}

pub fn names() -> Vec<&'static str> {
    BUNDLED.iter().map(|(n, _)| *n).collect()
}
