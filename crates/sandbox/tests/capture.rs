//! Capture: real sandboxed commands whose writes are staged (not landed),
//! classified into a change set, landed atomically by the change store, and
//! undone byte for byte.
//!
//! Run: `cargo test --release -p capstan-sandbox --test capture`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use capstan_changes::{ChangeSetState, Conflicts, Origin, Retention, Store};
use capstan_sandbox::changes::{ChangeKind, ChangeSet};
use capstan_sandbox::{Command, ExecOutcome, ExecSpec, LimitHit, run, set_launcher};
use tokio_util::sync::CancellationToken;

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| set_launcher(env!("CARGO_BIN_EXE_capstan-sandbox-launcher")));
}

struct Fixture {
    _root: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    store: Store,
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
        let (store, rec) = Store::open(base.join("data/changes"), Retention::default()).unwrap();
        assert!(rec.finished.is_empty() && rec.errors.is_empty());
        Fixture {
            _root: root,
            ws,
            outside,
            store,
        }
    }

    /// Runs `cmd` with capture on; returns the outcome and the staged id.
    async fn capture(&self, cmd: &str) -> (ExecOutcome, String) {
        let (id, staging) = self.store.new_staging().unwrap();
        let mut spec = ExecSpec::new(Command::Shell(cmd.into()), &self.ws);
        spec.timeout = Duration::from_secs(60);
        spec.capture = Some(staging);
        let out = run(spec, CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("run({cmd:?}) failed: {e}"));
        (out, id)
    }
}

/// Every entry under `dir`: path -> (kind, mode, content hash or link target).
fn tree(dir: &Path) -> BTreeMap<String, (char, u32, String)> {
    fn walk(base: &Path, at: &Path, out: &mut BTreeMap<String, (char, u32, String)>) {
        let mut names: Vec<_> = std::fs::read_dir(at)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mode = m.permissions().mode() & 0o777;
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(rel, ('l', 0, t.to_string_lossy().into_owned()));
            } else if m.is_dir() {
                out.insert(rel, ('d', mode, String::new()));
                walk(base, &p, out);
            } else {
                let h = capstan_changes::hash_file(&p).unwrap();
                out.insert(rel, ('f', mode, h));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn kinds(set: &ChangeSet) -> BTreeMap<String, ChangeKind> {
    set.changes
        .iter()
        .map(|c| (c.path.clone(), c.kind))
        .collect()
}

/// The same mix of changes the quota overlay test replays, captured: the
/// workspace stays untouched until landing, the change set names each
/// change, landing gives what copy-back gave, undo gives back the exact
/// tree before.
#[tokio::test]
async fn every_kind_of_change_is_captured_landed_and_undone() {
    let f = Fixture::new();
    let ws = &f.ws;
    std::fs::write(ws.join("edit.txt"), "old\n").unwrap();
    std::fs::write(ws.join("del.txt"), "bye\n").unwrap();
    std::fs::write(ws.join("perm.sh"), "echo hi\n").unwrap();
    std::fs::create_dir_all(ws.join("tree/x")).unwrap();
    std::fs::write(ws.join("tree/x/y"), "y\n").unwrap();
    std::fs::write(ws.join("tree/keep"), "k\n").unwrap();
    std::fs::write(ws.join("ren-a.txt"), "renamed bytes\n").unwrap();
    std::fs::write(ws.join("file-to-dir"), "f\n").unwrap();
    std::fs::write(ws.join("same.txt"), "same\n").unwrap();
    std::os::unix::fs::symlink(&f.outside, ws.join("evil")).unwrap();
    let before = tree(ws);

    let (out, id) = f
        .capture(
            "echo new >> edit.txt && rm del.txt && rm -rf tree && mkdir -p tree && \
             echo fresh > tree/only && echo k > tree/keep && mkdir -p new/deep && \
             echo n > new/deep/n.txt && mv ren-a.txt ren-b.txt && chmod 755 perm.sh && \
             rm file-to-dir && mkdir file-to-dir && ln -s edit.txt link && \
             cat same.txt > same.tmp && mv same.tmp same.txt && \
             rm evil && mkdir evil && echo inside > evil/f && echo ok",
        )
        .await;
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    assert_eq!(out.warnings, Vec::<String>::new());
    // Nothing has landed.
    assert_eq!(tree(ws), before, "the workspace changed before landing");
    let set = out.changes.expect("a change set");
    let k = kinds(&set);
    assert_eq!(k["edit.txt"], ChangeKind::Modified, "{k:?}");
    assert_eq!(k["del.txt"], ChangeKind::Deleted);
    assert_eq!(k["tree/x/y"], ChangeKind::Deleted);
    assert_eq!(k["tree/x"], ChangeKind::Deleted);
    assert_eq!(k["tree/only"], ChangeKind::Created);
    // Rewritten with the same bytes under an opaque directory: no change.
    assert!(!k.contains_key("tree/keep"), "{k:?}");
    assert!(!k.contains_key("same.txt"), "{k:?}");
    assert_eq!(k["new/deep/n.txt"], ChangeKind::Created);
    assert_eq!(k["ren-b.txt"], ChangeKind::Renamed);
    let ren = set.changes.iter().find(|c| c.path == "ren-b.txt").unwrap();
    assert_eq!(ren.from.as_deref(), Some("ren-a.txt"));
    assert!(!k.contains_key("ren-a.txt"));
    assert_eq!(k["perm.sh"], ChangeKind::ModeChanged);
    assert_eq!(k["link"], ChangeKind::Created);
    assert_eq!(k["evil/f"], ChangeKind::Created);

    let record = f
        .store
        .prepare(&id, &set, Origin::default())
        .expect("prepare");
    assert_eq!(record.state, ChangeSetState::Pending);
    let edit = record
        .changes
        .iter()
        .find(|c| c.path == "edit.txt")
        .unwrap();
    assert!(
        edit.diff.as_deref().unwrap().contains("+new"),
        "{:?}",
        edit.diff
    );
    let landed = f.store.land(&id).expect("land");
    assert_eq!(landed.state, ChangeSetState::Applied);
    let read = |p: &str| std::fs::read_to_string(ws.join(p)).unwrap();
    assert_eq!(read("edit.txt"), "old\nnew\n");
    assert!(!ws.join("del.txt").exists());
    assert!(!ws.join("tree/x").exists());
    assert_eq!(read("tree/only"), "fresh\n");
    assert_eq!(read("tree/keep"), "k\n");
    assert_eq!(read("new/deep/n.txt"), "n\n");
    assert_eq!(read("ren-b.txt"), "renamed bytes\n");
    assert!(!ws.join("ren-a.txt").exists());
    let mode = |p: &str| std::fs::metadata(ws.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("perm.sh"), 0o755);
    assert!(ws.join("file-to-dir").is_dir());
    assert_eq!(
        std::fs::read_link(ws.join("link")).unwrap(),
        PathBuf::from("edit.txt")
    );
    assert_eq!(read("evil/f"), "inside\n");
    assert!(!f.outside.join("f").exists());
    // Nothing staged is left: at most the empty directory, kept as a spare.
    for e in std::fs::read_dir(f.store.root().join("staging")).unwrap() {
        let e = e.unwrap();
        assert!(
            e.file_name().to_string_lossy().starts_with(".spare-")
                && std::fs::read_dir(e.path()).unwrap().next().is_none(),
            "staging left behind: {:?}",
            e.path()
        );
    }

    let report = f.store.undo(&id, Conflicts::Refuse).expect("undo");
    assert!(report.done, "{report:?}");
    assert_eq!(tree(ws), before, "undo did not restore the tree exactly");
    assert_eq!(f.store.get(&id).unwrap().state, ChangeSetState::Undone);
}

/// `rm -rf` of a 1,000-file tree, landed, then undone: byte for byte.
#[tokio::test]
async fn rm_rf_of_a_thousand_files_is_undone_byte_for_byte() {
    let f = Fixture::new();
    for d in 0..20 {
        let dir = f.ws.join(format!("src/d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..50 {
            std::fs::write(
                dir.join(format!("f{i}.rs")),
                format!("// {d}/{i}\n{}", "x".repeat(i * 37)),
            )
            .unwrap();
        }
    }
    let before = tree(&f.ws);
    let (out, id) = f.capture("rm -rf src").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let set = out.changes.unwrap();
    let deleted_files = set
        .changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Deleted && c.old.as_ref().unwrap().size > 0)
        .count();
    assert_eq!(deleted_files, 1000);
    f.store.prepare(&id, &set, Origin::default()).unwrap();
    f.store.land(&id).unwrap();
    assert!(!f.ws.join("src").exists());
    let r = f.store.undo(&id, Conflicts::Refuse).unwrap();
    assert!(r.done);
    assert_eq!(tree(&f.ws), before);
}

/// A file a person changed after the run: undo refuses it (and by default
/// everything), says which; `Skip` restores the others; `Force` all.
#[tokio::test]
async fn undo_refuses_a_file_changed_since() {
    let f = Fixture::new();
    for i in 0..5 {
        std::fs::write(f.ws.join(format!("f{i}.txt")), format!("line {i}\n")).unwrap();
    }
    let (out, id) = f.capture("sed -i 's/line/LINE/' f*.txt").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let set = out.changes.unwrap();
    assert_eq!(set.changes.len(), 5, "{:?}", set.changes);
    f.store.prepare(&id, &set, Origin::default()).unwrap();
    f.store.land(&id).unwrap();
    std::fs::write(f.ws.join("f2.txt"), "a person's edit\n").unwrap();
    let r = f.store.undo(&id, Conflicts::Refuse).unwrap();
    assert!(!r.done);
    assert_eq!(r.refused.len(), 1);
    assert_eq!(r.refused[0].path, "f2.txt");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("f0.txt")).unwrap(),
        "LINE 0\n",
        "a refused undo changed a file"
    );
    let r = f.store.undo(&id, Conflicts::Skip).unwrap();
    assert!(r.done);
    assert_eq!(r.refused.len(), 1);
    for i in [0, 1, 3, 4] {
        assert_eq!(
            std::fs::read_to_string(f.ws.join(format!("f{i}.txt"))).unwrap(),
            format!("line {i}\n")
        );
    }
    assert_eq!(
        std::fs::read_to_string(f.ws.join("f2.txt")).unwrap(),
        "a person's edit\n"
    );
}

/// Review denied: the workspace never sees the change.
#[tokio::test]
async fn a_discarded_set_leaves_the_workspace_untouched() {
    let f = Fixture::new();
    std::fs::write(f.ws.join("a.txt"), "a\n").unwrap();
    let before = tree(&f.ws);
    let (out, id) = f.capture("rm a.txt && echo b > b.txt").await;
    let set = out.changes.unwrap();
    f.store.prepare(&id, &set, Origin::default()).unwrap();
    let r = f.store.discard(&id).unwrap();
    assert_eq!(r.state, ChangeSetState::Discarded);
    assert_eq!(tree(&f.ws), before);
    assert!(f.store.land(&id).is_err());
}

/// The write quota still holds with capture on, and says `WorkspaceQuota`.
#[tokio::test]
async fn the_write_quota_holds_under_capture() {
    let f = Fixture::new();
    let (id, staging) = f.store.new_staging().unwrap();
    let mut spec = ExecSpec::new(
        Command::Shell("head -c 20000000 /dev/zero > big; echo done".into()),
        &f.ws,
    );
    spec.limits.workspace_write_quota = Some(8 << 20);
    spec.capture = Some(staging);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert_eq!(
        out.limit_hit,
        Some(LimitHit::WorkspaceQuota {
            limit_bytes: 8 << 20
        }),
        "{out:?}"
    );
    assert!(!f.ws.join("big").exists());
    let _ = id;
}

/// Staging gives each file its final mode and time and copies small files in
/// one read: what lands is still exactly what the command left (bytes,
/// permission bits without setuid, modification time, holes), a file without
/// owner read is still read for its record, and undo removes it all.
#[tokio::test]
async fn staged_files_land_with_their_bytes_mode_time_and_holes() {
    use std::os::unix::fs::MetadataExt;
    let f = Fixture::new();
    let (out, id) = f
        .capture(
            "printf '' > empty && printf abc > small && touch -d @1000000000 small && \
             head -c 65536 /dev/zero | tr '\\0' a > at-limit && \
             head -c 65537 /dev/zero | tr '\\0' b > past-limit && \
             truncate -s 1G sparse && printf end >> sparse && \
             printf x > locked && chmod 000 locked && printf w > write-only && chmod 200 write-only && \
             cp /bin/true suid && chmod 4755 suid && echo ok",
        )
        .await;
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    let set = out.changes.unwrap();
    assert_eq!(set.changes.len(), 8, "{:?}", set.changes);
    let record = f.store.prepare(&id, &set, Origin::default()).unwrap();
    let locked = record.changes.iter().find(|c| c.path == "locked").unwrap();
    assert_eq!(
        locked.new_hash.as_deref(),
        Some("2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"),
        "sha256 of \"x\""
    );
    f.store.land(&id).unwrap();
    let meta = |p: &str| std::fs::symlink_metadata(f.ws.join(p)).unwrap();
    let read = |p: &str| std::fs::read(f.ws.join(p)).unwrap();
    assert_eq!(read("empty"), b"");
    assert_eq!(read("small"), b"abc");
    assert_eq!(meta("small").mtime(), 1_000_000_000);
    assert_eq!(read("at-limit"), vec![b'a'; 65536]);
    assert_eq!(read("past-limit"), vec![b'b'; 65537]);
    let sparse = meta("sparse");
    assert_eq!(sparse.len(), (1 << 30) + 3);
    assert!(
        sparse.blocks() * 512 < 1 << 20,
        "the sparse file took {} bytes on disk",
        sparse.blocks() * 512
    );
    assert_eq!(read("locked"), b"x");
    assert_eq!(meta("locked").mode() & 0o7777, 0);
    assert_eq!(meta("write-only").mode() & 0o7777, 0o200);
    assert_eq!(meta("suid").mode() & 0o7777, 0o755);
    assert_eq!(meta("empty").mode() & 0o7777, 0o644);
    let r = f.store.undo(&id, Conflicts::Refuse).unwrap();
    assert!(r.done, "{r:?}");
    assert_eq!(tree(&f.ws), BTreeMap::new());
}
