//! Load-time checks of a component's imports and exports against its manifest.
//!
//! Decision (documented in docs/PLUGINS.md): a component that imports a host
//! service its manifest does not grant is refused at load, before it ever runs.
//! A grant is a promise the user read in the manifest; a component that reaches
//! for more is mislabelled and should not run at all, rather than fail later in
//! the middle of someone's task.

use std::collections::BTreeSet;

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::plugins::bindings::{PACKAGE, VERSION};
use crate::plugins::manifest::HostService;

/// Host services the component imports, or why it cannot be loaded.
pub fn check(
    engine: &Engine,
    component: &Component,
    granted: &BTreeSet<HostService>,
) -> Result<BTreeSet<HostService>, String> {
    let ty = component.component_type();
    let mut used = BTreeSet::new();
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
        let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
        if version != VERSION {
            return Err(format!(
                "was built against {PACKAGE}@{version}, this host provides {PACKAGE}@{VERSION}; rebuild the plugin against wit/ of this Capstan"
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
        used.insert(service);
    }
    let export = format!("{PACKAGE}/capability@{VERSION}");
    if !ty.exports(engine).any(|(name, _)| name == export) {
        return Err(format!(
            "does not export `{export}`: build it as a cdylib against the `plugin` world of wit/capstan.wit"
        ));
    }
    Ok(used)
}
