//! One store test, two backends: `both!(name)` after `fn name(kind: Kind)`
//! makes `name::sqlite` and `name::postgres` tests.

#![allow(dead_code)]

pub mod pg;

use capstan_store::Store;
use tempfile::TempDir;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A fresh database of one backend, and a temporary directory (workspace
/// roots live there; so does the SQLite file).
pub struct Db {
    pub kind: Kind,
    dir: TempDir,
    url: String,
}

impl Db {
    pub fn new(kind: Kind) -> Db {
        let dir = tempfile::tempdir().unwrap();
        let url = match kind {
            Kind::Sqlite => dir.path().join("capstan.db").display().to_string(),
            Kind::Postgres => pg::Cluster::shared().fresh_database(),
        };
        Db { kind, dir, url }
    }

    /// The temporary directory.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// What `Store::open_url` takes.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Opens (another handle on) the database.
    pub fn open(&self) -> Store {
        Store::open_url(&self.url).unwrap()
    }
}

/// A fresh database and a store open on it.
pub fn fresh(kind: Kind) -> (Db, Store) {
    let db = Db::new(kind);
    let store = db.open();
    (db, store)
}

pub fn reopen(db: &Db) -> Store {
    db.open()
}

#[macro_export]
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn sqlite() {
                    super::$name($crate::common::Kind::Sqlite)
                }
                #[test]
                fn postgres() {
                    super::$name($crate::common::Kind::Postgres)
                }
            }
        )*
    };
}
