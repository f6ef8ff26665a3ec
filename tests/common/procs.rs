//! Processes as /proc shows them, so lifecycle tests wait for evidence (the command
//! seen running, then seen gone) instead of sleeping a fixed time and hoping.

use std::time::{Duration, Instant};

/// Every process's pid and argv.
fn processes() -> Vec<(u32, Vec<String>)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let argv = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Some((pid, argv))
        })
        .collect()
}

/// Processes whose argv is exactly `argv` (`["sleep", "614.159"]` is the sleep
/// itself, not the shell or the host that mention it).
pub fn with_argv(argv: &[&str]) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|(_, a)| a.iter().map(String::as_str).eq(argv.iter().copied()))
        .map(|(pid, _)| pid)
        .collect()
}

/// Processes whose command line mentions `text` anywhere (a command, the shell that
/// runs it, a sandbox launcher carrying it). Zombies have an empty command line and
/// do not count: they are dead.
pub fn mentioning(text: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|(_, a)| a.join(" ").contains(text))
        .map(|(pid, _)| pid)
        .collect()
}

/// Polls `done` every 50 ms for up to `bound`, then fails naming `what`. The bound is
/// not the behaviour under test: it only keeps a broken build from hanging the suite,
/// so it is generous, and anything the test waits out (a `sleep` that would end by
/// itself) must last well beyond it.
pub fn wait_until(what: &str, bound: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + bound;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "gave up after {bound:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
