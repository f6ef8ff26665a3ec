//! Registered workspace folders and their policy profile.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::error::{Result, StoreError};
use crate::{Durability, Profile, SqliteStore, Workspace, new_id, now_rfc3339};

const COLUMNS: &str = "id, root_path, name, policy_profile, profile_set, policy_json, created_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Workspace> {
    Ok(Workspace {
        id: r.get(0)?,
        root_path: PathBuf::from(r.get::<_, String>(1)?),
        name: r.get(2)?,
        policy_profile: if r.get::<_, bool>(4)? {
            let name: String = r.get(3)?;
            Some(name.parse().map_err(|e: capstan_protocol::UnknownName| {
                rusqlite::Error::FromSqlConversionFailure(3, rusqlite::types::Type::Text, e.into())
            })?)
        } else {
            None
        },
        policy_json: r.get(5)?,
        created_at: r.get(6)?,
    })
}

/// The canonical form of a workspace root as stored: absolute, symlinks and
/// `..` resolved, UTF-8 (the column is text and the path is shown to people).
pub(crate) fn canonical_root(root: &Path) -> Result<String> {
    let fail = |source| StoreError::WorkspaceRoot {
        root: root.to_path_buf(),
        source,
    };
    let canonical = std::fs::canonicalize(root).map_err(fail)?;
    if !canonical.is_dir() {
        return Err(fail(std::io::Error::other("not a directory")));
    }
    canonical.into_os_string().into_string().map_err(|_| {
        fail(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the path is not valid UTF-8",
        ))
    })
}

impl SqliteStore {
    /// Registers a workspace folder. `root` must be an existing directory; it
    /// is stored canonical, so `./proj`, `/home/me/proj/` and a symlink to it
    /// are one workspace.
    ///
    /// Fails with [`StoreError::WorkspaceExists`] when the root is already
    /// registered (the error names the existing id), and
    /// [`StoreError::WorkspaceRoot`] when it cannot be resolved.
    ///
    /// `profile` is the workspace's own profile; `None` follows the
    /// configuration's.
    pub fn add_workspace(
        &self,
        root: &Path,
        name: &str,
        profile: Option<Profile>,
    ) -> Result<Workspace> {
        let root_path = canonical_root(root)?;
        let ws = Workspace {
            id: new_id("ws"),
            root_path: PathBuf::from(&root_path),
            name: name.to_owned(),
            policy_profile: profile,
            policy_json: None,
            created_at: now_rfc3339(),
        };
        self.write(Durability::Durable, |c| {
            if let Some(existing) = by_root(c, &root_path).map_err(|e| self.sql(e))? {
                return Err(StoreError::WorkspaceExists {
                    root: existing.root_path,
                    id: existing.id,
                });
            }
            c.prepare_cached(
                "INSERT INTO workspaces (id, root_path, name, policy_profile, profile_set, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    ws.id,
                    root_path,
                    ws.name,
                    profile.unwrap_or_default().as_str(),
                    profile.is_some(),
                    ws.created_at
                ])
            })
            .map_err(|e| self.sql(e))?;
            Ok(())
        })?;
        Ok(ws)
    }

    /// Every workspace, by name then id.
    pub fn list_workspaces(&self) -> Result<Vec<Workspace>> {
        self.with_conn(|c| {
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM workspaces ORDER BY name, id"
                ))
                .map_err(|e| self.sql(e))?;
            let rows = stmt.query_map([], from_row).map_err(|e| self.sql(e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))
        })
    }

    pub fn get_workspace_by_id(&self, id: &str) -> Result<Option<Workspace>> {
        self.with_conn(|c| {
            c.prepare_cached(&format!("SELECT {COLUMNS} FROM workspaces WHERE id = ?1"))
                .and_then(|mut s| s.query_row([id], from_row).optional())
                .map_err(|e| self.sql(e))
        })
    }

    /// Looks a workspace up by its folder. `root` is canonicalised when it
    /// exists, so any spelling of the folder finds it; a folder that no
    /// longer exists is looked up as given (pass the stored `root_path`).
    pub fn get_workspace_by_root(&self, root: &Path) -> Result<Option<Workspace>> {
        let key = match canonical_root(root) {
            Ok(canonical) => canonical,
            Err(_) => root.to_string_lossy().into_owned(),
        };
        self.with_conn(|c| by_root(c, &key).map_err(|e| self.sql(e)))
    }

    /// Forgets a workspace (never touches its folder). Sessions that used it
    /// keep their history and lose the link (`workspace_id` becomes `None`).
    pub fn remove_workspace(&self, id: &str) -> Result<()> {
        self.update_one("DELETE FROM workspaces WHERE id = ?1", params![id], id)
    }

    /// Sets a workspace's own policy profile, or with `None` makes it follow
    /// the configuration's again.
    pub fn set_profile(&self, id: &str, profile: Option<Profile>) -> Result<()> {
        self.update_one(
            "UPDATE workspaces SET policy_profile = ?2, profile_set = ?3 WHERE id = ?1",
            params![id, profile.unwrap_or_default().as_str(), profile.is_some()],
            id,
        )
    }

    /// Sets (or with `None` clears) a workspace's extra policy rules. The
    /// text must be valid JSON; its meaning is the policy layer's business.
    pub fn set_policy_json(&self, id: &str, policy_json: Option<&str>) -> Result<()> {
        if let Some(json) = policy_json {
            serde_json::from_str::<serde::de::IgnoredAny>(json).map_err(|e| {
                StoreError::InvalidArgument(format!(
                    "policy_json of workspace {id} is not JSON: {e}"
                ))
            })?;
        }
        self.update_one(
            "UPDATE workspaces SET policy_json = ?2 WHERE id = ?1",
            params![id, policy_json],
            id,
        )
    }

    /// Runs one durable statement that must touch exactly one workspace row.
    fn update_one(&self, sql: &str, params: &[&dyn rusqlite::ToSql], id: &str) -> Result<()> {
        self.write(Durability::Durable, |c| {
            let n = c
                .prepare_cached(sql)
                .and_then(|mut s| s.execute(params))
                .map_err(|e| self.sql(e))?;
            if n == 0 {
                return Err(StoreError::NotFound {
                    what: "workspace",
                    id: id.to_owned(),
                });
            }
            Ok(())
        })
    }
}

fn by_root(c: &Connection, root: &str) -> rusqlite::Result<Option<Workspace>> {
    c.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM workspaces WHERE root_path = ?1"
    ))?
    .query_row([root], from_row)
    .optional()
}
