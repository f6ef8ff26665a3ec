use std::path::Path;

use super::*;
use std::time::Duration;

fn meta(path: &str, n: u64) -> FileMeta {
    FileMeta {
        path: path.into(),
        mtime_ms: 1_700_000_000_000 + n,
        size: 100 + n,
        hash: format!("{n:064x}"),
    }
}

fn passage(heading: &str, text: &str, a: u32, b: u32) -> Passage {
    Passage {
        heading: heading.into(),
        text: text.into(),
        line_start: a,
        line_end: b,
    }
}

fn open(dir: &Path) -> WorkspaceIndex {
    WorkspaceIndex::open(dir, IndexOptions::default()).unwrap()
}

/// Three files about different things.
fn populate(idx: &WorkspaceIndex) {
    idx.upsert_file(
        meta("docs/keys.md", 1),
        &[
            passage(
                "Guide > Keys",
                "Keys are stored in the keyring. Each key has an owner.",
                3,
                5,
            ),
            passage(
                "Guide > Keys > Rotation",
                "Rotating keys regularly limits the damage of a leaked secret. \
                 Run `capstan keys rotate` to rotate every key at once.",
                8,
                12,
            ),
        ],
    )
    .unwrap();
    idx.upsert_file(
        meta("docs/network.md", 2),
        &[passage(
            "Network > Proxies",
            "Outbound connections go through the egress proxy. The proxy denies unknown hosts.",
            1,
            4,
        )],
    )
    .unwrap();
    idx.upsert_file(
        meta("src/main.rs", 3),
        &[passage(
            "src/main.rs",
            "fn main() {\n    let proxy = Proxy::new();\n}",
            1,
            3,
        )],
    )
    .unwrap();
}

fn keys(hits: &[Hit]) -> Vec<(&str, &str, u32, u32)> {
    hits.iter()
        .map(|h| {
            (
                h.path.as_str(),
                h.heading.as_str(),
                h.line_start,
                h.line_end,
            )
        })
        .collect()
}

#[test]
fn is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<WorkspaceIndex>();
}

#[test]
fn search_finds_the_right_passage_with_snippet() {
    let dir = tempfile::tempdir().unwrap();
    let idx = open(dir.path());
    populate(&idx);
    // Nothing is visible before the commit.
    assert!(idx.search("rotate", 5).unwrap().is_empty());
    let stats = idx.commit().unwrap();
    assert_eq!(
        stats,
        IndexStats {
            files: 3,
            passages: 4
        }
    );

    // Stemming: "rotating" / "rotate" / "rotation" meet.
    let hits = idx.search("how do I rotate my keys", 5).unwrap();
    assert_eq!(
        keys(&hits)[0],
        ("docs/keys.md", "Guide > Keys > Rotation", 8, 12)
    );
    let top = &hits[0];
    assert!(top.text.starts_with("Rotating keys regularly"));
    assert!(top.snippet.contains("<b>rotate</b>"), "{}", top.snippet);
    assert!(top.snippet.contains("<b>keys</b>"), "{}", top.snippet);
    assert!(top.score > 0.0);
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));

    let hits = idx.search("proxy", 5).unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(
        keys(&hits)[0],
        ("docs/network.md", "Network > Proxies", 1, 4)
    );

    // A heading-only match still gets a snippet: the start of the text, escaped.
    idx.upsert_file(
        meta("docs/tags.md", 4),
        &[passage("Zebra", "a <b> tag & stuff", 1, 1)],
    )
    .unwrap();
    idx.commit().unwrap();
    let hits = idx.search("zebra", 5).unwrap();
    assert_eq!(hits[0].snippet, "a &lt;b&gt; tag &amp; stuff");
    // Snippet text is escaped, matches highlighted.
    let hits = idx.search("tag", 5).unwrap();
    assert_eq!(hits[0].snippet, "a &lt;b&gt; <b>tag</b> &amp; stuff");

    assert!(idx.search("", 5).unwrap().is_empty());
    assert!(idx.search("proxy", 0).unwrap().is_empty());
    assert!(idx.search("the of and", 5).unwrap().is_empty());
}

#[test]
fn heading_matches_are_boosted() {
    let dir = tempfile::tempdir().unwrap();
    let idx = open(dir.path());
    idx.upsert_file(
        meta("a.md", 1),
        &[passage(
            "Other",
            "Mentions widgets once among many other words here.",
            1,
            1,
        )],
    )
    .unwrap();
    idx.upsert_file(
        meta("b.md", 2),
        &[passage(
            "Widgets",
            "All about these things and many other words here.",
            1,
            1,
        )],
    )
    .unwrap();
    idx.commit().unwrap();
    let hits = idx.search("widgets", 5).unwrap();
    assert_eq!(hits[0].path, "b.md");
}

#[test]
fn phrase_queries_use_positions() {
    let dir = tempfile::tempdir().unwrap();
    let idx = open(dir.path());
    idx.upsert_file(
        meta("a.md", 1),
        &[passage("A", "the quick brown fox", 1, 1)],
    )
    .unwrap();
    idx.upsert_file(
        meta("b.md", 2),
        &[passage("B", "brown dogs are quick", 1, 1)],
    )
    .unwrap();
    idx.commit().unwrap();
    let hits = idx.search("\"quick brown\"", 5).unwrap();
    assert_eq!(keys(&hits), [("a.md", "A", 1, 1)]);
    assert_eq!(idx.search("quick brown", 5).unwrap().len(), 2);
}

#[test]
fn syntax_errors_fall_back_to_plain_terms() {
    let dir = tempfile::tempdir().unwrap();
    let idx = open(dir.path());
    populate(&idx);
    idx.commit().unwrap();
    for q in [
        "\"unterminated proxy",
        "AND OR proxy",
        "foo:bar proxy",
        "proxy)",
        "((proxy",
        "proxy^^",
        "std::proxy::new",
        "[proxy TO",
        "proxy~~~",
        "*",
        "AND OR",
        "\"",
        ":",
    ] {
        let hits = idx
            .search(q, 5)
            .unwrap_or_else(|e| panic!("{q:?} failed: {e}"));
        if q.contains("proxy") {
            assert!(
                hits.iter().any(|h| h.path == "docs/network.md"),
                "{q:?}: {:?}",
                keys(&hits)
            );
        }
    }
    // Valid syntax is honoured: a required term and an exclusion.
    let hits = idx.search("+proxy -egress", 5).unwrap();
    assert_eq!(keys(&hits), [("src/main.rs", "src/main.rs", 1, 3)]);
    let hits = idx.search("heading:rotation", 5).unwrap();
    assert_eq!(hits.len(), 1);
}

#[test]
fn upsert_replaces_remove_deletes_and_rename_moves() {
    let dir = tempfile::tempdir().unwrap();
    let idx = open(dir.path());
    populate(&idx);
    idx.commit().unwrap();

    // Upsert replaces all passages of the file.
    idx.upsert_file(
        meta("docs/keys.md", 10),
        &[passage(
            "Keys",
            "Keys are now kept in a hardware token.",
            1,
            2,
        )],
    )
    .unwrap();
    let stats = idx.commit().unwrap();
    assert_eq!(stats.passages, 3);
    assert!(idx.search("keyring", 5).unwrap().is_empty());
    let hits = idx.search("hardware token", 5).unwrap();
    assert_eq!(keys(&hits), [("docs/keys.md", "Keys", 1, 2)]);
    let known = idx.known_files().unwrap();
    assert_eq!(
        known.iter().find(|m| m.path == "docs/keys.md"),
        Some(&meta("docs/keys.md", 10))
    );

    // Two upserts of one file before a commit: the last wins.
    idx.upsert_file(meta("x.md", 1), &[passage("X", "first version", 1, 1)])
        .unwrap();
    idx.upsert_file(meta("x.md", 2), &[passage("X", "second version", 1, 1)])
        .unwrap();
    idx.commit().unwrap();
    assert!(idx.search("first", 5).unwrap().is_empty());
    assert_eq!(idx.search("second", 5).unwrap().len(), 1);

    // Remove.
    idx.remove_file("docs/network.md").unwrap();
    idx.remove_file("never/indexed.md").unwrap();
    let stats = idx.commit().unwrap();
    assert_eq!(stats.files, 3);
    assert!(idx.search("egress", 5).unwrap().is_empty());

    // Rename = remove + upsert under the new path.
    idx.remove_file("src/main.rs").unwrap();
    idx.upsert_file(
        meta("src/bin/app.rs", 3),
        &[passage(
            "src/bin/app.rs",
            "fn main() {\n    let proxy = Proxy::new();\n}",
            1,
            3,
        )],
    )
    .unwrap();
    idx.commit().unwrap();
    let hits = idx.search("proxy", 5).unwrap();
    assert_eq!(keys(&hits), [("src/bin/app.rs", "src/bin/app.rs", 1, 3)]);
    let paths: Vec<_> = idx
        .known_files()
        .unwrap()
        .into_iter()
        .map(|m| m.path)
        .collect();
    assert_eq!(paths, ["docs/keys.md", "src/bin/app.rs", "x.md"]);

    // A file with no passages is known but not searchable.
    idx.upsert_file(meta("empty.md", 9), &[]).unwrap();
    let stats = idx.commit().unwrap();
    assert_eq!(stats.files, 4);
    assert!(
        idx.known_files()
            .unwrap()
            .iter()
            .any(|m| m.path == "empty.md")
    );
}

#[test]
fn invalid_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let idx = open(dir.path());
    assert!(matches!(
        idx.upsert_file(meta("", 1), &[]),
        Err(IndexError::Invalid(_))
    ));
    assert!(matches!(
        idx.upsert_file(meta("a", 1), &[passage("h", "t", 5, 4)]),
        Err(IndexError::Invalid(_))
    ));
    let bad = IndexOptions {
        heading_boost: f32::NAN,
        ..IndexOptions::default()
    };
    let other = tempfile::tempdir().unwrap();
    assert!(matches!(
        WorkspaceIndex::open(other.path(), bad),
        Err(IndexError::Invalid(_))
    ));
}

#[test]
fn known_files_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let idx = open(dir.path());
        assert!(idx.known_files().unwrap().is_empty());
        populate(&idx);
        // The writer's view includes uncommitted changes.
        assert_eq!(idx.known_files().unwrap().len(), 3);
        idx.commit().unwrap();
    }
    let idx = open(dir.path());
    assert_eq!(
        idx.known_files().unwrap(),
        [
            meta("docs/keys.md", 1),
            meta("docs/network.md", 2),
            meta("src/main.rs", 3)
        ]
    );
    assert_eq!(
        idx.stats(),
        IndexStats {
            files: 3,
            passages: 4
        }
    );
    assert_eq!(idx.search("egress", 5).unwrap().len(), 1);
}

#[test]
fn dropping_without_commit_keeps_the_previous_commit() {
    let dir = tempfile::tempdir().unwrap();
    {
        let idx = open(dir.path());
        populate(&idx);
        idx.commit().unwrap();
        idx.remove_file("docs/keys.md").unwrap();
        idx.upsert_file(
            meta("new.md", 7),
            &[passage("New", "uncommitted words", 1, 1)],
        )
        .unwrap();
        // Dropped here: writer and pending changes discarded.
    }
    let idx = open(dir.path());
    assert_eq!(idx.known_files().unwrap().len(), 3);
    assert!(idx.search("uncommitted", 5).unwrap().is_empty());
    assert_eq!(idx.search("keyring", 5).unwrap().len(), 1);
}

#[test]
fn another_analyzer_is_a_schema_mismatch_and_rebuild_recreates() {
    let dir = tempfile::tempdir().unwrap();
    {
        let idx = open(dir.path());
        populate(&idx);
        idx.commit().unwrap();
    }
    let simple = IndexOptions {
        analyzer: Analyzer::Simple,
        ..IndexOptions::default()
    };
    assert!(matches!(
        WorkspaceIndex::open(dir.path(), simple.clone()),
        Err(IndexError::SchemaMismatch(_))
    ));
    let idx = WorkspaceIndex::open_or_rebuild(dir.path(), simple).unwrap();
    assert!(idx.known_files().unwrap().is_empty());
    // The simple analyzer does not stem.
    idx.upsert_file(meta("a.md", 1), &[passage("A", "rotating keys", 1, 1)])
        .unwrap();
    idx.commit().unwrap();
    assert!(idx.search("rotate", 5).unwrap().is_empty());
    assert_eq!(idx.search("rotating", 5).unwrap().len(), 1);
}

#[test]
fn two_opens_of_one_directory_read_and_write_in_turn() {
    // Two processes on one workspace: each opens the index; neither holds the writer
    // lock until it changes something, and each sees the other's commits.
    let dir = tempfile::tempdir().unwrap();
    let a = open(dir.path());
    let b = open(dir.path());
    populate(&a);
    a.commit().unwrap();
    assert_eq!(b.known_files().unwrap().len(), 3);
    assert_eq!(b.search("egress", 5).unwrap().len(), 1);
    b.upsert_file(
        meta("b.md", 1),
        &[passage("B", "written by the second", 1, 1)],
    )
    .unwrap();
    assert_eq!(b.commit().unwrap().files, 4);
    assert_eq!(a.search("second", 5).unwrap().len(), 1);
    // A's next change starts from B's commit, so B's file survives A's commit.
    a.remove_file("docs/keys.md").unwrap();
    assert_eq!(a.commit().unwrap().files, 3);
    let paths: Vec<_> = b
        .known_files()
        .unwrap()
        .into_iter()
        .map(|m| m.path)
        .collect();
    assert_eq!(paths, ["b.md", "docs/network.md", "src/main.rs"]);
}

#[test]
fn a_change_while_another_writes_is_busy_and_the_last_commit_stays_searchable() {
    let dir = tempfile::tempdir().unwrap();
    let a = open(dir.path());
    populate(&a);
    a.commit().unwrap();
    // A is mid-refresh: it holds the writer with a change pending.
    a.upsert_file(
        meta("pending.md", 1),
        &[passage("P", "pending words", 1, 1)],
    )
    .unwrap();
    let b = WorkspaceIndex::open(
        dir.path(),
        IndexOptions {
            writer_wait: Duration::from_millis(200),
            ..IndexOptions::default()
        },
    )
    .unwrap();
    let err = b
        .upsert_file(meta("b.md", 1), &[passage("B", "from b", 1, 1)])
        .unwrap_err();
    assert!(matches!(err, IndexError::WriterBusy { .. }), "{err}");
    assert!(err.to_string().contains("another Capstan process"), "{err}");
    assert!(matches!(
        b.remove_file("docs/keys.md"),
        Err(IndexError::WriterBusy { .. })
    ));
    // Reading needs no lock: the last commit, without A's pending change.
    assert_eq!(b.search("keyring", 5).unwrap().len(), 1);
    assert!(b.search("pending", 5).unwrap().is_empty());
    assert_eq!(b.known_files().unwrap().len(), 3);
    // A commit with nothing pending (B's refresh found nothing to change) is fine too.
    assert_eq!(b.commit().unwrap().files, 3);
    // Once A commits, the lock is free and B writes.
    a.commit().unwrap();
    b.upsert_file(meta("b.md", 1), &[passage("B", "from b", 1, 1)])
        .unwrap();
    assert_eq!(b.commit().unwrap().files, 5);
}

#[test]
fn a_change_waits_for_the_other_writer_to_finish() {
    let dir = tempfile::tempdir().unwrap();
    let a = open(dir.path());
    let b = WorkspaceIndex::open(
        dir.path(),
        IndexOptions {
            writer_wait: Duration::from_secs(60),
            ..IndexOptions::default()
        },
    )
    .unwrap();
    populate(&a);
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            b.upsert_file(meta("b.md", 1), &[passage("B", "from b", 1, 1)])
                .unwrap();
            b.commit().unwrap()
        });
        a.commit().unwrap();
        assert_eq!(waiting.join().unwrap().files, 4);
    });
}

#[test]
fn concurrent_searches_while_indexing() {
    let dir = tempfile::tempdir().unwrap();
    let idx = std::sync::Arc::new(open(dir.path()));
    populate(&idx);
    idx.commit().unwrap();
    std::thread::scope(|s| {
        for _ in 0..3 {
            let idx = idx.clone();
            s.spawn(move || {
                for _ in 0..50 {
                    let hits = idx.search("proxy", 5).unwrap();
                    assert!(!hits.is_empty());
                }
            });
        }
        let idx = idx.clone();
        s.spawn(move || {
            for i in 0..20 {
                idx.upsert_file(
                    meta(&format!("gen/{i}.md"), i),
                    &[passage("Gen", &format!("generated proxy note {i}"), 1, 1)],
                )
                .unwrap();
                if i % 5 == 4 {
                    idx.commit().unwrap();
                }
            }
        });
    });
    assert_eq!(idx.stats().files, 23);
}

#[test]
fn search_distinct_drops_overlapping_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let idx = open(dir.path());
    idx.upsert_file(
        meta("long.md", 1),
        &[
            passage(
                "Long",
                "alpha beta gamma. shared overlap about kernels",
                1,
                10,
            ),
            passage("Long", "shared overlap about kernels. delta epsilon", 9, 20),
            passage("Long", "unrelated", 21, 30),
        ],
    )
    .unwrap();
    idx.upsert_file(
        meta("other.md", 2),
        &[passage("Other", "kernels elsewhere", 1, 2)],
    )
    .unwrap();
    idx.commit().unwrap();
    assert_eq!(idx.search("kernels overlap", 10).unwrap().len(), 3);
    let hits = idx.search_distinct("kernels overlap", 10).unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(idx.search_distinct("kernels overlap", 1).unwrap().len(), 1);
}

/// A real crash: a child process (this test binary) commits, starts a second batch and
/// aborts mid-way; the index must reopen at the first commit.
#[test]
fn crash_mid_index_keeps_the_previous_commit() {
    const CHILD_ENV: &str = "CAPSTAN_INDEX_CRASH_CHILD_DIR";
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let idx = open(Path::new(&dir));
        populate(&idx);
        idx.commit().unwrap();
        for i in 0..2000u64 {
            idx.upsert_file(
                meta(&format!("batch/{i}.md"), i),
                &[passage(
                    "Batch",
                    &format!("crashing batch document {i}"),
                    1,
                    1,
                )],
            )
            .unwrap();
        }
        idx.remove_file("docs/keys.md").unwrap();
        std::process::abort();
    }
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tests::crash_mid_index_keeps_the_previous_commit",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child must have aborted");
    let idx = open(dir.path());
    assert_eq!(idx.known_files().unwrap().len(), 3);
    assert_eq!(idx.stats().passages, 4);
    assert!(idx.search("crashing", 5).unwrap().is_empty());
    assert_eq!(idx.search("keyring", 5).unwrap().len(), 1);
    // And it is writable again (the dead writer's lock died with it).
    idx.upsert_file(meta("after.md", 1), &[passage("After", "recovered", 1, 1)])
        .unwrap();
    assert_eq!(idx.commit().unwrap().files, 4);
}

#[test]
fn missing_file_list_is_rebuilt_from_the_passages() {
    let dir = tempfile::tempdir().unwrap();
    {
        let idx = open(dir.path());
        populate(&idx);
        idx.upsert_file(meta("empty.md", 5), &[]).unwrap();
        idx.commit().unwrap();
    }
    {
        // Another writer commits without a payload (an older or foreign version).
        let index = tantivy::Index::open_in_dir(dir.path()).unwrap();
        let mut w: tantivy::IndexWriter = index.writer_with_num_threads(1, 15_000_000).unwrap();
        w.commit().unwrap();
        assert!(index.load_metas().unwrap().payload.is_none());
    }
    let idx = open(dir.path());
    // Files with passages come back with their metas; the empty one is simply unknown.
    assert_eq!(
        idx.known_files().unwrap(),
        [
            meta("docs/keys.md", 1),
            meta("docs/network.md", 2),
            meta("src/main.rs", 3)
        ]
    );
}

#[test]
fn a_batch_replaces_each_file_and_a_bad_entry_rejects_all_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let idx = open(dir.path());
    idx.upsert_files(&[
        (meta("a.md", 1), vec![passage("A", "alpha rotation", 1, 2)]),
        (meta("b.md", 2), vec![passage("B", "beta rotation", 1, 1)]),
    ])
    .unwrap();
    idx.commit().unwrap();
    // The second batch replaces a.md (the delete runs before the adds of the same batch)
    // and carries an invalid entry: nothing of it may land.
    let bad = idx.upsert_files(&[
        (meta("a.md", 3), vec![passage("A", "gamma", 1, 1)]),
        (meta("c.md", 4), vec![passage("C", "delta", 3, 2)]),
    ]);
    assert!(matches!(bad, Err(IndexError::Invalid(m)) if m.contains("c.md")));
    idx.upsert_files(&[(meta("a.md", 3), vec![passage("A", "gamma rotation", 1, 1)])])
        .unwrap();
    idx.commit().unwrap();
    let hits = idx.search("rotation", 10).unwrap();
    let mut texts: Vec<&str> = hits.iter().map(|h| h.text.as_str()).collect();
    texts.sort();
    assert_eq!(texts, ["beta rotation", "gamma rotation"]);
    assert_eq!(
        idx.known_files()
            .unwrap()
            .iter()
            .map(|m| m.path.as_str())
            .collect::<Vec<_>>(),
        ["a.md", "b.md"]
    );
}

/// Two files whose single passages hold the same words (same BM25 score), `a.md` with the
/// query's words in its opening and next to each other.
fn same_words_other_places(opts: IndexOptions) -> (tempfile::TempDir, WorkspaceIndex) {
    let dir = tempfile::tempdir().unwrap();
    let idx = WorkspaceIndex::open(dir.path(), opts).unwrap();
    let filler = "lorem ipsum dolor amet consectetur adipiscing elit sed eiusmod tempor \
                  incididunt labore dolore magna aliqua enim minim veniam quis nostrud \
                  exercitation ullamco laboris nisi aliquip commodo consequat duis aute irure";
    idx.upsert_file(
        meta("a.md", 1),
        &[passage("Notes", &format!("widgets gadgets {filler}"), 1, 1)],
    )
    .unwrap();
    idx.upsert_file(
        meta("b.md", 2),
        &[passage("Notes", &format!("widgets {filler} gadgets"), 1, 1)],
    )
    .unwrap();
    idx.commit().unwrap();
    (dir, idx)
}

#[test]
fn rerank_prefers_the_opening_and_nearby_terms() {
    let scores = |rerank: Rerank| {
        let (_dir, idx) = same_words_other_places(IndexOptions {
            rerank,
            ..IndexOptions::default()
        });
        let hits = idx.search("gadgets widgets", 5).unwrap();
        assert_eq!(hits.len(), 2);
        hits.iter()
            .map(|h| (h.path.clone(), h.score))
            .collect::<Vec<_>>()
    };
    // BM25 alone cannot tell the two apart.
    let bm25 = scores(Rerank::off());
    assert_eq!(bm25[0].1, bm25[1].1, "{bm25:?}");
    for rerank in [
        Rerank::default(),
        Rerank {
            lead: 0.0,
            ..Rerank::default()
        },
        Rerank {
            proximity: 0.0,
            ..Rerank::default()
        },
    ] {
        let s = scores(rerank.clone());
        assert_eq!(s[0].0, "a.md", "{rerank:?}: {s:?}");
        assert!(s[0].1 > s[1].1, "{rerank:?}: {s:?}");
        assert!(s[1].1 >= bm25[1].1, "a bonus never lowers a score");
    }
}

#[test]
fn one_file_does_not_fill_the_hits() {
    let search = |rerank: Rerank, limit: usize| {
        let dir = tempfile::tempdir().unwrap();
        let idx = WorkspaceIndex::open(
            dir.path(),
            IndexOptions {
                rerank,
                ..IndexOptions::default()
            },
        )
        .unwrap();
        // Three equally good passages of one file, and a slightly weaker one elsewhere.
        let same: Vec<Passage> = (1..=3)
            .map(|n| passage("Notes", "widgets gadgets", n, n))
            .collect();
        idx.upsert_files(&[
            (meta("a.md", 1), same),
            (
                meta("b.md", 2),
                vec![passage("Notes", "widgets gadgets sprockets", 1, 1)],
            ),
        ])
        .unwrap();
        idx.commit().unwrap();
        let hits = idx.search("widgets gadgets", limit).unwrap();
        let hits: Vec<(String, f32)> = hits.into_iter().map(|h| (h.path, h.score)).collect();
        (dir, hits)
    };
    let (_d, plain) = search(
        Rerank {
            same_file: 1.0,
            ..Rerank::default()
        },
        10,
    );
    let files: Vec<&str> = plain.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(files, ["a.md", "a.md", "a.md", "b.md"], "{plain:?}");
    let (_d, diverse) = search(Rerank::default(), 10);
    let files: Vec<&str> = diverse.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(files, ["a.md", "b.md", "a.md", "a.md"], "{diverse:?}");
    // The n-th passage of a file scores same_file^n of what it would alone; others keep theirs.
    let f = Rerank::default().same_file;
    assert_eq!(diverse[0].1, plain[0].1);
    assert_eq!(diverse[1].1, plain[3].1);
    assert!((diverse[2].1 - plain[1].1 * f).abs() < 1e-5, "{diverse:?}");
    assert!(
        (diverse[3].1 - plain[2].1 * f * f).abs() < 1e-5,
        "{diverse:?}"
    );
    // Asked for fewer, the best of the diversified list come back.
    let (_d, two) = search(Rerank::default(), 2);
    assert_eq!(two, diverse[..2], "{two:?}");
}

#[test]
fn rerank_options_are_checked() {
    for bad in [
        Rerank {
            proximity: f32::NAN,
            ..Rerank::default()
        },
        Rerank {
            lead: -1.0,
            ..Rerank::default()
        },
        Rerank {
            length_norm: 1.5,
            ..Rerank::default()
        },
        Rerank {
            length_norm: f32::NAN,
            ..Rerank::default()
        },
        Rerank {
            same_file: 0.0,
            ..Rerank::default()
        },
        Rerank {
            same_file: 1.5,
            ..Rerank::default()
        },
        Rerank {
            same_file: f32::NAN,
            ..Rerank::default()
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let opts = IndexOptions {
            rerank: bad,
            ..IndexOptions::default()
        };
        assert!(matches!(
            WorkspaceIndex::open(dir.path(), opts),
            Err(IndexError::Invalid(_))
        ));
    }
}

#[test]
fn markup_names_are_not_searchable_and_heading_is_not_next_to_text() {
    let dir = tempfile::tempdir().unwrap();
    let idx = open(dir.path());
    idx.upsert_file(
        meta("a.rst", 1),
        &[passage(
            "Fox",
            ".. function:: spin(widget)\n\n   Spins a :class:`Widget` quickly.",
            1,
            3,
        )],
    )
    .unwrap();
    idx.commit().unwrap();
    assert_eq!(idx.search("widget", 5).unwrap().len(), 1);
    assert_eq!(idx.search("spin quickly", 5).unwrap().len(), 1);
    assert!(idx.search("class", 5).unwrap().is_empty());
    assert!(idx.search("function", 5).unwrap().is_empty());
    // The last word of the text and the heading are not a phrase.
    assert!(idx.search("\"quickly fox\"", 5).unwrap().is_empty());
    assert_eq!(idx.search("\"widget quickly\"", 5).unwrap().len(), 1);
}

#[test]
fn an_index_of_the_previous_analyzer_version_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    {
        // The schema as Capstan wrote it before the analyzers became `_v2`.
        let (schema, _) = schema(Analyzer::English);
        let mut b = Schema::builder();
        for (_, entry) in schema.fields() {
            let mut entry = entry.clone();
            if let tantivy::schema::FieldType::Str(opts) = entry.field_type()
                && let Some(ix) = opts.get_indexing_options()
            {
                let old = ix.clone().set_tokenizer("capstan_en_v1");
                let opts = opts.clone().set_indexing_options(old);
                entry = tantivy::schema::FieldEntry::new_text(entry.name().to_owned(), opts);
            }
            b.add_field(entry);
        }
        Index::create_in_dir(dir.path(), b.build()).unwrap();
    }
    is_a_mismatch_and_rebuilt(dir.path());
}

/// An index in `dir` whose schema is not this version's: opening it is a
/// mismatch, and `open_or_rebuild` makes a working one in its place.
fn is_a_mismatch_and_rebuilt(dir: &std::path::Path) {
    assert!(matches!(
        WorkspaceIndex::open(dir, IndexOptions::default()),
        Err(IndexError::SchemaMismatch(_))
    ));
    let idx = WorkspaceIndex::open_or_rebuild(dir, IndexOptions::default()).unwrap();
    populate(&idx);
    idx.commit().unwrap();
    assert!(!idx.search("proxy", 5).unwrap().is_empty());
}

#[test]
fn an_index_without_the_path_fast_field_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    {
        // The schema as Capstan wrote it before `path` became a fast field.
        let (schema, _) = schema(Analyzer::English);
        let mut b = Schema::builder();
        for (_, entry) in schema.fields() {
            if entry.name() == PATH_FIELD {
                b.add_text_field(PATH_FIELD, STRING | STORED);
            } else {
                b.add_field(entry.clone());
            }
        }
        Index::create_in_dir(dir.path(), b.build()).unwrap();
    }
    is_a_mismatch_and_rebuilt(dir.path());
}
