//! `capstan search` straight from the host's index when there is nothing to
//! refresh: no event store, no wasm runtime, no plugin instance. The plugin's
//! search on a current index is a call back into this same index plus
//! [`capstan_kb_parse::rank`] (fusion, overlap, coverage), which the host runs
//! here itself: the answer is the one the plugin would give.
//!
//! Taken only when the answer cannot differ: the query is not blank, the
//! user's config and the workspace's capstan.toml check clean, `local_kb_retrieval`
//! is the bundled plugin (no user manifest replaced it) and the host's walk
//! finds the index current. Anything else, or any error on the way, returns
//! `None` and the search goes through the plugin as before (which reports the
//! error as it always did).

use std::path::Path;

use capstan_kb_parse::rank;

use crate::config::Config;
use crate::dirs::Dirs;
use crate::plugins::registry::{ManifestSources, Registry};
use crate::plugins::services::index::Indexes;
use crate::run::orchestrator::RETRIEVAL_KIND;

/// The search's answer data, or `None` when the plugin must answer.
pub fn search_if_current(
    dirs: &Dirs,
    root: &Path,
    query: &str,
    limit: u32,
) -> Option<serde_json::Value> {
    if query.trim().is_empty() {
        return None;
    }
    // The checks `App::open` makes: a config it refuses gets its error there.
    let config = Config::load(&dirs.user_config_file()).ok()?;
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let protected = [dirs.config.clone(), dirs.data.clone(), dirs.cache.clone()];
    config.sandbox.check(&protected, home.as_deref()).ok()?;
    config.network.check().ok()?;
    config.store.check().ok()?;
    crate::config::check::check_workspace(root, &dirs.user_config_file()).ok()?;
    let registry = Registry::lazy(&ManifestSources::new(dirs.user_config_file(), Some(root)));
    if registry.spec(RETRIEVAL_KIND)?.origin != crate::plugins::registry::BUNDLED_ORIGIN {
        return None;
    }
    let indexes = Indexes::new(dirs.data.join("indexes"), config.index.options());
    if !indexes.is_current_now(root).ok()? {
        return None;
    }
    let ix = indexes.for_workspace(root).ok()?;
    let answer = rank::answer(query, &[], limit, None, |q, n| {
        // As the host's `index.search` import serves the plugin.
        let hits = ix.search(q, n.clamp(1, 200) as usize)?;
        Ok::<_, capstan_index::IndexError>(
            hits.into_iter()
                .map(|h| rank::Hit {
                    path: h.path,
                    heading: h.heading,
                    text: h.text,
                    line_start: h.line_start,
                    line_end: h.line_end,
                    score: h.score,
                    snippet: h.snippet,
                })
                .collect(),
        )
    })
    .ok()?;
    Some(answer.data)
}
