//! "Fails closed if Landlock or seccomp is missing", for real: the launcher is
//! told through `CAPSTAN_SANDBOX_UNAVAILABLE` (a hook that can only narrow) to
//! treat a mechanism as missing, and a required sandbox must refuse to start
//! the command, while `SandboxMode::Off` still runs. One test in its own binary,
//! because the hook is this process's environment.
//!
//! Run: `cargo test -p capstan-sandbox --test fail_closed`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use capstan_sandbox::{
    Command, ExecSpec, SandboxError, SandboxMode, UNAVAILABLE_ENV, check, run, set_launcher,
};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_required_sandbox_refuses_to_run_without_landlock_or_seccomp() {
    set_launcher(env!("CARGO_BIN_EXE_capstan-sandbox-launcher"));
    let ws = tempfile::tempdir().unwrap();
    let spec = |mode| {
        let mut s = ExecSpec::new(Command::Shell("touch ran".into()), ws.path());
        s.mode = mode;
        s.timeout = Duration::from_secs(60);
        s
    };
    // Baseline: this machine has both, and the command runs.
    let out = run(spec(SandboxMode::Required), CancellationToken::new())
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    std::fs::remove_file(ws.path().join("ran")).unwrap();

    for (missing, says) in [
        ("landlock", "Landlock"),
        ("seccomp", "seccomp"),
        ("landlock,seccomp", "Landlock"),
    ] {
        // SAFETY: the only test in this binary; no other thread reads the
        // environment while it changes.
        unsafe { std::env::set_var(UNAVAILABLE_ENV, missing) };
        match run(spec(SandboxMode::Required), CancellationToken::new()).await {
            Err(e @ SandboxError::Unsupported { .. }) => {
                let text = e.to_string();
                assert!(text.contains(says), "{missing}: {text}");
                assert!(text.contains("sandbox = \"off\""), "{missing}: {text}");
            }
            other => panic!("{missing} missing, but the run was not refused: {other:?}"),
        }
        assert!(
            !ws.path().join("ran").exists(),
            "{missing} missing: the command ran"
        );
        let report = check();
        assert!(!report.sandbox_available(), "{missing}: {report}");
        assert!(report.to_string().contains("UNAVAILABLE"), "{report}");
        // The explicit opt-out still runs (the hook narrows only the required
        // sandbox).
        let out = run(spec(SandboxMode::Off), CancellationToken::new())
            .await
            .unwrap();
        assert!(out.success(), "{missing}: {out:?}");
        std::fs::remove_file(ws.path().join("ran")).unwrap();
    }
    // SAFETY: as above.
    unsafe { std::env::remove_var(UNAVAILABLE_ENV) };
    // Unknown names widen nothing: the sandbox is back, and still confines.
    // SAFETY: as above.
    unsafe { std::env::set_var(UNAVAILABLE_ENV, "everything,none") };
    let mut s = spec(SandboxMode::Required);
    s.command = Command::Shell("cat /etc/shadow".into());
    let out = run(s, CancellationToken::new()).await.unwrap();
    assert!(!out.success(), "{out:?}");
}
