//! The store on real files: a staged layer made by hand (the sandbox tests
//! stage real commands' layers), landed, crashed, recovered, undone.

use std::io::Write as _;

use super::*;

/// A workspace with `n` files and a staged layer that rewrites all of them
/// and deletes `gone.txt`.
fn fixture(n: usize) -> (tempfile::TempDir, PathBuf, Store, String, ChangeSet) {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("gone.txt"), "gone\n").unwrap();
    let (store, _) = Store::open(base.join("store"), Retention::default()).unwrap();
    let (id, staging) = store.new_staging().unwrap();
    let mut manifest = std::fs::File::create(staging.join("manifest.jsonl")).unwrap();
    let mut line = |s: &Staged| {
        let mut l = serde_json::to_vec(s).unwrap();
        l.push(b'\n');
        manifest.write_all(&l).unwrap();
    };
    line(&Staged::Whiteout {
        path: "gone.txt".into(),
    });
    line(&Staged::Dir {
        path: "sub".into(),
        mode: 0o755,
        opaque: false,
    });
    for i in 0..n {
        std::fs::write(ws.join(format!("sub/f{i}")), format!("old {i}\n")).unwrap();
        let new = format!("new {i} {}\n", "y".repeat(4096));
        std::fs::write(staging.join(i.to_string()), &new).unwrap();
        line(&Staged::File {
            path: format!("sub/f{i}"),
            mode: 0o644,
            size: new.len() as u64,
            mtime: 0,
            mtime_nsec: 0,
            staged: i.to_string(),
        });
    }
    drop(manifest);
    let set = capstan_sandbox::changes::classify(&ws, &staging).unwrap();
    (dir, ws, store, id, set)
}

/// An empty store beside a workspace path (not created): the temporary
/// directory, the workspace's path and the store.
fn store_beside_workspace() -> (tempfile::TempDir, PathBuf, Store) {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (store, _) = Store::open(base.join("store"), Retention::default()).unwrap();
    (dir, base.join("ws"), store)
}

/// Prepares `set` and writes the journal `land` would write before its
/// first operation; returns it and the journal directory.
fn prepared_landing_journal(
    store: &Store,
    ws: &Path,
    id: &str,
    set: &ChangeSet,
) -> (Journal, PathBuf) {
    let record = store.prepare(id, set, Origin::default()).unwrap();
    let journal = Journal {
        id: id.to_owned(),
        action: "land".into(),
        workspace: ws.to_path_buf(),
        ops: land_ops(&record.ops, record.staging.as_ref().unwrap()),
        kept: Vec::new(),
    };
    let jdir = store.root().join("journal");
    std::fs::write(
        jdir.join(format!("{id}.json")),
        serde_json::to_vec(&journal).unwrap(),
    )
    .unwrap();
    (journal, jdir)
}

#[test]
fn a_landing_cut_short_is_finished_by_the_next_open() {
    for cut in [0, 1, 7, 20] {
        let (_d, ws, store, id, set) = fixture(20);
        assert_eq!(set.changes.len(), 21);
        // What `land` does, stopped after `cut` operations (kill -9).
        let (journal, jdir) = prepared_landing_journal(&store, &ws, &id, &set);
        let mut done = String::new();
        for (i, op) in journal.ops.iter().take(cut).enumerate() {
            fsops::apply(&store, &ws, op).unwrap();
            done.push_str(&format!("{i}\n"));
        }
        std::fs::write(jdir.join(format!("{id}.done")), done).unwrap();
        // Every file is old or new, never missing.
        for i in 0..20 {
            let s = std::fs::read_to_string(ws.join(format!("sub/f{i}"))).unwrap();
            assert!(s.starts_with("old ") || s.starts_with("new "), "{s}");
        }
        let (store, rec) = Store::open(store.root(), Retention::default()).unwrap();
        assert_eq!(rec.finished, vec![id.clone()], "{:?}", rec.errors);
        for i in 0..20 {
            let s = std::fs::read_to_string(ws.join(format!("sub/f{i}"))).unwrap();
            assert!(s.starts_with(&format!("new {i} ")), "cut {cut}: {s}");
        }
        assert!(!ws.join("gone.txt").exists());
        assert_eq!(store.get(&id).unwrap().state, ChangeSetState::Applied);
        // And undo still works after a recovered landing.
        let r = store.undo(&id, Conflicts::Refuse).unwrap();
        assert!(r.done, "{r:?}");
        assert_eq!(
            std::fs::read_to_string(ws.join("sub/f3")).unwrap(),
            "old 3\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("gone.txt")).unwrap(),
            "gone\n"
        );
    }
}

#[test]
fn previous_versions_are_deduplicated_and_retention_forgets_old_sets() {
    let (_d, ws, store, id, set) = fixture(3);
    store.prepare(&id, &set, Origin::default()).unwrap();
    store.land(&id).unwrap();
    // Same old content twice: one object.
    let snap = store
        .snapshot(&ws, &["sub/f0".into(), "sub/f1".into()])
        .unwrap();
    std::fs::write(ws.join("sub/f0"), "x\n").unwrap();
    let rec = store
        .record_snapshot(snap, Origin::default())
        .unwrap()
        .expect("a change");
    assert_eq!(rec.changes.len(), 1);
    assert_eq!(rec.changes[0].kind, ChangeKind::Modified);
    let store = Store {
        root: store.root().to_path_buf(),
        retention: Retention {
            keep_days: 30,
            max_bytes: 0,
        },
    };
    let forgotten = store.gc().unwrap();
    assert_eq!(forgotten, 2);
    assert!(store.list().unwrap().is_empty());
}

#[test]
fn bad_ids_and_paths_are_refused_with_a_reason() {
    let (_d, _ws, store, _id, _set) = fixture(1);
    let e = store.get("../../etc/passwd").unwrap_err().to_string();
    assert!(e.contains("not a change set id"), "{e}");
    assert!(check_rel("../x").is_err());
    assert!(check_rel("/abs").is_err());
    assert!(check_rel("a/b").is_ok());
    assert!(matches!(
        store.get("cs-1-deadbeef"),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn writes_outside_a_snapshot_are_recorded_and_undo_leaves_them() {
    let (_dir, ws, store) = store_beside_workspace();
    std::fs::create_dir_all(ws.join("d")).unwrap();
    std::fs::write(ws.join("named.txt"), "n1\n").unwrap();
    std::fs::write(ws.join("d/other.txt"), "o1\n").unwrap();
    std::fs::write(ws.join("mode.sh"), "#!/bin/sh\n").unwrap();
    let snap = store.snapshot(&ws, &["named.txt".to_owned()]).unwrap();
    assert!(snap.watches_everything());
    std::fs::write(ws.join("named.txt"), "n2\n").unwrap();
    std::fs::write(ws.join("d/other.txt"), "o2\n").unwrap();
    std::fs::write(ws.join("d/new.txt"), "fresh\n").unwrap();
    std::fs::set_permissions(ws.join("mode.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let record = store
        .record_snapshot(snap, Origin::default())
        .unwrap()
        .unwrap();
    let seen: Vec<(&str, ChangeKind, bool)> = record
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.kind, c.undeclared))
        .collect();
    assert_eq!(
        seen,
        [
            ("named.txt", ChangeKind::Modified, false),
            ("d/new.txt", ChangeKind::Created, true),
            ("d/other.txt", ChangeKind::Modified, true),
            ("mode.sh", ChangeKind::ModeChanged, true),
        ]
    );
    let r = store.undo(&record.id, Conflicts::Refuse).unwrap();
    assert!(!r.done);
    assert_eq!(r.refused.len(), 1, "{r:?}");
    assert_eq!(r.refused[0].path, "d/other.txt");
    let r = store.undo(&record.id, Conflicts::Force).unwrap();
    assert!(r.done);
    assert_eq!(
        std::fs::read_to_string(ws.join("named.txt")).unwrap(),
        "n1\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("d/other.txt")).unwrap(),
        "o2\n"
    );
    assert!(!ws.join("d/new.txt").exists());
    let mode = std::fs::metadata(ws.join("mode.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
}

/// A landed set's capture directory is emptied and kept as a spare; the
/// next command gets it back (empty, owner only) instead of a new one.
#[test]
fn a_capture_directory_is_reused_once_its_set_landed() {
    use std::os::unix::fs::MetadataExt;
    let (_d, ws, store, id, set) = fixture(3);
    let staging_root = store.root().join("staging");
    let inode = std::fs::metadata(&set.staging).unwrap().ino();
    store.prepare(&id, &set, Origin::default()).unwrap();
    store.land(&id).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("sub/f0")).unwrap().get(..6),
        Some("new 0 ")
    );
    let left: Vec<PathBuf> = std::fs::read_dir(&staging_root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(std::fs::read_dir(&left[0]).unwrap().next().is_none());
    std::fs::set_permissions(&left[0], std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, dir) = store.new_staging().unwrap();
    let m = std::fs::metadata(&dir).unwrap();
    assert_eq!(m.ino(), inode, "a new directory instead of the spare");
    assert_eq!(m.mode() & 0o777, 0o700);
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
    assert_eq!(std::fs::read_dir(&staging_root).unwrap().count(), 1);
    // A directory outside the staging root is removed, never kept.
    let outside = store.root().join("elsewhere");
    std::fs::create_dir(&outside).unwrap();
    store.retire_staging(&outside);
    assert!(!outside.exists());
    assert_eq!(std::fs::read_dir(&staging_root).unwrap().count(), 1);
}

#[test]
fn a_large_set_keeps_its_diffs_within_the_budget_and_hashes_every_file() {
    // 200 files of ~4 KiB each: their diffs would be ~800 KiB, over the set's
    // budget, so the later ones carry only the cut marker.
    let (_d, _ws, store, id, set) = fixture(200);
    let record = store.prepare(&id, &set, Origin::default()).unwrap();
    let staging = record.staging.clone().unwrap();
    let mut full = 0;
    let mut cut_only = 0;
    let mut total = 0;
    for c in record
        .changes
        .iter()
        .filter(|c| c.path.starts_with("sub/f"))
    {
        // The hash comes from the one read that also gave the diff's text.
        let staged = set
            .changes
            .iter()
            .find(|s| s.path == c.path)
            .and_then(|s| s.staged.clone())
            .unwrap();
        let bytes = std::fs::read(staging.join(staged)).unwrap();
        assert_eq!(
            c.new_hash.as_deref(),
            Some(hex::encode(Sha256::digest(&bytes)).as_str()),
            "{}",
            c.path
        );
        assert!(!c.binary, "{}", c.path);
        let d = c.diff.as_deref().unwrap();
        total += d.len();
        if d.contains("+new ") {
            full += 1;
        } else {
            assert_eq!(d, "\n[diff cut: too long]\n", "{}", c.path);
            cut_only += 1;
        }
    }
    assert!(full > 10 && cut_only > 100, "{full} full, {cut_only} cut");
    assert!(total <= SET_DIFF_CAP + 200 * 32, "{total} bytes of diffs");
}

#[test]
fn a_file_lands_where_a_directory_was() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let (_dir, ws, store) = store_beside_workspace();
    std::fs::create_dir_all(ws.join("x/deep")).unwrap();
    std::fs::write(ws.join("x/deep/old.txt"), "old\n").unwrap();
    let (_id, staging) = store.new_staging().unwrap();
    // Staged as the sandbox stages: final mode and time already given.
    std::fs::write(staging.join("0"), "now a file\n").unwrap();
    std::fs::set_permissions(staging.join("0"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(staging.join("0"))
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 5))
        .unwrap();
    let op = Op::PutStaged {
        path: "x".into(),
        staged: staging.join("0"),
        mode: 0o640,
        mtime: (1_700_000_000, 5),
    };
    fsops::apply(&store, &ws, &op).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("x")).unwrap(),
        "now a file\n"
    );
    let m = std::fs::symlink_metadata(ws.join("x")).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o640);
    assert_eq!(m.mtime(), 1_700_000_000);
    // Run again (as after a crash): the staged file is gone, nothing changes.
    fsops::apply(&store, &ws, &op).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("x")).unwrap(),
        "now a file\n"
    );
    // A mode its owner cannot read is staged 0600 (the host reads the file
    // first) and gets its mode and time when it lands.
    std::fs::write(staging.join("1"), "write only\n").unwrap();
    fsops::apply(
        &store,
        &ws,
        &Op::PutStaged {
            path: "w".into(),
            staged: staging.join("1"),
            mode: 0o200,
            mtime: (1_600_000_000, 0),
        },
    )
    .unwrap();
    let m = std::fs::symlink_metadata(ws.join("w")).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o200);
    assert_eq!(m.mtime(), 1_600_000_000);
}

#[test]
fn a_file_never_lands_through_a_symlinked_directory() {
    let (_dir, ws, store) = store_beside_workspace();
    let outside = ws.with_file_name("outside");
    std::fs::create_dir_all(ws.join("real")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    // What a person (or a later run) may do while a set waits for review.
    std::os::unix::fs::symlink(&outside, ws.join("sub")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("real/link")).unwrap();
    let (_id, staging) = store.new_staging().unwrap();
    let mut lander = fsops::Lander::new(&store, &ws);
    for (i, path) in ["sub/x", "real/link/y", "sub/deeper/z"].iter().enumerate() {
        std::fs::write(staging.join(i.to_string()), "payload\n").unwrap();
        let op = Op::PutStaged {
            path: (*path).into(),
            staged: staging.join(i.to_string()),
            mode: 0o644,
            mtime: (0, 0),
        };
        let e = lander.apply(&op).unwrap_err().to_string();
        assert!(e.contains("not writing through it"), "{path}: {e}");
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    // The same lander still lands where the way is real.
    std::fs::write(staging.join("9"), "fine\n").unwrap();
    lander
        .apply(&Op::PutStaged {
            path: "real/ok".into(),
            staged: staging.join("9"),
            mode: 0o644,
            mtime: (0, 0),
        })
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("real/ok")).unwrap(),
        "fine\n"
    );
}

#[test]
fn moves_finished_but_not_yet_recorded_are_run_again_harmlessly() {
    // The journal records file moves in batches: a crash may leave moves
    // done that the `.done` file does not list. The next open runs them again.
    for cut in [3, 9, 22] {
        let (_d, ws, store, id, set) = fixture(20);
        let (journal, jdir) = prepared_landing_journal(&store, &ws, &id, &set);
        assert!(matches!(journal.ops[2], Op::PutStaged { .. }));
        let mut lander = fsops::Lander::new(&store, &ws);
        for op in journal.ops.iter().take(cut) {
            lander.apply(op).unwrap();
        }
        // Only the two ops before the first move were recorded.
        std::fs::write(jdir.join(format!("{id}.done")), "0\n1\n").unwrap();
        let (store, rec) = Store::open(store.root(), Retention::default()).unwrap();
        assert_eq!(rec.finished, vec![id.clone()], "{:?}", rec.errors);
        for i in 0..20 {
            let s = std::fs::read_to_string(ws.join(format!("sub/f{i}"))).unwrap();
            assert!(s.starts_with(&format!("new {i} ")), "cut {cut}: {s}");
        }
        let r = store.undo(&id, Conflicts::Refuse).unwrap();
        assert!(r.done, "{r:?}");
        assert_eq!(
            std::fs::read_to_string(ws.join("sub/f7")).unwrap(),
            "old 7\n"
        );
    }
}
