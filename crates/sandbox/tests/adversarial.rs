//! Adversarial tests of the exec sandbox: real processes, real Landlock, seccomp
//! and namespaces. Every case asserts what happened, and for escapes also checks
//! the host side (the file outside was not created, the listener saw no
//! connection, no process survived).
//!
//! Run: `cargo test -p capstan-sandbox --test adversarial`

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use capstan_sandbox::{
    Command, ExecOutcome, ExecSpec, Limits, SandboxError, SandboxMode, run, set_launcher,
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

/// Writes that must fail; `target` must not exist afterwards. `{ws}`,
/// `{outside}` and `{u}` (a unique name) are substituted.
const BLOCKED_WRITES: &[(&str, &str, &str)] = &[
    ("absolute path in /etc", "echo x > /etc/{u}", "/etc/{u}"),
    ("parent directory", "echo x > ../{u}", "{ws}/../{u}"),
    (
        "sibling directory",
        "echo x > {outside}/{u}",
        "{outside}/{u}",
    ),
    ("real /tmp", "echo x > /tmp/{u}", "/tmp/{u}"),
    ("/var/tmp", "echo x > /var/tmp/{u}", "/var/tmp/{u}"),
    ("/dev/shm", "echo x > /dev/shm/{u}", "/dev/shm/{u}"),
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
        if !failed(&out) {
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
    let out = f
        .sh(&format!(
            "rm -f {0}/secret.txt; rm -rf {0}",
            f.outside.display()
        ))
        .await;
    assert!(failed(&out), "{out:?}");
    assert!(f.outside.join("secret.txt").exists());
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
    let out = f.sh(&format!("{}/mytrue", f.outside.display())).await;
    assert_eq!(out.exit_code, Some(126), "{out:?}");
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
async fn private_tmpdir_and_home_are_writable_and_removed_afterwards() {
    let f = Fixture::new();
    let out = f
        .sh("echo t > $TMPDIR/t && echo h > ~/h && cat $TMPDIR/t ~/h && echo $HOME && echo $TMPDIR")
        .await;
    assert!(out.success(), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(&lines[..2], ["t", "h"]);
    let (home, tmp) = (Path::new(lines[2]), Path::new(lines[3]));
    assert!(home.to_string_lossy().contains("capstan-task-"), "{home:?}");
    assert_ne!(home, Path::new("/root"));
    assert!(tmp.starts_with(home.parent().unwrap()));
    assert!(!home.exists(), "the per-task directory was not removed");
    assert!(!tmp.exists());
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
    if which("nc") {
        let out = f.sh(&format!("echo x | nc -w 2 127.0.0.1 {p}")).await;
        if !failed(&out) {
            problems.push(format!("nc: succeeded: {out:?}"));
        }
    } else {
        eprintln!("nc is not installed: that case is skipped");
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

fn which(bin: &str) -> bool {
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(bin).exists())
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

#[tokio::test]
async fn cancel_kills_every_descendant() {
    let f = Fixture::new();
    for (name, cmd) in ESCAPES {
        let m = marker_sleep();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            c.cancel();
        });
        let out = run(f.spec(&cmd.replace("{m}", &m)), cancel).await.unwrap();
        assert!(out.cancelled && !out.timed_out, "{name}: {out:?}");
        assert!(
            out.exit_code.is_some() || out.signal.is_some(),
            "{name}: {out:?}"
        );
        assert!(out.duration < Duration::from_secs(8), "{name}: {out:?}");
        assert_no_survivors(&m);
    }
}

#[tokio::test]
async fn timeout_kills_every_descendant() {
    let f = Fixture::new();
    for (name, cmd) in ESCAPES {
        let m = marker_sleep();
        let mut spec = f.spec(&cmd.replace("{m}", &m));
        spec.timeout = Duration::from_millis(700);
        let out = run(spec, CancellationToken::new()).await.unwrap();
        assert!(out.timed_out && !out.cancelled, "{name}: {out:?}");
        assert_no_survivors(&m);
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
    assert!(out.duration < Duration::from_secs(5), "{out:?}");
    assert_no_survivors(&m);
}

#[tokio::test]
async fn dropping_the_run_future_kills_the_task_and_cleans_up() {
    let f = Fixture::new();
    let m = marker_sleep();
    let spec = f.spec(&format!(
        "echo $HOME > home.txt; (setsid sleep {m} &); sleep {m}"
    ));
    // The caller gives up (e.g. its own task is aborted): the future is dropped.
    let r = tokio::time::timeout(
        Duration::from_millis(700),
        run(spec, CancellationToken::new()),
    )
    .await;
    assert!(r.is_err(), "the command should still be running: {r:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !survivors(&m).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_no_survivors(&m);
    let home = PathBuf::from(
        std::fs::read_to_string(f.ws.join("home.txt"))
            .unwrap()
            .trim(),
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while home.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !home.exists(),
        "the per-task directory {home:?} was not removed"
    );
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
        out.duration >= Duration::from_secs(1) && out.duration < Duration::from_millis(2500),
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
        out.duration >= grace && out.duration < grace + Duration::from_secs(3),
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
    assert!(started.elapsed() < Duration::from_secs(10), "{out:?}");
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
    if which("strace") {
        let out = f.sh("strace -f true").await;
        assert!(failed(&out), "{out:?}");
        assert!(out.stderr.contains("Operation not permitted"), "{out:?}");
    }
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
