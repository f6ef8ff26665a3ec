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

#[test]
fn a_landing_cut_short_is_finished_by_the_next_open() {
    for cut in [0, 1, 7, 20] {
        let (_d, ws, store, id, set) = fixture(20);
        assert_eq!(set.changes.len(), 21);
        let record = store.prepare(&id, &set, Origin::default()).unwrap();
        // What `land` does, stopped after `cut` operations (kill -9).
        let journal = Journal {
            id: id.clone(),
            action: "land".into(),
            workspace: ws.clone(),
            ops: land_ops(&record.ops, record.staging.as_ref().unwrap()),
            kept: Vec::new(),
        };
        let jdir = store.root().join("journal");
        std::fs::write(
            jdir.join(format!("{id}.json")),
            serde_json::to_vec(&journal).unwrap(),
        )
        .unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join("d")).unwrap();
    std::fs::write(ws.join("named.txt"), "n1\n").unwrap();
    std::fs::write(ws.join("d/other.txt"), "o1\n").unwrap();
    std::fs::write(ws.join("mode.sh"), "#!/bin/sh\n").unwrap();
    let (store, _) = Store::open(base.join("store"), Retention::default()).unwrap();
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
