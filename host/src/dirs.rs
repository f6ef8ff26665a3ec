//! Capstan's own directories: config (manifests, `capstan.toml`), data (indexes,
//! the database) and cache (compiled components).
//!
//! Each defaults to the platform's standard place and can be overridden by a flag
//! or an environment variable (`CAPSTAN_CONFIG_DIR`, `CAPSTAN_DATA_DIR`,
//! `CAPSTAN_CACHE_DIR`), or all three at once with `CAPSTAN_HOME`, so tests and
//! scripts never touch a user's real state.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

#[derive(Debug, Clone)]
pub struct Dirs {
    pub config: PathBuf,
    pub data: PathBuf,
    pub cache: PathBuf,
}

/// Explicit choices from the command line; `None` falls back to the environment,
/// then to the platform default.
#[derive(Debug, Clone, Default)]
pub struct DirOverrides {
    pub home: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub data: Option<PathBuf>,
    pub cache: Option<PathBuf>,
}

impl Dirs {
    pub fn resolve(overrides: &DirOverrides) -> Result<Self> {
        let env = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = overrides.home.clone().or_else(|| env("CAPSTAN_HOME"));
        let project = directories::ProjectDirs::from("dev", "capstan", "capstan");
        let pick = |flag: &Option<PathBuf>,
                    var: &str,
                    sub: &str,
                    default: fn(&directories::ProjectDirs) -> &Path| {
            flag.clone()
                .or_else(|| env(var))
                .or_else(|| home.as_ref().map(|h| h.join(sub)))
                .or_else(|| project.as_ref().map(|p| default(p).to_path_buf()))
        };
        let config = pick(&overrides.config, "CAPSTAN_CONFIG_DIR", "config", |p| {
            p.config_dir()
        });
        let data = pick(&overrides.data, "CAPSTAN_DATA_DIR", "data", |p| {
            p.data_dir()
        });
        let cache = pick(&overrides.cache, "CAPSTAN_CACHE_DIR", "cache", |p| {
            p.cache_dir()
        });
        match (config, data, cache) {
            (Some(config), Some(data), Some(cache)) => Ok(Self {
                config,
                data,
                cache,
            }),
            _ => bail!(
                "cannot find a home directory for Capstan's config, data and cache; \
                 set CAPSTAN_HOME (or --home) to a directory Capstan may use"
            ),
        }
    }

    /// A layout under one root, for tests and benchmarks.
    pub fn under(root: &Path) -> Self {
        Self {
            config: root.join("config"),
            data: root.join("data"),
            cache: root.join("cache"),
        }
    }

    /// The user's config file, `capstan.toml` in the config dir.
    pub fn user_config_file(&self) -> PathBuf {
        self.config.join("capstan.toml")
    }

    /// Where compiled components are cached.
    pub fn component_cache(&self) -> PathBuf {
        self.cache.join("components")
    }

    pub fn ensure(path: &Path) -> Result<&Path> {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .with_context(|| format!("cannot create directory {}", path.display()))?;
        // Capstan's state is the owner's only; a directory an older version
        // made 0755 is tightened (best effort: one someone else owns stays).
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
        }
        Ok(path)
    }
}
