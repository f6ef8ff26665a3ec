//! Load-time checks of a component's imports and exports against its manifest
//! and the versions of `capstan:plugin` this host knows.
//!
//! Decision (documented in docs/PLUGINS.md): a component that imports a host
//! service its manifest does not grant is refused at load, before it ever runs.
//! A grant is a promise the user read in the manifest; a component that reaches
//! for more is mislabelled and should not run at all, rather than fail later in
//! the middle of someone's task.
//!
//! Versions: a component built against any version the host knows, or an older
//! semver-compatible one (same major, and for 0.x the same minor, patch not newer),
//! loads; anything else is refused with the supported range named.

use std::collections::BTreeSet;
use std::fmt;

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::plugins::bindings::PACKAGE;
use crate::plugins::manifest::HostService;

/// A version of the WIT package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WitVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl fmt::Display for WitVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl WitVersion {
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    fn parse(s: &str) -> Option<Self> {
        let core = s.split(['-', '+']).next()?;
        let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
        let v = Self::new(parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(v)
    }

    /// Semver-compatible: same major, and for 0.x the same minor.
    fn compatible(self, other: Self) -> bool {
        self.major == other.major && (self.major > 0 || self.minor == other.minor)
    }
}

/// The versions this host provides, oldest first. Each has its own bindings
/// (bindings.rs for the current one, v0_1.rs for 0.1.x).
pub const KNOWN: [WitVersion; 2] = [WitVersion::new(0, 1, 0), WitVersion::new(0, 2, 0)];

/// The sentence naming what this host supports, for refusals.
pub fn supported_range() -> String {
    let names: Vec<String> = KNOWN
        .iter()
        .map(|v| {
            if v.major == 0 {
                format!("{}.{}.x up to {v}", v.major, v.minor)
            } else {
                format!("{}.x up to {v}", v.major)
            }
        })
        .collect();
    format!(
        "this host supports {PACKAGE} {} to {} ({})",
        KNOWN[0],
        KNOWN[KNOWN.len() - 1],
        names.join(", ")
    )
}

/// The known version a component built against `v` runs as.
fn resolve(v: WitVersion) -> Result<WitVersion, String> {
    let Some(known) = KNOWN.iter().copied().find(|k| k.compatible(v)) else {
        return Err(format!(
            "was built against {PACKAGE}@{v}, which this Capstan does not know; {}. \
             Rebuild the plugin with a capstan-plugin SDK for one of those, or update Capstan",
            supported_range()
        ));
    };
    if v > known {
        return Err(format!(
            "was built against {PACKAGE}@{v}, newer than this Capstan knows; {}. \
             Update Capstan, or rebuild the plugin against {known}",
            supported_range()
        ));
    }
    Ok(known)
}

/// What a component asks for: its host services and the WIT version it runs as.
#[derive(Debug)]
pub struct Checked {
    pub services: BTreeSet<HostService>,
    pub version: WitVersion,
}

/// Host services the component imports and the version it was built against, or
/// why it cannot be loaded.
pub fn check(
    engine: &Engine,
    component: &Component,
    granted: &BTreeSet<HostService>,
) -> Result<Checked, String> {
    let ty = component.component_type();
    let capability = format!("{PACKAGE}/capability@");
    let Some(export_version) = ty
        .exports(engine)
        .find_map(|(name, _)| name.strip_prefix(&capability).map(str::to_string))
    else {
        return Err(format!(
            "does not export `{PACKAGE}/capability`: build it as a cdylib with the capstan-plugin \
             SDK (`capstan_plugin::export!(YourType)`); {}",
            supported_range()
        ));
    };
    let built = WitVersion::parse(&export_version).ok_or_else(|| {
        format!("exports `{capability}{export_version}`, which is not a semver version")
    })?;
    let version = resolve(built)?;
    let mut services = BTreeSet::new();
    for (name, _) in ty.imports(engine) {
        if name.starts_with("wasi:") {
            // WASI p2 is linked in full; its capabilities (files, sockets, env)
            // are confined by the per-task WASI context instead.
            continue;
        }
        let Some(rest) = name.strip_prefix(PACKAGE).and_then(|r| r.strip_prefix('/')) else {
            return Err(format!(
                "imports `{name}`, which this host does not provide"
            ));
        };
        let (iface, v) = rest.split_once('@').unwrap_or((rest, ""));
        if WitVersion::parse(v) != Some(built) {
            return Err(format!(
                "imports `{name}` but exports {PACKAGE}/capability@{built}: one component must be \
                 built against one version of {PACKAGE}"
            ));
        }
        if iface == "types" {
            continue;
        }
        let Some(service) = HostService::ALL
            .into_iter()
            .find(|s| s.interface() == iface)
        else {
            return Err(format!("imports unknown host interface `{name}`"));
        };
        if !service.always_granted() && !granted.contains(&service) {
            return Err(format!(
                "imports the `{service}` host service, which its manifest does not grant; \
                 add \"{service}\" to [plugin.permissions] host = [...] if you trust it with that"
            ));
        }
        services.insert(service);
    }
    Ok(Checked { services, version })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_resolve_to_what_the_host_knows() {
        let v = |s| WitVersion::parse(s).unwrap();
        assert_eq!(resolve(v("0.1.0")), Ok(v("0.1.0")));
        assert_eq!(resolve(v("0.2.0")), Ok(v("0.2.0")));
        let newer = resolve(v("0.2.7")).unwrap_err();
        assert!(newer.contains("newer than this Capstan knows"), "{newer}");
        let unknown = resolve(v("9.0.0")).unwrap_err();
        assert!(
            unknown.contains("@9.0.0")
                && unknown.contains("supports capstan:plugin 0.1.0 to 0.2.0"),
            "{unknown}"
        );
        assert!(resolve(v("0.3.0")).is_err());
        assert_eq!(WitVersion::parse("1.2"), None);
        assert_eq!(WitVersion::parse("0.2.0-rc1"), Some(v("0.2.0")));
    }
}
