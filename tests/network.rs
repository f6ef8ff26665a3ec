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
