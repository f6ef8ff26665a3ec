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
        .map(|(_, bytes, _)| *bytes)
}

/// The hex SHA-256 of a builtin component, computed when the binary was built.
pub fn sha256(name: &str) -> Option<&'static str> {
    BUNDLED
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|(.., sha)| *sha)
}

pub fn names() -> Vec<&'static str> {
    BUNDLED.iter().map(|(n, ..)| *n).collect()
}

#[cfg(test)]
mod tests {
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
