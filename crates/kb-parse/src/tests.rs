use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use super::*;

type Row = (String, u32, u32, String);

fn rows_with(path: &str, text: &[u8], opts: &ChunkOptions) -> Vec<Row> {
    parse(path, text, opts)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .passages
        .into_iter()
        .map(|p| (p.heading, p.line_start, p.line_end, p.text))
        .collect()
}

fn rows(path: &str, text: &str) -> Vec<Row> {
    rows_with(path, text.as_bytes(), &ChunkOptions::default())
}

fn row(h: &str, a: u32, b: u32, t: &str) -> Row {
    (h.to_owned(), a, b, t.to_owned())
}

#[test]
fn format_detection() {
    assert_eq!(detect_format("docs/A.MD"), Some(Format::Markdown));
    assert_eq!(detect_format("x/faq.rst.txt"), Some(Format::Rst));
    assert_eq!(detect_format("notes.txt"), Some(Format::PlainText));
    assert_eq!(detect_format("src/main.rs"), Some(Format::Code));
    assert_eq!(detect_format("Makefile"), Some(Format::Code));
    assert_eq!(detect_format("README"), Some(Format::PlainText));
    assert_eq!(detect_format("a/b.html"), Some(Format::Html));
    assert_eq!(detect_format("a/b.docx"), Some(Format::Docx));
    assert_eq!(detect_format("img.png"), None);
    assert_eq!(detect_format(".env"), None);
    assert_eq!(detect_format("noext"), None);
}

#[test]
fn files_without_a_known_name_are_text_by_content() {
    let licence = b"Copyright (c) 2024 The Authors\n\nPermission is hereby granted...\n";
    for name in [
        "copyright",
        "usr/share/doc/x/GPL-2",
        "Apache-2.0",
        "notes.unknownext",
    ] {
        assert_eq!(
            detect_format_by_content(name, licence),
            Some(Format::PlainText),
            "{name}"
        );
    }
    let parsed = parse("doc/copyright", licence, &ChunkOptions::default()).unwrap();
    assert_eq!(parsed.passages.len(), 1);
    assert!(
        parsed.passages[0]
            .text
            .contains("Permission is hereby granted")
    );
    // Binary content, a known binary extension, secrets and dot files stay out.
    assert_eq!(
        detect_format_by_content("blob", b"\x7fELF\x02\x01\x01\0\0"),
        None
    );
    assert_eq!(detect_format_by_content("logo.png", licence), None);
    assert_eq!(
        detect_format_by_content("id_rsa", b"-----BEGIN KEY-----\n"),
        None
    );
    assert_eq!(
        detect_format_by_content("server.pem", b"-----BEGIN KEY-----\n"),
        None
    );
    assert_eq!(detect_format_by_content(".env", b"TOKEN=secret\n"), None);
    assert_eq!(detect_format_by_content("empty", b""), None);
    // Control characters everywhere: not text. A UTF-8 character cut by the sample: text.
    assert_eq!(
        detect_format_by_content("ctl", &[1u8, 2, 3, 4, b'a', 5, 6][..]),
        None
    );
    let mut cut = "é".repeat(10).into_bytes();
    cut.pop();
    assert!(looks_like_text(&cut));
    assert!(!looks_like_text(b"\xff\xfe\xfd plain"));
}

const MD: &str = "# Title

Intro para.

Setext Sub
----------

Body line one.
Body line two.

```rust
fn main() {}

let x = 1;
```

## Empty

### Deeper
Deep text.
";

#[test]
fn markdown_sections_lines_and_headings() {
    assert_eq!(
        rows("doc.md", MD),
        [
            row("Title", 3, 3, "Intro para."),
            row(
                "Title > Setext Sub",
                8,
                15,
                "Body line one.\nBody line two.\n\n```rust\nfn main() {}\n\nlet x = 1;\n```"
            ),
            row("Title > Empty > Deeper", 20, 20, "Deep text."),
        ]
    );
}

#[test]
fn markdown_code_fence_is_never_split() {
    let mut md = String::from("# Code\n\nSome words before the fence.\n\n~~~\n");
    for i in 0..15 {
        md.push_str(&format!("line {i:02} of code\n"));
    }
    md.push_str("~~~\n\nAfter.\n");
    // Fence: 17 lines, ~230 chars; target 80 → cap 320 keeps it whole.
    let opts = ChunkOptions {
        target_chars: 80,
        overlap_chars: 0,
        ..ChunkOptions::default()
    };
    let got = rows_with("a.md", md.as_bytes(), &opts);
    assert_eq!(got.len(), 3);
    assert_eq!((got[0].1, got[0].2), (3, 3));
    assert_eq!((got[1].1, got[1].2), (5, 21));
    assert!(got[1].3.starts_with("~~~\nline 00") && got[1].3.ends_with("line 14 of code\n~~~"));
    assert_eq!((got[2].1, got[2].2, got[2].3.as_str()), (23, 23, "After."));
    // Past 4x the target the fence is cut, at line breaks only.
    let opts = ChunkOptions {
        target_chars: 40,
        overlap_chars: 0,
        ..ChunkOptions::default()
    };
    let got = rows_with("a.md", md.as_bytes(), &opts);
    let code: Vec<_> = got.iter().filter(|r| r.3.contains("of code")).collect();
    assert!(code.len() > 1);
    for r in code {
        assert!(
            r.3.lines()
                .all(|l| l == "~~~" || l.starts_with("line ") || l.is_empty() || l == "After."),
            "{r:?}"
        );
    }
}

#[test]
fn markdown_long_section_splits_at_paragraphs_with_overlap() {
    let mut md = String::from("# Big\n\n");
    for i in 0..6 {
        // 3 lines of 39 chars + newlines = 119 chars per paragraph.
        for j in 0..3 {
            md.push_str(&format!("paragraph {i} line {j} padding padding pad\n"));
        }
        md.push('\n');
    }
    let opts = ChunkOptions {
        target_chars: 250,
        overlap_chars: 50,
        ..ChunkOptions::default()
    };
    let got = rows_with("big.md", md.as_bytes(), &opts);
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|r| r.0 == "Big"));
    // Two paragraphs per passage; the next one repeats the last line of the previous one.
    assert_eq!((got[0].1, got[0].2), (3, 9));
    assert_eq!((got[1].1, got[1].2), (9, 17));
    assert!(got[1].3.starts_with("paragraph 1 line 2"));
    assert_eq!((got[2].1, got[2].2), (17, 25));
}

const RST: &str = "=====
Title
=====

Intro.

Section A
---------

Text A::

   literal
   block

Sub A1
~~~~~~

Text A1.

Section B
---------

.. code-block:: python
   :linenos:

   x = 1

   y = 2

.. _target:

.. note::

   A note body.

.. function:: spam(eggs)

   Does spam.

.. toctree::
   :maxdepth: 2

   intro
";

#[test]
fn rst_sections_literals_and_directives() {
    assert_eq!(
        rows("guide.rst", RST),
        [
            row("Title", 5, 5, "Intro."),
            row("Title > Section A", 10, 13, "Text A::\n\nliteral\nblock"),
            row("Title > Section A > Sub A1", 18, 18, "Text A1."),
            row(
                "Title > Section B",
                26,
                38,
                "x = 1\n\ny = 2\n\nA note body.\n\n.. function:: spam(eggs)\n\nDoes spam."
            ),
        ]
    );
}

#[test]
fn rst_levels_follow_first_appearance() {
    let text = "Top\n---\n\na\n\nNext\n====\n\nb\n\nOther\n-----\n\nc\n";
    assert_eq!(
        rows("x.rst", text),
        [
            row("Top", 4, 4, "a"),
            row("Top > Next", 9, 9, "b"),
            row("Other", 14, 14, "c"),
        ]
    );
    // A short underline under a longer title is text (as in docutils), a long one a title.
    let text = "Not a title\n::\n\n   code\n\nA title that is long\n=====\n\nbody\n";
    assert_eq!(
        rows("y.rst", text),
        [
            row("", 1, 4, "Not a title\n::\n\ncode"),
            row("A title that is long", 9, 9, "body"),
        ]
    );
}

#[test]
fn rst_literal_block_is_kept_whole() {
    let mut text = String::from("Title\n=====\n\nExample::\n\n");
    for i in 0..20 {
        text.push_str(&format!("    code line {i:02}\n"));
        if i == 9 {
            text.push('\n');
        }
    }
    text.push_str("\nAfter the code.\n");
    let opts = ChunkOptions {
        target_chars: 100,
        overlap_chars: 30,
        ..ChunkOptions::default()
    };
    let got = rows_with("l.rst", text.as_bytes(), &opts);
    let code: Vec<_> = got.iter().filter(|r| r.3.contains("code line")).collect();
    assert_eq!(code.len(), 1, "{got:?}");
    // The short lead-in stays with its code rather than being a passage of its own.
    assert_eq!((code[0].1, code[0].2), (4, 26));
    assert!(code[0].3.starts_with("Example::\n\ncode line 00"));
    assert_eq!(got.iter().filter(|r| r.3.contains("Example::")).count(), 1);
    // No overlap is taken from code.
    assert_eq!(got.last().map(|r| r.3.as_str()), Some("After the code."));
}

#[test]
fn txt_that_looks_like_rst_and_plain_text() {
    assert_eq!(
        rows("notes.txt", "Heading\n=======\n\nBody text.\n"),
        [row("Heading", 4, 4, "Body text.")]
    );
    assert_eq!(
        rows("plain.txt", "first para\nline two\n\n\nsecond para\n"),
        [row("", 1, 5, "first para\nline two\n\nsecond para")]
    );
    assert_eq!(
        rows("README", "hello\r\nworld\r\n"),
        [row("", 1, 2, "hello\nworld")]
    );
}

#[test]
fn source_code_blocks_under_the_path() {
    let code = "fn a() {\n    1\n}\n\nfn b() {\n    2\n}\n";
    assert_eq!(
        rows("src/lib.rs", code),
        [row(
            "src/lib.rs",
            1,
            7,
            "fn a() {\n    1\n}\n\nfn b() {\n    2\n}"
        )]
    );
    let opts = ChunkOptions {
        target_chars: 20,
        overlap_chars: 0,
        ..ChunkOptions::default()
    };
    let got = rows_with("src/lib.rs", code.as_bytes(), &opts);
    assert_eq!(
        got,
        [
            row("src/lib.rs", 1, 3, "fn a() {\n    1\n}"),
            row("src/lib.rs", 5, 7, "fn b() {\n    2\n}"),
        ]
    );
}

const HTML: &str = "<html><head><title>T</title><style>p{color:red}</style></head>
<body>
<h1>Main</h1>
<p>First para
continues here &amp; more.</p>
<script>var s = \"<h2>no</h2>\"; if (a<b) {}</script>
<h2>Sub <em>section</em><a class=\"headerlink\" href=\"#s\">¶</a></h2>
<pre>code line 1

code line 3</pre>
<ul><li>item one</li><li>item <b>two</b></li></ul>
<nav><a href=x>Home</a></nav>
</body></html>
";

#[test]
fn html_headings_text_and_lines() {
    assert_eq!(
        rows("page.html", HTML),
        [
            row("Main", 4, 5, "First para\ncontinues here & more."),
            row(
                "Main > Sub section",
                8,
                11,
                "code line 1\n\ncode line 3\n\nitem one\n\nitem two"
            ),
        ]
    );
}

#[test]
fn html_malformed_never_fails() {
    for junk in [
        "<<<>>><h1",
        "<h1>unclosed <p>text",
        "</p></h2>text<script>never closed",
        "<pre><pre></pre></pre></pre>x",
        "<h3>a</h3><h1>b</h1><h2>c</h2>text",
        "&#xFFFFFF; &bogus; <!-- open comment",
    ] {
        let parsed = parse("j.html", junk.as_bytes(), &ChunkOptions::default()).unwrap();
        for p in parsed.passages {
            assert!(p.line_start <= p.line_end && !p.text.trim().is_empty());
        }
    }
    assert_eq!(
        rows("j.html", "<h3>a</h3><h1>b</h1><h2>c</h2>text"),
        [row("b > c", 1, 1, "text")]
    );
}

fn docx(parts: &[(&str, &str)]) -> Vec<u8> {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    let opts = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    for (name, body) in parts {
        zip.start_file(*name, opts).unwrap();
        zip.write_all(body.as_bytes()).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

fn document(body: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>{body}</w:body></w:document>"#
    )
}

const STYLES: &str = r#"<?xml version="1.0"?>
<w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">
<w:style w:type="paragraph" w:styleId="berschrift2"><w:name w:val="heading 2"/></w:style>
<w:style w:type="paragraph" w:styleId="Normal"><w:name w:val="Normal"/></w:style>
</w:styles>"#;

#[test]
fn docx_paragraphs_and_heading_styles() {
    let body = r#"<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Intro</w:t></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">Hello </w:t></w:r><w:r><w:t>world</w:t></w:r></w:p>
<w:p/>
<w:p><w:r><w:t>Tab</w:t><w:tab/><w:t>here Tom &amp; Jerry&#33;</w:t></w:r></w:p>
<w:p><w:pPr><w:pStyle w:val="berschrift2"/></w:pPr><w:r><w:t>Details</w:t></w:r></w:p>
<w:p><w:r><w:delText>Deleted</w:delText><w:t>Kept</w:t></w:r></w:p>
<w:p><w:pPr><w:tabs><w:tab w:val="left" w:pos="720"/></w:tabs></w:pPr><w:r><w:t>No tabs</w:t></w:r></w:p>"#;
    let bytes = docx(&[
        ("word/document.xml", &document(body)),
        ("word/styles.xml", STYLES),
    ]);
    assert_eq!(
        rows_with("r.docx", &bytes, &ChunkOptions::default()),
        [
            row("Intro", 2, 4, "Hello world\n\nTab\there Tom & Jerry!"),
            row("Intro > Details", 6, 7, "Kept\n\nNo tabs"),
        ]
    );
}

#[test]
fn docx_main_part_from_rels_and_custom_entities_not_expanded() {
    let rels = r#"<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="/word/document2.xml"/></Relationships>"#;
    let doc = r#"<?xml version="1.0"?>
<!DOCTYPE w:document [<!ENTITY lol "lollollollollol"><!ENTITY lol2 "&lol;&lol;&lol;">]>
<w:document xmlns:w="x"><w:body><w:p><w:r><w:t>a&lol2;b</w:t></w:r></w:p></w:body></w:document>"#;
    let bytes = docx(&[("_rels/.rels", rels), ("word/document2.xml", doc)]);
    assert_eq!(
        rows_with("e.docx", &bytes, &ChunkOptions::default()),
        [row("", 1, 1, "ab")]
    );
}

fn docx_err(bytes: &[u8]) -> String {
    match parse("bad.docx", bytes, &ChunkOptions::default()) {
        Err(e) => e.to_string(),
        Ok(p) => panic!("expected an error, got {p:?}"),
    }
}

#[test]
fn docx_malformed_inputs_are_errors() {
    assert!(docx_err(b"PK\x03\x04garbage").starts_with("malformed docx: not a zip"));
    assert!(docx_err(b"").starts_with("malformed docx: not a zip"));
    let no_doc = docx(&[("word/styles.xml", STYLES)]);
    assert_eq!(
        docx_err(&no_doc),
        "malformed docx: no main document part (word/document.xml)"
    );
    let bad_xml = docx(&[("word/document.xml", "<w:document><w:p><w:t>x</w:p>")]);
    let e = docx_err(&bad_xml);
    assert!(
        e.starts_with("malformed docx: word/document.xml: invalid XML at byte"),
        "{e}"
    );
    let not_utf8 = {
        let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
        zip.start_file("word/document.xml", SimpleFileOptions::default())
            .unwrap();
        zip.write_all(b"<w:document>\xff\xfe</w:document>").unwrap();
        zip.finish().unwrap().into_inner()
    };
    assert!(docx_err(&not_utf8).contains("not UTF-8"));
    let deep = document(&"<w:p>".repeat(100));
    let e = docx_err(&docx(&[("word/document.xml", &deep)]));
    assert!(e.contains("nested too deeply"), "{e}");
    // Broken styles only lose the style names, not the document.
    let doc = document(
        r#"<w:p><w:pPr><w:pStyle w:val="Heading2"/></w:pPr><w:r><w:t>H</w:t></w:r></w:p><w:p><w:r><w:t>b</w:t></w:r></w:p>"#,
    );
    let bytes = docx(&[
        ("word/document.xml", &doc),
        ("word/styles.xml", "<w:styles><oops"),
    ]);
    assert_eq!(
        rows_with("s.docx", &bytes, &ChunkOptions::default()),
        [row("H", 2, 2, "b")]
    );
}

#[test]
fn docx_decompressed_size_is_capped() {
    // 1 MiB of spaces compresses to ~1 KiB: a small zip bomb against a 64 KiB cap.
    let doc = document(&" ".repeat(1 << 20));
    let bytes = docx(&[("word/document.xml", &doc)]);
    assert!(bytes.len() < 8 * 1024);
    match docx::blocks(&bytes, 64 * 1024) {
        Err(ParseError::TooLarge { limit, .. }) => assert_eq!(limit, 64 * 1024),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // Under the real cap it parses.
    assert!(docx::blocks(&bytes, 4 << 20).is_ok());
}

#[test]
fn binary_invalid_utf8_size_and_unsupported() {
    let opts = ChunkOptions::default();
    assert_eq!(parse("a.txt", b"abc\0def", &opts), Err(ParseError::Binary));
    let parsed = parse("a.txt", b"caf\xe9 ok\n", &opts).unwrap();
    assert_eq!(parsed.passages[0].text, "caf\u{FFFD} ok");
    assert_eq!(parsed.warnings.len(), 1);
    assert!(parsed.warnings[0].contains("invalid UTF-8"));
    let small = ChunkOptions {
        max_file_bytes: 4,
        ..ChunkOptions::default()
    };
    assert_eq!(
        parse("a.txt", b"12345", &small),
        Err(ParseError::TooLarge { size: 5, limit: 4 })
    );
    assert!(matches!(
        parse("a.png", b"x", &opts),
        Err(ParseError::Unsupported { .. })
    ));
    // A UTF-8 BOM is not text.
    assert_eq!(
        rows_with("b.md", b"\xEF\xBB\xBF# H\n\nx\n", &opts),
        [row("H", 3, 3, "x")]
    );
    // Empty and whitespace-only files give no passages.
    assert!(rows("e.md", "").is_empty());
    assert!(rows("e.md", "# Only a heading\n\n   \n").is_empty());
}

/// Pseudo-random input through every format: no panic, and the passage invariants hold.
#[test]
fn garbage_never_panics() {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet = b"ab #=-~*`<>/&;:.\n\n  \t|[]!_hp1234";
    let opts = ChunkOptions {
        target_chars: 40,
        overlap_chars: 10,
        ..ChunkOptions::default()
    };
    for round in 0..300 {
        let len = (next() % 600) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect();
        for path in ["f.md", "f.rst", "f.txt", "f.html", "f.py", "f.docx"] {
            match parse(path, &bytes, &opts) {
                Ok(parsed) => {
                    for p in parsed.passages {
                        assert!(p.line_start >= 1 && p.line_start <= p.line_end, "{round}");
                        assert!(!p.text.trim().is_empty(), "{round} {path}");
                    }
                }
                Err(e) => assert!(path == "f.docx", "{path}: {e}"),
            }
        }
    }
}

#[test]
fn ignore_rules_follow_gitignore_semantics() {
    let mut rules = IgnoreRules::new();
    assert!(
        rules
            .add_dir("", "*.log\nbuild/\n/secret.txt\n", "!keep.log\n")
            .is_empty()
    );
    rules.add_dir("docs", "drafts/\n!important.log\n", "");
    rules.add_dir("docs/drafts", "!*\n", "");
    let cases = [
        ("a.log", false, true),
        ("keep.log", false, false),
        ("sub/x.log", false, true),
        ("build", true, true),
        ("build", false, false), // `build/` only matches directories
        ("build/out.txt", false, true),
        ("secret.txt", false, true),
        ("sub/secret.txt", false, false), // anchored to the root
        ("docs/important.log", false, false),
        ("docs/drafts", true, true),
        ("docs/drafts/a.md", false, true), // parent excluded: cannot re-include
        ("src/main.rs", false, false),
        ("target", true, true),
        ("crates/x/target/debug/a.rs", false, true),
        ("node_modules/p/index.js", false, true),
        (".git/config", false, true),
        ("a/__pycache__", true, true),
        ("target", false, false), // a file named target is fine
        ("./src/./lib.rs", false, false),
    ];
    for (path, is_dir, want) in cases {
        assert_eq!(rules.is_ignored(path, is_dir), want, "{path} dir={is_dir}");
    }
    // Re-registering a directory replaces its rules.
    rules.add_dir("", "", "");
    assert!(!rules.is_ignored("a.log", false));
    assert!(IgnoreRules::is_builtin_skip(".venv"));
}
