//! A throw-away PostgreSQL cluster for tests and benches: `initdb` into a
//! temporary directory, `postgres` on 127.0.0.1 at a free port, one fresh
//! database per caller (`createdb`).
//!
//! PostgreSQL refuses to run as root. When the tests run as root (CI
//! containers, these machines), the cluster runs as the `postgres` user
//! Debian's package creates (or `nobody`) through `runuser`, in a directory
//! handed to that user.
//!
//! The server is stopped and its directory removed when the test process
//! exits, however it exits: a watchdog shell beside the server polls for
//! the process that started it (a static `OnceLock` is never dropped, and a
//! test binary killed mid-run runs no destructor).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub struct Cluster {
    pub port: u16,
    bin: PathBuf,
    dir: PathBuf,
    _watchdog: std::process::Child,
}

/// Where `initdb`, `postgres` and `createdb` are: `$PG_BIN`, else the
/// newest `/usr/lib/postgresql/*/bin`, else `PATH`.
fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    let out = Command::new("sh")
        .args(["-c", "command -v initdb"])
        .output()
        .expect("running sh");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        !path.is_empty(),
        "PostgreSQL is not installed (no initdb): `apt-get install postgresql`, or run \
         `bash tests/run`, which installs it; or set PG_BIN to its bin directory"
    );
    Path::new(&path).parent().unwrap().to_path_buf()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `(user name, uid, gid)` to run the server as, when we are root.
fn server_user() -> (String, u32, u32) {
    for name in ["postgres", "nobody"] {
        let out = Command::new("id").args(["-u", name]).output().unwrap();
        if out.status.success() {
            let uid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
            let gid = Command::new("id").args(["-g", name]).output().unwrap();
            let gid = String::from_utf8_lossy(&gid.stdout).trim().parse().unwrap();
            return (name.to_owned(), uid, gid);
        }
    }
    panic!("running as root and there is no `postgres` or `nobody` user to run PostgreSQL as");
}

/// A command run as the server's user.
fn as_server_user(user: &Option<String>, program: &Path) -> Command {
    match user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--"]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    /// The process's shared cluster, started on first use.
    pub fn shared() -> &'static Cluster {
        static CLUSTER: OnceLock<Cluster> = OnceLock::new();
        CLUSTER.get_or_init(|| Cluster::start(&["-c", "fsync=off"]))
    }

    /// Starts a cluster with extra `postgres` arguments (`-c name=value`).
    pub fn start(server_args: &[&str]) -> Cluster {
        let bin = bin_dir();
        let dir = std::env::temp_dir().join(format!(
            "capstan-pg-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let user = if is_root() {
            let (name, uid, gid) = server_user();
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
            Some(name)
        } else {
            None
        };
        let data = dir.join("data");
        let out = as_server_user(&user, &bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("running initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let mut args = format!(
            "-D '{}' -p {port} -k '{}' -c listen_addresses=127.0.0.1 -c max_connections=200",
            data.display(),
            dir.display()
        );
        for a in server_args {
            args.push_str(&format!(" '{a}'"));
        }
        // The watchdog: runs the server, stops it (fast shutdown) once this
        // process is gone, then removes the directory.
        let script = format!(
            "'{postgres}' {args} >'{dir}/server.log' 2>&1 &
             pg=$!
             while [ -d /proc/{parent} ] && kill -0 $pg 2>/dev/null; do sleep 0.2; done
             kill -INT $pg 2>/dev/null; wait $pg
             rm -rf '{dir}'",
            postgres = bin.join("postgres").display(),
            dir = dir.display(),
            parent = std::process::id(),
        );
        // Never waited for: it outlives this process on purpose.
        let watchdog = as_server_user(&user, Path::new("/bin/sh"))
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting postgres");
        let cluster = Cluster {
            port,
            bin,
            dir,
            _watchdog: watchdog,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(cluster.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ready {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "PostgreSQL did not start within 60 s; its log:\n{}",
                std::fs::read_to_string(cluster.dir.join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// A new, empty database; returns its URL.
    pub fn fresh_database(&self) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        self.create_database(&name);
        self.url(&name)
    }

    pub fn create_database(&self, name: &str) {
        let out = Command::new(self.bin.join("createdb"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                name,
            ])
            .output()
            .expect("running createdb");
        assert!(
            out.status.success(),
            "createdb {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Runs SQL through `psql` (for tests that tamper with a database).
    pub fn psql(&self, database: &str, sql: &str) {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                database,
                "-c",
                sql,
            ])
            .output()
            .expect("running psql");
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
