//! Adversarial tests of the exec sandbox: real processes, real Landlock, seccomp
//! and namespaces. Every case asserts what happened, and for escapes also checks
//! the host side (the file outside was not created, the listener saw no
//! connection, no process survived).
//!
//! Run: `cargo test -p capstan-sandbox --test adversarial`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use capstan_sandbox::{
    Command, ExecOutcome, ExecSpec, LimitHit, Limits, SandboxError, SandboxMode, run, set_launcher,
};
use tokio_util::sync::CancellationToken;

const SECRETS: &[(&str, &str)] = &[
    ("ANTHROPIC_API_KEY", "sk-ant-test-secret-4f1d"),
    ("AWS_SECRET_ACCESS_KEY", "aws-test-secret-9c2e"),
    ("SSH_AUTH_SOCK", "/tmp/ssh-test-agent.sock"),
];

/// Every test calls this first. It names the launcher and plants fake secrets in
/// this process's environment, which must never reach a command.
fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        set_launcher(env!("CARGO_BIN_EXE_capstan-sandbox-launcher"));
        for (k, v) in SECRETS {
            // SAFETY: runs once, inside a Once that every test enters before
            // doing anything else, so no other thread reads the environment
            // concurrently.
            unsafe { std::env::set_var(k, v) };
        }
    });
}

/// A workspace inside a private parent directory, so that `../x` lands in a
/// directory the test can inspect, plus an `outside` directory next to it.
struct Fixture {
    _root: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        setup();
        let root = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        let ws = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "outside secret\n").unwrap();
        Fixture {
            _root: root,
            ws,
            outside,
        }
    }

    fn spec(&self, cmd: &str) -> ExecSpec {
        let mut spec = ExecSpec::new(Command::Shell(cmd.into()), &self.ws);
        spec.timeout = Duration::from_secs(30);
        spec
    }

    async fn sh(&self, cmd: &str) -> ExecOutcome {
        run(self.spec(cmd), CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("run({cmd:?}) failed: {e}"))
    }
}

fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "capstan-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A `sleep` whose command line is unique: `sleep 1000.<digits>`.
fn marker_sleep() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(1);
    format!(
        "1000.{}{:04}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Processes on the host whose command line contains `marker`.
fn survivors(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(pid);
            }
        }
    }
    found
}

fn assert_no_survivors(marker: &str) {
    // The run has returned only after the namespace is gone, so there is nothing
    // to wait for; the short retry only tolerates /proc reading lag.
    let deadline = Instant::now() + Duration::from_millis(500);
    loop {
        let s = survivors(marker);
        if s.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!("processes with marker {marker} survived: {s:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn failed(o: &ExecOutcome) -> bool {
    o.exit_code != Some(0)
}

// ---------------------------------------------------------------- filesystem

/// Writes that must fail; `target` must not exist on the host afterwards.
/// `{ws}`, `{outside}` and `{u}` (a unique name) are substituted.
const BLOCKED_WRITES: &[(&str, &str, &str)] = &[
    ("absolute path in /etc", "echo x > /etc/{u}", "/etc/{u}"),
    // The fixture lives under the host's /tmp, so `..` is inside the private
    // /tmp of the view: the write may succeed there, never on the host.
    (
        "parent directory",
        "echo x > ../{u}; cat ../{u}",
        "{ws}/../{u}",
    ),
    (
        "sibling directory",
        "echo x > {outside}/{u}",
        "{outside}/{u}",
    ),
    ("/var/tmp", "echo x > /var/tmp/{u}", "/var/tmp/{u}"),
    ("real home", "echo x > /root/{u}", "/root/{u}"),
    ("mkdir outside", "mkdir {outside}/{u}", "{outside}/{u}"),
    (
        "symlink created inside pointing out",
        "ln -s {outside} link-{u} && echo x > link-{u}/{u}",
        "{outside}/{u}",
    ),
    (
        "hard link of a file outside",
        "ln {outside}/secret.txt {u}",
        "{ws}/{u}",
    ),
    ("hard link of /etc/passwd", "ln /etc/passwd {u}", "{ws}/{u}"),
    (
        "rename a file from outside into the workspace",
        "mv {outside}/secret.txt {u}",
        "{ws}/{u}",
    ),
    (
        "python open() outside",
        "python3 -c \"open('{outside}/{u}','w')\"",
        "{outside}/{u}",
    ),
];

#[tokio::test]
async fn writes_outside_the_workspace_are_blocked() {
    let f = Fixture::new();
    let mut problems = Vec::new();
    for (name, cmd, target) in BLOCKED_WRITES {
        let u = unique("w");
        let subst = |s: &str| {
            s.replace("{ws}", &f.ws.to_string_lossy())
                .replace("{outside}", &f.outside.to_string_lossy())
                .replace("{u}", &u)
        };
        let out = f.sh(&subst(cmd)).await;
        let target = PathBuf::from(subst(target));
        let private_tmp =
            f.ws.starts_with(std::env::temp_dir()) && target.starts_with(std::env::temp_dir());
        if !failed(&out) && !private_tmp {
            problems.push(format!("{name}: command succeeded: {out:?}"));
        }
        if std::fs::symlink_metadata(&target).is_ok() {
            problems.push(format!("{name}: {} exists", target.display()));
            let _ = std::fs::remove_file(&target);
        }
    }
    // Nothing outside was modified or moved.
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "outside secret\n"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

/// `/tmp` and `/dev/shm` are the task's own: writing there works, and nothing
/// reaches the host's directories of the same name.
#[tokio::test]
async fn tmp_and_shm_are_private() {
    let f = Fixture::new();
    let u = unique("private");
    let out = f
        .sh(&format!(
            "echo t > /tmp/{u} && echo s > /dev/shm/{u}-shm && cat /tmp/{u} /dev/shm/{u}-shm"
        ))
        .await;
    assert_eq!(out.stdout, "t\ns\n", "{out:?}");
    for host in [format!("/tmp/{u}"), format!("/dev/shm/{u}-shm")] {
        assert!(!Path::new(&host).exists(), "{host} reached the host");
    }
}

#[tokio::test]
async fn preexisting_symlink_to_outside_file_cannot_be_written() {
    let f = Fixture::new();
    std::os::unix::fs::symlink(f.outside.join("secret.txt"), f.ws.join("evil")).unwrap();
    let out = f.sh("echo pwned >> evil; echo pwned > evil").await;
    assert!(failed(&out), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "outside secret\n"
    );
}

#[tokio::test]
async fn deleting_outside_files_is_blocked() {
    let f = Fixture::new();
    let cases = [
        format!("rm {}/secret.txt", f.outside.display()),
        format!("rm -rf {}", f.outside.display()),
        "rm /etc/hostname".to_owned(),
        "rm -rf /usr/share/doc".to_owned(),
    ];
    for cmd in &cases {
        let out = f.sh(cmd).await;
        // `rm -rf` of a path the view does not hold succeeds without doing
        // anything; what matters is the host side below.
        if !cmd.contains("-rf") {
            assert!(failed(&out), "{cmd}: {out:?}");
        }
    }
    assert!(f.outside.join("secret.txt").exists());
    assert!(Path::new("/etc/hostname").exists());
    assert!(Path::new("/usr/share/doc").exists());
}

/// Landlock does not govern metadata (mode, owner, times, xattrs); the private
/// mount namespace makes everything but the workspace and the task directory
/// read-only, which does.
#[tokio::test]
async fn metadata_changes_outside_are_blocked() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let f = Fixture::new();
    let secret = f.outside.join("secret.txt");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = std::fs::metadata(&secret).unwrap();
    let s = secret.display();
    let cases = [
        ("chmod", format!("chmod 666 {s}")),
        ("chown", format!("chown 1:1 {s}")),
        ("touch -d", format!("touch -d 2001-01-01 {s}")),
        (
            "setfattr",
            format!("python3 -c \"import os; os.setxattr('{s}', 'user.x', b'1')\""),
        ),
    ];
    let mut problems = Vec::new();
    for (name, cmd) in &cases {
        let out = f.sh(cmd).await;
        if !failed(&out) {
            problems.push(format!("{name}: succeeded: {out:?}"));
        }
    }
    let after = std::fs::metadata(&secret).unwrap();
    assert_eq!(after.mode(), before.mode());
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    assert_eq!(after.mtime(), before.mtime());
    assert!(problems.is_empty(), "{problems:#?}");
    // Inside the workspace, metadata changes work.
    let out = f
        .sh("touch a && chmod 700 a && touch -d 2001-01-01 a && echo ok")
        .await;
    assert_eq!(out.stdout, "ok\n", "{out:?}");
}

#[tokio::test]
async fn reading_outside_the_allowed_directories_is_blocked() {
    let f = Fixture::new();
    let out = f
        .sh(&format!("cat {}/secret.txt", f.outside.display()))
        .await;
    assert!(failed(&out), "{out:?}");
    assert!(!out.stdout.contains("outside secret"), "{out:?}");
    let out = f.sh("ls /root").await;
    assert!(failed(&out), "{out:?}");
}

#[tokio::test]
async fn executing_a_binary_outside_is_blocked_inside_allowed() {
    let f = Fixture::new();
    std::fs::copy("/bin/true", f.outside.join("mytrue")).unwrap();
    std::fs::copy("/bin/true", f.ws.join("mytrue")).unwrap();
    // Outside the view: not found (127), not merely not allowed.
    let out = f.sh(&format!("{}/mytrue", f.outside.display())).await;
    assert_eq!(out.exit_code, Some(127), "{out:?}");
    let out = f.sh("./mytrue").await;
    assert!(out.success(), "{out:?}");
}

#[tokio::test]
async fn writes_inside_the_workspace_succeed() {
    let f = Fixture::new();
    let out = f
        .sh(
            "mkdir -p a/b && echo hello > a/b/c && mv a/b/c a/d && ln -s d a/link && \
             ln a/d a/hard && cat a/link && truncate -s 2 a/d && chmod 600 a/d && rm -r a/b && \
             echo more >> a/d && cat a/hard",
        )
        .await;
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "hello\nhemore\n");
    assert!(f.ws.join("a/d").exists());
}

#[tokio::test]
async fn reading_the_workspace_and_system_directories_works() {
    let f = Fixture::new();
    std::fs::write(f.ws.join("in.txt"), "from the workspace\n").unwrap();
    let out = f
        .sh("cat in.txt && ls /usr/bin/env && head -c 4 /etc/passwd && echo && python3 -c 'print(2+2)'")
        .await;
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "from the workspace\n/usr/bin/env\nroot\n4\n");
    // Everything the sandbox uses works on this machine: no degradation.
    assert_eq!(out.warnings, Vec::<String>::new());
}

#[tokio::test]
async fn private_tmpdir_and_home_are_writable_and_gone_afterwards() {
    let f = Fixture::new();
    let u = unique("home");
    let out = f
        .sh(&format!(
            "echo t > $TMPDIR/{u} && echo h > ~/{u} && cat $TMPDIR/{u} ~/{u} && echo $HOME && echo $TMPDIR"
        ))
        .await;
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "t\nh\n/tmp/home\n/tmp\n", "{out:?}");
    // Both lived in the task's own tmpfs: nothing of them is on the host.
    assert!(!Path::new("/tmp/home").join(&u).exists());
    assert!(!Path::new("/tmp").join(&u).exists());
    // A second task does not see the first one's files.
    let out = f.sh(&format!("ls ~/{u} $TMPDIR/{u}")).await;
    assert!(failed(&out), "{out:?}");
}

#[tokio::test]
async fn cwd_outside_the_workspace_is_refused() {
    let f = Fixture::new();
    std::os::unix::fs::symlink(&f.outside, f.ws.join("out")).unwrap();
    std::fs::create_dir(f.ws.join("sub")).unwrap();
    for cwd in [
        f.outside.clone(),
        f.ws.join(".."),
        f.ws.join("out"),
        PathBuf::from("/"),
    ] {
        let mut spec = f.spec("pwd");
        spec.cwd = cwd.clone();
        match run(spec, CancellationToken::new()).await {
            Err(SandboxError::CwdOutsideWorkspace { .. }) => {}
            other => panic!("cwd {cwd:?} was not refused: {other:?}"),
        }
    }
    let mut spec = f.spec("pwd");
    spec.cwd = PathBuf::from("sub");
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert_eq!(out.stdout.trim(), f.ws.join("sub").to_string_lossy());
}

// ---------------------------------------------------------------- network

/// A listener on loopback that counts connections.
struct Listener {
    inner: TcpListener,
    port: u16,
}

impl Listener {
    fn new() -> Listener {
        let inner = TcpListener::bind("127.0.0.1:0").unwrap();
        inner.set_nonblocking(true).unwrap();
        let port = inner.local_addr().unwrap().port();
        Listener { inner, port }
    }

    fn connections(&self) -> usize {
        let mut n = 0;
        while self.inner.accept().is_ok() {
            n += 1;
        }
        n
    }
}

#[tokio::test]
async fn network_off_blocks_every_way_to_the_listener() {
    let f = Fixture::new();
    let l = Listener::new();
    let p = l.port;
    let cases: Vec<(&str, String)> = vec![
        ("curl", format!("curl -sS -m 3 http://127.0.0.1:{p}/")),
        (
            "python socket",
            format!(
                "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1',{p}),3)\""
            ),
        ),
        (
            "python ipv6 socket",
            "python3 -c \"import socket; socket.socket(socket.AF_INET6)\"".into(),
        ),
        ("bash /dev/tcp", format!("bash -c 'echo x > /dev/tcp/127.0.0.1/{p}'")),
        (
            "raw socket",
            "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\""
                .into(),
        ),
        (
            "packet socket",
            "python3 -c \"import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\"".into(),
        ),
        (
            "netlink socket",
            "python3 -c \"import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\"".into(),
        ),
    ];
    let mut problems = Vec::new();
    for (name, cmd) in &cases {
        let out = f.sh(cmd).await;
        if !failed(&out) {
            problems.push(format!("{name}: succeeded: {out:?}"));
        }
    }
    require_tool("nc", "netcat-openbsd");
    let out = f.sh(&format!("echo x | nc -w 2 127.0.0.1 {p}")).await;
    if !failed(&out) {
        problems.push(format!("nc: succeeded: {out:?}"));
    }
    assert_eq!(l.connections(), 0, "the listener saw a connection");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[tokio::test]
async fn network_off_still_allows_unix_sockets() {
    let f = Fixture::new();
    let out = f
        .sh("python3 -c \"import socket; a,b=socket.socketpair(); a.send(b'ok'); print(b.recv(2).decode())\"")
        .await;
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "ok\n");
}

#[tokio::test]
async fn network_on_reaches_the_listener() {
    let f = Fixture::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap();
    });
    let mut spec = f.spec(&format!("curl -sS -m 10 http://127.0.0.1:{port}/"));
    spec.network = true;
    let out = run(spec, CancellationToken::new()).await.unwrap();
    server.join().unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "hello");
}

/// Fails the test, saying what to install, when a tool a case drives is
/// missing (`bash tests/run` installs them).
fn require_tool(bin: &str, package: &str) {
    let found = ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(bin).exists());
    assert!(
        found,
        "`{bin}` is not installed; this test drives it: `apt-get install -y {package}` \
         (or run `bash tests/run`, which installs it)"
    );
}

// ---------------------------------------------------------------- environment

#[tokio::test]
async fn host_secrets_never_reach_the_command() {
    let f = Fixture::new();
    let out = f.sh("env; cat /proc/self/environ | tr '\\0' '\\n'").await;
    assert!(out.success(), "{out:?}");
    for (k, v) in SECRETS {
        assert!(!out.stdout.contains(k), "{k} leaked: {}", out.stdout);
        assert!(!out.stdout.contains(v), "value of {k} leaked");
    }
    let names: Vec<&str> = out
        .stdout
        .lines()
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    for n in &names {
        assert!(
            [
                "PATH", "LANG", "LC_ALL", "TERM", "HOME", "TMPDIR", "PWD", "OLDPWD", "SHLVL", "_"
            ]
            .contains(n),
            "unexpected variable {n} in {names:?}"
        );
    }
}

#[tokio::test]
async fn host_processes_and_their_environment_are_invisible() {
    let f = Fixture::new();
    let me = std::process::id();
    let out = f
        .sh(&format!(
            "ls /proc | grep -c '^[0-9]'; cat /proc/{me}/environ 2>/dev/null | tr '\\0' '\\n'; \
             cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'"
        ))
        .await;
    let count: usize = out.stdout.lines().next().unwrap().trim().parse().unwrap();
    assert!(count < 10, "the command sees {count} processes: {out:?}");
    for (_, v) in SECRETS {
        assert!(!out.stdout.contains(v), "{out:?}");
    }
}

#[tokio::test]
async fn allowed_env_is_passed_and_stdin_is_empty() {
    let f = Fixture::new();
    let mut spec = f.spec("echo \"$PROFILE_VAR\"; cat; echo end");
    spec.env = vec![("PROFILE_VAR".into(), "allowed value".into())];
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "allowed value\nend\n");
}

// ---------------------------------------------------------------- processes

/// Commands that leave processes behind; `{m}` is a unique sleep duration.
const ESCAPES: &[(&str, &str)] = &[
    ("background job", "sleep {m} & wait"),
    ("setsid", "setsid sleep {m} & wait"),
    ("double fork", "(sleep {m} &) & sleep 1000"),
    (
        "setsid + double fork + closed pipes",
        "(setsid sh -c 'exec >/dev/null 2>&1 </dev/null; sleep {m}' &) ; sleep 1000",
    ),
    (
        "ignores SIGTERM",
        "trap '' TERM; sleep {m} & wait; sleep 1000",
    ),
    ("nohup", "nohup sleep {m} >/dev/null 2>&1 & sleep 1000"),
];

/// Host processes that are the marker's `sleep` itself (not a shell whose
/// command line merely mentions it).
fn sleeping(marker: &str) -> Vec<i32> {
    survivors(marker)
        .into_iter()
        .filter(|pid| {
            let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let argv: Vec<&[u8]> = argv.split(|b| *b == 0).collect();
            argv.len() >= 2 && argv[0].ends_with(b"sleep") && argv[1] == marker.as_bytes()
        })
        .collect()
}

/// Polls until the marker's `sleep` runs on the host. Panics after a minute:
/// without that evidence a "no survivors" check would pass without testing
/// anything.
async fn wait_for_marker(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while sleeping(marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the process with marker {marker} never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn cancel_kills_every_descendant() {
    let f = Fixture::new();
    // All cases at once: each waits for its own evidence, then cancels.
    let cases = ESCAPES.iter().map(|(name, cmd)| {
        let m = marker_sleep();
        let spec = f.spec(&cmd.replace("{m}", &m));
        async move {
            let cancel = CancellationToken::new();
            let c = cancel.clone();
            let marker = m.clone();
            let canceller = tokio::spawn(async move {
                wait_for_marker(&marker).await;
                c.cancel();
            });
            let out = run(spec, cancel).await.unwrap();
            canceller.await.unwrap();
            assert!(out.cancelled && !out.timed_out, "{name}: {out:?}");
            assert!(
                out.exit_code.is_some() || out.signal.is_some(),
                "{name}: {out:?}"
            );
            assert_no_survivors(&m);
        }
    });
    futures_join_all(cases).await;
}

#[tokio::test]
async fn timeout_kills_every_descendant() {
    let f = Fixture::new();
    let cases = ESCAPES.iter().map(|(name, cmd)| {
        let m = marker_sleep();
        let mut spec = f.spec(&cmd.replace("{m}", &m));
        // Long enough for the marker to start even at load 8; the check below
        // fails the test if it did not.
        spec.timeout = Duration::from_secs(5);
        async move {
            let marker = m.clone();
            let seen = tokio::spawn(async move { wait_for_marker(&marker).await });
            let out = run(spec, CancellationToken::new()).await.unwrap();
            assert!(out.timed_out && !out.cancelled, "{name}: {out:?}");
            seen.await
                .unwrap_or_else(|e| panic!("{name}: the marker was never seen running: {e}"));
            assert_no_survivors(&m);
        }
    });
    futures_join_all(cases).await;
}

/// Runs the futures concurrently and waits for all; a panic in one is the
/// test's panic.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for fut in futures {
        set.spawn(fut);
    }
    while let Some(r) = set.join_next().await {
        if let Err(e) = r {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

#[tokio::test]
async fn processes_left_behind_by_a_finished_command_are_killed() {
    let f = Fixture::new();
    let m = marker_sleep();
    let out = f
        .sh(&format!(
            "sleep {m} & setsid sleep {m} & (sleep {m} &) ; (setsid sh -c 'exec >/dev/null 2>&1; sleep {m}' &); echo started"
        ))
        .await;
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "started\n");
    // The left-behind sleeps last 1000 s: returning at all means they were
    // killed; the bound only has to hold on a loaded machine.
    assert!(out.duration < Duration::from_secs(60), "{out:?}");
    assert_no_survivors(&m);
}

#[tokio::test]
async fn dropping_the_run_future_kills_the_task_and_cleans_up() {
    let f = Fixture::new();
    let m = marker_sleep();
    let spec = f.spec(&format!(
        "echo $HOME > home.txt; (setsid sleep {m} &); sleep {m}"
    ));
    // The caller gives up (e.g. its own task is aborted): the future is dropped
    // once the command is seen running.
    let marker = m.clone();
    let r = tokio::select! {
        r = run(spec, CancellationToken::new()) => Some(r),
        task_dir = async move {
            wait_for_marker(&marker).await;
            task_dir_of(&marker)
        } => {
            let task_dir = task_dir.expect("the running task's directory");
            assert!(task_dir.exists());
            // Dropping the run future happens here, at the end of the select.
            let deadline = Instant::now() + Duration::from_secs(60);
            while !survivors(&m).is_empty() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_no_survivors(&m);
            // Init copied the workspace writes back after killing the task.
            let deadline = Instant::now() + Duration::from_secs(60);
            while !f.ws.join("home.txt").exists() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(std::fs::read_to_string(f.ws.join("home.txt")).unwrap(), "/tmp/home\n");
            let deadline = Instant::now() + Duration::from_secs(60);
            while task_dir.exists() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(!task_dir.exists(), "the per-task directory {task_dir:?} was not removed");
            None
        }
    };
    assert!(
        r.is_none(),
        "the command should still have been running: {r:?}"
    );
}

/// The host directory of the task running a process with `marker`: the quota
/// overlay's `upperdir=<task dir>/quota/upper`, read from that process's
/// mountinfo.
fn task_dir_of(marker: &str) -> Option<PathBuf> {
    let pid = *sleeping(marker).first()?;
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    let start = mountinfo.find("upperdir=")? + "upperdir=".len();
    let rest = &mountinfo[start..];
    let upper = &rest[..rest.find([',', ' ', '\n']).unwrap_or(rest.len())];
    Some(PathBuf::from(upper.strip_suffix("/quota/upper")?))
}

#[tokio::test]
async fn sleep_past_the_timeout_is_killed_on_time() {
    let f = Fixture::new();
    let mut spec = f.spec("sleep 30");
    spec.timeout = Duration::from_secs(1);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.signal, Some(libc::SIGTERM), "{out:?}");
    assert!(
        // Ended by the timeout, not by the 30 s sleep (margin for load 8).
        out.duration >= Duration::from_secs(1) && out.duration < Duration::from_secs(20),
        "{out:?}"
    );
}

#[tokio::test]
async fn sigterm_ignoring_command_is_killed_after_the_grace_period() {
    let f = Fixture::new();
    let mut spec = f.spec("trap '' TERM; while :; do sleep 0.05; done");
    spec.timeout = Duration::from_millis(500);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.signal, Some(libc::SIGKILL), "{out:?}");
    let grace = capstan_sandbox::KILL_GRACE;
    assert!(
        out.duration >= grace && out.duration < grace + Duration::from_secs(15),
        "{out:?}"
    );
}

#[tokio::test]
async fn fork_bomb_is_contained_and_killed() {
    let f = Fixture::new();
    let mut spec = f.spec(":(){ :|:& };:");
    spec.timeout = Duration::from_secs(3);
    spec.limits = Limits {
        max_processes: Some(64),
        ..Limits::default()
    };
    let started = Instant::now();
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(60), "{out:?}");
    // The bomb's shell either exits (fork failed) or is killed at the timeout;
    // in both cases nothing of it may remain, and the machine must still work.
    assert!(out.exit_code.is_some() || out.signal.is_some(), "{out:?}");
    let after = f.sh("echo alive").await;
    assert_eq!(after.stdout, "alive\n");
    assert_eq!(
        processes_in(&f.ws),
        Vec::<i32>::new(),
        "bomb processes survived"
    );
}

/// Host processes whose working directory is `dir`.
fn processes_in(dir: &Path) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c == dir))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

#[tokio::test]
async fn process_limit_is_enforced() {
    let f = Fixture::new();
    let mut spec =
        f.spec("i=0; while [ $i -lt 100 ]; do sleep 5 & i=$((i+1)); done; echo forked; wait");
    spec.limits.max_processes = Some(20);
    spec.timeout = Duration::from_secs(2);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    // The shell cannot fork 100 sleeps with a limit of 20.
    assert!(!out.stdout.contains("forked"), "{out:?}");
    assert!(out.stderr.to_lowercase().contains("fork"), "{out:?}");
    assert_eq!(processes_in(&f.ws), Vec::<i32>::new());
}

#[tokio::test]
async fn cpu_seconds_limit_stops_a_busy_loop() {
    let f = Fixture::new();
    let mut spec = f.spec("while :; do :; done");
    spec.limits.max_cpu_seconds = Some(1);
    // The wall-clock timeout is far away: only the CPU limit can end the loop.
    spec.timeout = Duration::from_secs(120);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(!out.timed_out, "{out:?}");
    assert!(
        matches!(out.signal, Some(libc::SIGXCPU | libc::SIGKILL)),
        "{out:?}"
    );
}

#[tokio::test]
async fn file_size_limit_stops_a_growing_file() {
    let f = Fixture::new();
    let mut spec = f.spec("head -c 3000000 /dev/zero > big; echo \"head: $?\"");
    spec.limits.max_file_size = Some(1 << 20);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    // `head` dies of SIGXFSZ (exit 128+25) with the file at the limit.
    assert!(out.stdout.contains("head: 153"), "{out:?}");
    let size = std::fs::metadata(f.ws.join("big")).unwrap().len();
    assert_eq!(size, 1 << 20, "{out:?}");
}

#[tokio::test]
async fn address_space_limit_stops_a_large_allocation() {
    let f = Fixture::new();
    // Bash keeps a command substitution's output in memory: 400 MB of it cannot
    // fit in 256 MiB of address space.
    let mut spec = f.spec("x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo \"kept ${#x}\"");
    spec.limits.max_address_space = Some(256 << 20);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(!out.stdout.contains("kept 400000000"), "{out:?}");
    assert!(
        out.exit_code != Some(0) || out.signal.is_some(),
        "the allocation failed but the command claims success: {out:?}"
    );
}

// ---------------------------------------------------------------- output

#[tokio::test]
async fn output_flood_keeps_head_and_tail() {
    let f = Fixture::new();
    let mut spec = f.spec("yes | head -c 50000000; echo THE-END");
    spec.output_limit = 64 * 1024;
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.success(), "{:?}", out.stderr);
    let total = 50_000_000 + "THE-END\n".len() as u64;
    assert_eq!(out.truncated_bytes, total - 64 * 1024);
    assert!(out.stdout.starts_with("y\ny\ny\n"));
    assert!(out.stdout.ends_with("y\nTHE-END\n"));
    assert!(
        out.stdout
            .contains(&format!("[... {} bytes dropped ...]", total - 64 * 1024))
    );
    assert!(out.stdout.len() < 64 * 1024 + 100);
}

#[tokio::test]
async fn both_streams_flood_concurrently_without_blocking() {
    let f = Fixture::new();
    let mut spec =
        f.spec("(yes err | head -c 5000000 >&2) & yes out | head -c 5000000; wait; echo done >&2");
    spec.output_limit = 1000;
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.truncated_bytes, 5_000_000 - 1000 + 5_000_005 - 1000);
    assert!(out.stdout.starts_with("out\n"));
    assert!(out.stderr.starts_with("err\n") && out.stderr.ends_with("done\n"));
}

// ---------------------------------------------------------------- syscalls

#[tokio::test]
async fn ptrace_is_denied() {
    let f = Fixture::new();
    require_tool("strace", "strace");
    let out = f.sh("strace -f true").await;
    assert!(failed(&out), "{out:?}");
    assert!(out.stderr.contains("Operation not permitted"), "{out:?}");
    let out = f
        .sh(
            "python3 -c \"import ctypes,os; l=ctypes.CDLL(None,use_errno=True); \
             r=l.ptrace(0,0,0,0); print(r, os.strerror(ctypes.get_errno()))\"",
        )
        .await;
    assert_eq!(out.stdout.trim(), "-1 Operation not permitted", "{out:?}");
}

/// (name, syscall number on x86_64, arguments): each must fail with EPERM.
#[cfg(target_arch = "x86_64")]
const DENIED_SYSCALLS: &[(&str, i64, &str)] = &[
    ("process_vm_readv", 310, "1,0,0,0,0,0"),
    ("io_uring_setup", 425, "8,0"),
    ("keyctl", 250, "0,0,0,0,0"),
    ("add_key", 248, "0,0,0,0,0"),
    ("bpf", 321, "0,0,0"),
    ("perf_event_open", 298, "0,0,0,0,0"),
    ("unshare(CLONE_NEWUSER)", 272, "0x10000000"),
    ("unshare(CLONE_NEWNET)", 272, "0x40000000"),
    ("setns", 308, "0,0"),
    ("mount", 165, "0,0,0,0,0"),
    ("umount2", 166, "0,0"),
    ("pivot_root", 155, "0,0"),
    ("userfaultfd", 323, "0"),
    ("init_module", 175, "0,0,0"),
    ("finit_module", 313, "0,0,0"),
    ("kexec_load", 246, "0,0,0,0"),
    ("reboot", 169, "0,0,0,0"),
    ("swapon", 167, "0,0"),
    ("clone(CLONE_NEWUSER)", 56, "0x10000000|17,0,0,0,0"),
    ("chroot", 161, "b'/'"),
];

#[cfg(target_arch = "x86_64")]
#[tokio::test]
async fn dangerous_syscalls_fail_with_eperm() {
    let f = Fixture::new();
    let mut script = String::from(
        "import ctypes, errno\nl = ctypes.CDLL(None, use_errno=True)\nl.syscall.restype = ctypes.c_long\n",
    );
    for (name, nr, args) in DENIED_SYSCALLS {
        script.push_str(&format!(
            "ctypes.set_errno(0); r = l.syscall({nr}, {args}); print('{name}', r, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))\n"
        ));
    }
    std::fs::write(f.ws.join("probe.py"), script).unwrap();
    let out = f.sh("python3 probe.py").await;
    assert!(out.success(), "{out:?}");
    let mut problems = Vec::new();
    for ((name, _, _), line) in DENIED_SYSCALLS.iter().zip(out.stdout.lines()) {
        if !line.ends_with(" -1 EPERM") {
            problems.push(format!("{name}: {line}"));
        }
    }
    assert_eq!(out.stdout.lines().count(), DENIED_SYSCALLS.len(), "{out:?}");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[tokio::test]
async fn unshare_and_namespace_tools_fail() {
    let f = Fixture::new();
    let out = f.sh("unshare -r true").await;
    assert!(failed(&out), "{out:?}");
    assert!(out.stderr.contains("Operation not permitted"), "{out:?}");
}

#[tokio::test]
async fn threads_still_work_under_the_clone3_fallback() {
    let f = Fixture::new();
    let out = f
        .sh("python3 -c \"import threading; t=threading.Thread(target=print, args=('thread',)); t.start(); t.join()\"")
        .await;
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "thread\n");
}

#[tokio::test]
async fn signals_cannot_reach_processes_outside() {
    let f = Fixture::new();
    // PID 1 in the namespace is our supervisor, outside the Landlock domain.
    let out = f.sh("kill -TERM 1").await;
    assert!(failed(&out), "{out:?}");
    assert!(
        out.stderr.contains("ermitted") || out.stderr.contains("ermission"),
        "{out:?}"
    );
}

// ---------------------------------------------------------------- status

#[tokio::test]
async fn exit_codes_and_signals_are_reported() {
    let f = Fixture::new();
    let cases: &[(&str, Option<i32>, Option<i32>)] = &[
        ("true", Some(0), None),
        ("exit 3", Some(3), None),
        ("exit 255", Some(255), None),
        ("kill -9 $$", None, Some(libc::SIGKILL)),
        ("kill -TERM $$", None, Some(libc::SIGTERM)),
        ("kill -SEGV $$", None, Some(libc::SIGSEGV)),
        ("exec sh -c 'kill -INT $$'", None, Some(libc::SIGINT)),
    ];
    for (cmd, code, signal) in cases {
        let out = f.sh(cmd).await;
        assert_eq!(
            (out.exit_code, out.signal),
            (*code, *signal),
            "{cmd}: {out:?}"
        );
    }
}

#[tokio::test]
async fn argv_commands_are_not_interpreted_by_a_shell() {
    let f = Fixture::new();
    let mut spec = f.spec("");
    spec.command = Command::Argv(vec!["echo".into(), "$HOME; rm -rf /".into()]);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert_eq!(out.stdout, "$HOME; rm -rf /\n");

    let mut spec = f.spec("");
    spec.command = Command::Argv(vec!["no-such-program-xyz".into()]);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert_eq!(out.exit_code, Some(127), "{out:?}");
    assert!(out.stderr.contains("command not found"), "{out:?}");

    // No practical timeout: Duration::MAX must not overflow.
    let mut spec = f.spec("");
    spec.command = Command::Argv(vec!["true".into()]);
    spec.timeout = Duration::MAX;
    assert!(run(spec, CancellationToken::new()).await.unwrap().success());

    let mut spec = f.spec("");
    spec.command = Command::Argv(vec![]);
    assert!(matches!(
        run(spec, CancellationToken::new()).await,
        Err(SandboxError::InvalidCommand(_))
    ));
}

// ---------------------------------------------------------------- modes

#[tokio::test]
async fn sandbox_off_runs_unconfined_but_scrubbed_and_supervised() {
    let f = Fixture::new();
    let m = marker_sleep();
    let target = f.outside.join(unique("off"));
    let mut spec = f.spec(&format!(
        "echo x > {} && env && (setsid sleep {m} &) ; echo done",
        target.display()
    ));
    spec.mode = SandboxMode::Off;
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.success(), "{out:?}");
    assert!(target.exists(), "Off mode should not confine writes");
    for (k, _) in SECRETS {
        assert!(!out.stdout.contains(k), "{k} leaked in Off mode");
    }
    assert_no_survivors(&m);

    // And cancellation in Off mode still kills an escaped process.
    let m = marker_sleep();
    let mut spec = f.spec(&format!("(setsid sleep {m} &) ; sleep 1000"));
    spec.mode = SandboxMode::Off;
    spec.timeout = Duration::from_millis(500);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    assert_no_survivors(&m);
}

#[tokio::test]
async fn check_reports_a_working_sandbox_here() {
    setup();
    let report = capstan_sandbox::check();
    let text = report.to_string();
    assert!(report.sandbox_available(), "{text}");
    assert!(
        text.contains("Landlock") && text.contains("lifecycle"),
        "{text}"
    );
}

// ---------------------------------------------------------------- view and identity

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// (what, command): each must fail and print nothing of the file.
const UNREADABLE: &[(&str, &str)] = &[
    ("/etc/shadow", "cat /etc/shadow"),
    ("/etc/gshadow", "cat /etc/gshadow"),
    ("/etc/sudoers", "cat /etc/sudoers"),
    ("/etc/ssh host keys", "cat /etc/ssh/ssh_host_*_key"),
    ("/etc/ssl/private", "ls /etc/ssl/private"),
    ("/root", "ls -a /root"),
    ("/home", "ls -a /home"),
    ("/run", "ls -a /run"),
    ("/var/run", "ls -a /var/run"),
    ("/var/lib", "ls -a /var/lib"),
    ("/srv", "ls -a /srv"),
    ("/sys", "ls /sys/class"),
    ("/proc of the host", "cat /proc/1/cmdline; ls /proc/1/root/"),
];

#[tokio::test]
async fn root_only_files_and_other_homes_are_not_readable() {
    let f = Fixture::new();
    let mut problems = Vec::new();
    for (what, cmd) in UNREADABLE {
        let out = f.sh(cmd).await;
        // `cat /proc/1/cmdline` is the namespace's own init: allowed to exist,
        // but its root must not lead to the host.
        let leaked = out
            .stdout
            .lines()
            .any(|l| l.contains("root:") || l.contains("PRIVATE KEY"));
        if (!failed(&out) && *what != "/proc of the host") || leaked {
            problems.push(format!("{what}: {out:?}"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[tokio::test]
async fn the_command_never_runs_as_root() {
    let f = Fixture::new();
    let out = f
        .sh("id -u; id -g; id -G; grep CapEff /proc/self/status; touch owned && stat -c %u owned")
        .await;
    assert!(out.success(), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    // SAFETY: getuid has no preconditions.
    let (uid, gid) = if is_root() {
        (capstan_sandbox::SANDBOX_UID, capstan_sandbox::SANDBOX_GID)
    } else {
        unsafe { (libc::getuid(), libc::getgid()) }
    };
    assert_eq!(lines[0], uid.to_string(), "{out:?}");
    assert_eq!(lines[1], gid.to_string(), "{out:?}");
    assert_eq!(
        lines[2],
        gid.to_string(),
        "no supplementary groups: {out:?}"
    );
    assert_eq!(
        lines[3].split_whitespace().nth(1),
        Some("0000000000000000"),
        "{out:?}"
    );
    // Inside, the file is the command's; on the host, it belongs to the user
    // who runs Capstan (the id-mapped workspace stores root's id for root).
    assert_eq!(lines[4], uid.to_string(), "{out:?}");
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    assert_eq!(std::fs::metadata(f.ws.join("owned")).unwrap().uid(), me);
}

/// A file only its owner (the user running Capstan) may read, outside the
/// workspace but inside a read path: the identity alone keeps it unreadable
/// when Capstan runs as root. (As a regular user, the command is that user.)
#[tokio::test]
async fn owner_only_files_of_root_stay_unreadable_in_read_paths() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    let secret = f.outside.join("root-only.txt");
    std::fs::write(&secret, "root only\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(f.outside.join("public.txt"), "public\n").unwrap();
    let mut spec = f.spec(&format!(
        "cat {0}/public.txt; cat {0}/root-only.txt",
        f.outside.display()
    ));
    spec.read = vec![f.outside.clone()];
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.stdout.starts_with("public\n"), "{out:?}");
    if is_root() {
        assert!(failed(&out), "{out:?}");
        assert!(!out.stdout.contains("root only"), "{out:?}");
        assert!(out.stderr.contains("Permission denied"), "{out:?}");
    }
}

#[tokio::test]
async fn read_paths_are_visible_read_only_and_nothing_beside_them() {
    let f = Fixture::new();
    let data = f.outside.join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("table.csv"), "a,b\n").unwrap();
    let mut spec = f.spec(&format!(
        "cat {0}/table.csv && ! echo x > {0}/new.txt && ! rm {0}/table.csv && \
         ! ls {1}/secret.txt && echo ok",
        data.display(),
        f.outside.display()
    ));
    spec.read = vec![data.clone()];
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert_eq!(out.stdout, "a,b\nok\n", "{out:?}");
    assert!(!data.join("new.txt").exists());
    assert!(data.join("table.csv").exists());

    // A read path that does not exist, a relative one and `/` are refused.
    for bad in ["/no/such/dir", "relative/dir", "/"] {
        let mut spec = f.spec("true");
        spec.read = vec![PathBuf::from(bad)];
        match run(spec, CancellationToken::new()).await {
            Err(SandboxError::ReadPath { .. }) => {}
            other => panic!("read path {bad} was not refused: {other:?}"),
        }
    }
}

/// A stream and a datagram Unix socket that the test listens on under the
/// host's /tmp and /run: the command cannot name them.
#[tokio::test]
async fn host_unix_sockets_are_unreachable() {
    use std::os::unix::net::{UnixDatagram, UnixListener};
    let f = Fixture::new();
    let mut dirs = vec![tempfile::tempdir_in("/tmp").unwrap()];
    std::fs::create_dir_all("/run").unwrap();
    dirs.push(tempfile::tempdir_in("/run").unwrap());
    let mut problems = Vec::new();
    for dir in &dirs {
        let stream_path = dir.path().join("s.sock");
        let dgram_path = dir.path().join("d.sock");
        let listener = UnixListener::bind(&stream_path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let dgram = UnixDatagram::bind(&dgram_path).unwrap();
        dgram.set_nonblocking(true).unwrap();
        // Open to everyone on the host, so only the sandbox can stop it.
        for p in [&stream_path, &dgram_path, &dir.path().to_path_buf()] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let cases = [
            (
                "connect",
                format!(
                    "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}'); s.send(b'hi')\"",
                    stream_path.display()
                ),
            ),
            (
                "sendto",
                format!(
                    "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b'hi', '{}')\"",
                    dgram_path.display()
                ),
            ),
        ];
        for (what, cmd) in &cases {
            let out = f.sh(cmd).await;
            if !failed(&out) {
                problems.push(format!("{what} {}: {out:?}", dir.path().display()));
            }
        }
        assert!(
            listener.accept().is_err(),
            "the stream listener saw a connection"
        );
        let mut buf = [0u8; 16];
        assert!(
            dgram.recv(&mut buf).is_err(),
            "the datagram socket got a message"
        );
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

// ---------------------------------------------------------------- limits

#[tokio::test]
async fn a_4_gib_allocation_fails_with_a_memory_limit_and_the_host_stays_responsive() {
    let f = Fixture::new();
    // Default limits: 2 GiB of memory.
    let out = f
        .sh("python3 -c \"b = b'x' * (4 << 30); print(len(b))\"")
        .await;
    assert!(failed(&out), "{out:?}");
    if !capstan_sandbox::check().cgroup_memory {
        // No memory cgroup (not root, no delegation): RLIMIT_AS stops the
        // allocation, which the kernel does not report as a limit.
        assert!(!is_root(), "root must get a memory cgroup here");
        assert!(out.stderr.contains("MemoryError"), "{out:?}");
        return;
    }
    assert_eq!(
        out.limit_hit,
        Some(LimitHit::Memory {
            limit_bytes: capstan_sandbox::DEFAULT_MEMORY
        }),
        "{out:?}"
    );
    assert!(!out.stdout.contains("4294967296"), "{out:?}");
    // The host (this process, and the next command) carries on.
    let after = f.sh("echo alive").await;
    assert_eq!(after.stdout, "alive\n");
    assert_eq!(after.limit_hit, None);
}

#[tokio::test]
async fn a_full_private_tmp_is_reported_as_a_limit() {
    let f = Fixture::new();
    let mut spec = f.spec("head -c 20000000 /dev/zero > /tmp/big");
    spec.limits.tmp_size = 8 << 20;
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(failed(&out), "{out:?}");
    assert!(out.stderr.contains("No space left"), "{out:?}");
    assert_eq!(
        out.limit_hit,
        Some(LimitHit::Tmp {
            limit_bytes: 8 << 20
        }),
        "{out:?}"
    );
}

/// The cgroup directories of this process's cgroups whose names start with
/// `prefix` (v1: every hierarchy; v2: the unified one).
fn cgroups_named(prefix: &str) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mut found = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fstype = right.split(' ').next().unwrap_or("");
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        let mount_point = PathBuf::from(left.split(' ').nth(4).unwrap());
        let opts = right.split(' ').nth(2).unwrap_or("");
        for entry in own.lines() {
            let mut parts = entry.splitn(3, ':');
            let (_, controllers, path) =
                (parts.next(), parts.next().unwrap(), parts.next().unwrap());
            let matches = if fstype == "cgroup2" {
                controllers.is_empty()
            } else {
                !controllers.is_empty()
                    && controllers
                        .split(',')
                        .all(|c| opts.split(',').any(|o| o == c))
            };
            if !matches {
                continue;
            }
            let dir = mount_point.join(path.trim_start_matches('/'));
            if let Ok(rd) = std::fs::read_dir(&dir) {
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().starts_with(prefix) {
                        found.push(e.path());
                    }
                }
            }
        }
    }
    found
}

/// Names of the task cgroups listed in a `/proc/self/cgroup` text.
fn task_cgroup_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .filter(|n| n.starts_with("capstan-sandbox-"))
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[tokio::test]
async fn task_cgroups_are_removed_when_the_task_ends() {
    let f = Fixture::new();
    let report = capstan_sandbox::check();
    if !(report.cgroup_memory || report.cgroup_pids) {
        // No task cgroups on this machine (not root, no delegated subtree):
        // nothing can be left behind; the rlimit fallback is tested elsewhere.
        assert!(!is_root(), "root must get task cgroups here: {report}");
        return;
    }
    // A task that ends by itself.
    let out = f.sh("cat /proc/self/cgroup").await;
    let finished = task_cgroup_names(&out.stdout);
    assert!(
        !finished.is_empty(),
        "the task ran in no task cgroup: {out:?}"
    );
    // A cancelled task.
    let m = marker_sleep();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let marker = m.clone();
    tokio::spawn(async move {
        wait_for_marker(&marker).await;
        c.cancel();
    });
    let out = run(
        f.spec(&format!("cat /proc/self/cgroup > cg.txt; sleep {m}")),
        cancel,
    )
    .await
    .unwrap();
    assert!(out.cancelled, "{out:?}");
    let cancelled = task_cgroup_names(&std::fs::read_to_string(f.ws.join("cg.txt")).unwrap());
    assert!(!cancelled.is_empty());
    for name in finished.iter().chain(&cancelled) {
        assert_eq!(
            cgroups_named(name),
            Vec::<PathBuf>::new(),
            "{name} was left behind"
        );
    }
}

#[tokio::test]
async fn a_workspace_write_past_the_quota_fails_with_resource_limit() {
    let f = Fixture::new();
    let mut spec = f.spec("head -c 20000000 /dev/zero > big; echo more > small");
    spec.limits.workspace_write_quota = Some(8 << 20);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.stderr.contains("No space left"), "{out:?}");
    assert_eq!(
        out.limit_hit,
        Some(LimitHit::WorkspaceQuota {
            limit_bytes: 8 << 20
        }),
        "{out:?}"
    );
    // What was written before the limit reached the workspace, and no more.
    let big = std::fs::metadata(f.ws.join("big")).unwrap().len();
    assert!(big > 0 && big <= 8 << 20, "{big}");
    // Under the quota, nothing is reported.
    let out = f.sh("head -c 1000000 /dev/zero > ok.bin").await;
    assert!(out.success() && out.limit_hit.is_none(), "{out:?}");
    assert_eq!(
        std::fs::metadata(f.ws.join("ok.bin")).unwrap().len(),
        1_000_000
    );
}

/// Every kind of change made through the quota overlay reaches the workspace
/// when the task ends, and nothing else does.
#[tokio::test]
async fn the_quota_overlay_copies_every_change_back() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    let ws = &f.ws;
    std::fs::write(ws.join("edit.txt"), "old\n").unwrap();
    std::fs::write(ws.join("del.txt"), "bye\n").unwrap();
    std::fs::create_dir_all(ws.join("tree/x")).unwrap();
    std::fs::write(ws.join("tree/x/y"), "y\n").unwrap();
    std::fs::create_dir_all(ws.join("moved")).unwrap();
    std::fs::write(ws.join("moved/m"), "m\n").unwrap();
    std::fs::write(ws.join("file-to-dir"), "f\n").unwrap();
    std::os::unix::fs::symlink(&f.outside, ws.join("evil")).unwrap();
    let out = f
        .sh(
            "echo new >> edit.txt && rm del.txt && rm -rf tree && mkdir -p tree && \
             echo fresh > tree/only && mkdir -p new/deep && echo n > new/deep/n.txt && \
             mv moved renamed && rm file-to-dir && mkdir file-to-dir && \
             ln -s edit.txt link && cp /bin/true suid && chmod 4755 suid && \
             rm evil && mkdir evil && echo inside > evil/f && chmod 600 edit.txt && echo ok",
        )
        .await;
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    assert_eq!(out.warnings, Vec::<String>::new());
    let read = |p: &str| std::fs::read_to_string(ws.join(p)).unwrap();
    assert_eq!(read("edit.txt"), "old\nnew\n");
    assert_eq!(
        std::fs::metadata(ws.join("edit.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert!(!ws.join("del.txt").exists());
    assert!(
        !ws.join("tree/x").exists(),
        "the opaque directory kept old entries"
    );
    assert_eq!(read("tree/only"), "fresh\n");
    assert_eq!(read("new/deep/n.txt"), "n\n");
    assert!(!ws.join("moved").exists());
    assert_eq!(read("renamed/m"), "m\n");
    assert!(ws.join("file-to-dir").is_dir());
    assert_eq!(
        std::fs::read_link(ws.join("link")).unwrap(),
        PathBuf::from("edit.txt")
    );
    // No setuid file is ever recreated on the host.
    assert_eq!(
        std::fs::metadata(ws.join("suid"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o755
    );
    // The symlink was replaced by a directory; nothing went through it.
    assert!(std::fs::symlink_metadata(ws.join("evil")).unwrap().is_dir());
    assert_eq!(read("evil/f"), "inside\n");
    assert!(!f.outside.join("f").exists());
    // No temporary names are left behind.
    let names: Vec<String> = std::fs::read_dir(ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with(".capstan-copy")),
        "{names:?}"
    );
}

/// A sparse file costs the quota only its data, and reaches the host's disk
/// as sparse: the quota cannot be outgrown through holes.
#[tokio::test]
async fn sparse_files_stay_sparse_through_the_quota() {
    use std::os::unix::fs::MetadataExt;
    let f = Fixture::new();
    let mut spec = f.spec("truncate -s 3G sparse && printf end >> sparse && echo ok");
    spec.limits.workspace_write_quota = Some(8 << 20);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    let meta = std::fs::metadata(f.ws.join("sparse")).unwrap();
    assert_eq!(meta.len(), (3 << 30) + 3);
    assert!(
        meta.blocks() * 512 < 1 << 20,
        "{} bytes on disk",
        meta.blocks() * 512
    );
}

/// Many empty files are bounded by the quota too (one inode per KiB).
#[tokio::test]
async fn a_flood_of_empty_files_hits_the_quota() {
    let f = Fixture::new();
    let mut spec = f.spec("mkdir d && cd d && for i in $(seq 1 5000); do : > f$i || exit 1; done");
    spec.limits.workspace_write_quota = Some(1 << 20);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(failed(&out), "{out:?}");
    assert!(out.stderr.contains("No space left"), "{out:?}");
    assert_eq!(
        out.limit_hit,
        Some(LimitHit::WorkspaceQuota {
            limit_bytes: 1 << 20
        }),
        "{out:?}"
    );
    let made = std::fs::read_dir(f.ws.join("d")).unwrap().count();
    assert!(made < 1100, "{made} files reached the workspace");
}

/// A read-only workspace (what a command judged read-only gets) refuses every
/// way of changing it, while reading, `/tmp` and the exit status still work;
/// with capture asked as well, nothing is staged.
#[tokio::test]
async fn a_read_only_workspace_refuses_every_write() {
    let f = Fixture::new();
    std::fs::create_dir(f.ws.join("src")).unwrap();
    std::fs::write(f.ws.join("src/keep.txt"), "kept\n").unwrap();
    std::os::unix::fs::symlink("keep.txt", f.ws.join("src/link")).unwrap();
    let before = tree(&f.ws);
    let attempts = [
        "echo x > new.txt",
        "echo x >> src/keep.txt",
        "rm src/keep.txt",
        "rm -rf src",
        "mv src/keep.txt src/moved.txt",
        "chmod 000 src/keep.txt",
        "mkdir made",
        "ln -s /etc/passwd src/pw",
        "touch -d 2000-01-01 src/keep.txt",
        "truncate -s 0 src/keep.txt",
        "echo x > src/link",
        "python3 -c \"open('py.txt','w').write('x')\"",
        "mkfifo fifo",
        "cd src && echo x > ../up.txt",
    ];
    for cmd in attempts {
        let mut spec = f.spec(cmd);
        spec.workspace_read_only = true;
        let capture = tempfile::tempdir().unwrap();
        spec.capture = Some(capture.path().to_path_buf());
        let out = run(spec, CancellationToken::new()).await.unwrap();
        assert!(failed(&out), "{cmd}: {out:?}");
        assert!(out.changes.is_none(), "{cmd}: {:?}", out.changes);
        assert_eq!(tree(&f.ws), before, "{cmd} changed the workspace");
        assert_eq!(
            std::fs::read_dir(capture.path()).unwrap().count(),
            0,
            "{cmd} staged something"
        );
    }
    let mut spec = f.spec("cat src/keep.txt && ls src && echo t > /tmp/t && cat /tmp/t");
    spec.workspace_read_only = true;
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "kept\nkeep.txt\nlink\nt\n");
}

/// Every entry under `dir`: path, type, mode, size, mtime and content.
fn tree(dir: &Path) -> Vec<(String, u32, u64, i64, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let content = if m.is_file() {
                std::fs::read(&p).unwrap()
            } else if m.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                stack.push(p.clone());
                Vec::new()
            };
            out.push((
                p.strip_prefix(dir).unwrap().to_string_lossy().into_owned(),
                m.mode(),
                m.len(),
                m.mtime(),
                content,
            ));
        }
    }
    out.sort();
    out
}
