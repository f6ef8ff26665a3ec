//! Create, read, replace, append and info on documents this crate writes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Cursor, Read, Write};

use capstan_docx::{Block, ParagraphKind, Run};

const SAMPLE: &str = "\
# Quarterly report

Revenue grew **strongly** this *quarter*, and ***both*** matter.

## Highlights

- first point
- second point
  - nested point

3. step three
4. step four

| Region | Sales |
|--------|------:|
| North  | 10    |
| South  | 20    |

> A quote.

```
let x = 1;
```

### Small heading
#### Level four
##### Level five
###### Level six
";

fn parts(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
    (0..zip.len())
        .map(|i| {
            let mut f = zip.by_index(i).unwrap();
            let mut buf = Vec::new();
            f.read_to_end(&mut buf).unwrap();
            (f.name().unwrap().into_owned(), buf)
        })
        .collect()
}

fn part(bytes: &[u8], name: &str) -> String {
    let (_, b) = parts(bytes)
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name}"));
    String::from_utf8(b).unwrap()
}

#[test]
fn create_then_read_gives_the_content_back() {
    let bytes = capstan_docx::create_from_markdown(SAMPLE).unwrap();
    let doc = capstan_docx::read(&bytes).unwrap();
    assert_eq!(doc.title.as_deref(), Some("Quarterly report"));
    let paras: Vec<_> = doc.paragraphs().collect();
    assert_eq!(paras[0].kind, ParagraphKind::Heading(1));
    assert_eq!(paras[0].text(), "Quarterly report");
    assert_eq!(
        paras[1].runs,
        vec![
            Run {
                text: "Revenue grew ".into(),
                bold: false,
                italic: false
            },
            Run {
                text: "strongly".into(),
                bold: true,
                italic: false
            },
            Run {
                text: " this ".into(),
                bold: false,
                italic: false
            },
            Run {
                text: "quarter".into(),
                bold: false,
                italic: true
            },
            Run {
                text: ", and ".into(),
                bold: false,
                italic: false
            },
            Run {
                text: "both".into(),
                bold: true,
                italic: true
            },
            Run {
                text: " matter.".into(),
                bold: false,
                italic: false
            },
        ]
    );
    assert_eq!(paras[2].kind, ParagraphKind::Heading(2));
    assert_eq!(
        paras[3].kind,
        ParagraphKind::ListItem {
            level: 0,
            ordered: false,
            number: None
        }
    );
    assert_eq!(
        paras[5].kind,
        ParagraphKind::ListItem {
            level: 1,
            ordered: false,
            number: None
        }
    );
    assert_eq!(paras[5].text(), "nested point");
    assert_eq!(
        paras[6].kind,
        ParagraphKind::ListItem {
            level: 0,
            ordered: true,
            number: Some(3)
        }
    );
    assert_eq!(
        paras[7].kind,
        ParagraphKind::ListItem {
            level: 0,
            ordered: true,
            number: Some(4)
        }
    );
    let table = doc.tables().next().expect("a table");
    let cells: Vec<Vec<String>> = table
        .rows
        .iter()
        .map(|r| r.iter().map(|c| c.text()).collect())
        .collect();
    assert_eq!(
        cells,
        vec![
            vec!["Region", "Sales"],
            vec!["North", "10"],
            vec!["South", "20"]
        ]
    );
    let levels: Vec<u8> = doc.paragraphs().filter_map(|p| p.heading_level()).collect();
    assert_eq!(levels, vec![1, 2, 3, 4, 5, 6]);
    assert!(
        doc.paragraphs()
            .any(|p| p.kind == ParagraphKind::Quote && p.text() == "A quote.")
    );
    assert!(
        doc.paragraphs()
            .any(|p| p.kind == ParagraphKind::Code && p.text() == "let x = 1;")
    );

    let md = doc.to_markdown();
    for line in [
        "# Quarterly report",
        "Revenue grew **strongly** this *quarter*, and ***both*** matter.",
        "## Highlights",
        "- first point",
        "   - nested point",
        "3. step three",
        "4. step four",
        "| Region | Sales |",
        "| North | 10 |",
        "> A quote.",
        "let x = 1;",
        "###### Level six",
    ] {
        assert!(md.lines().any(|l| l == line), "missing {line:?} in:\n{md}");
    }
    let text = doc.to_text();
    assert!(text.contains("Region\tSales\n"), "{text}");
    assert!(text.contains("- first point\n"), "{text}");
}

#[test]
fn markdown_round_trip_is_stable() {
    let first = capstan_docx::read(&capstan_docx::create_from_markdown(SAMPLE).unwrap())
        .unwrap()
        .to_markdown();
    let second = capstan_docx::read(&capstan_docx::create_from_markdown(&first).unwrap())
        .unwrap()
        .to_markdown();
    assert_eq!(first, second);
}

#[test]
fn special_characters_survive() {
    let md = "Tom & Jerry <tags> \"quotes\" 'apostrophes' 5 * 3 _under_score\\_ ünïcödé 日本語 \u{1F600}\n";
    let doc = capstan_docx::read(&capstan_docx::create_from_markdown(md).unwrap()).unwrap();
    let text = doc.paragraphs().next().unwrap().text();
    assert_eq!(
        text,
        "Tom & Jerry <tags> \"quotes\" 'apostrophes' 5 * 3 _under_score_ ünïcödé 日本語 \u{1F600}"
    );
    // and back through Markdown, escaped where Markdown would read markup
    let again =
        capstan_docx::read(&capstan_docx::create_from_markdown(&doc.to_markdown()).unwrap())
            .unwrap();
    assert_eq!(again.paragraphs().next().unwrap().text(), text);
}

#[test]
fn explicit_title_and_empty_document() {
    let bytes =
        capstan_docx::create_from_markdown_with_title("just text", Some("My <Title>")).unwrap();
    assert_eq!(
        capstan_docx::info(&bytes).unwrap().title.as_deref(),
        Some("My <Title>")
    );
    let empty = capstan_docx::create_from_markdown("").unwrap();
    let doc = capstan_docx::read(&empty).unwrap();
    assert_eq!(doc.title, None);
    assert!(doc.to_text().trim().is_empty());
}

/// A paragraph split into runs: "Hello " + bold "Wor" + "ld " + italic "again".
fn split_run_docx() -> Vec<u8> {
    capstan_docx::create_from_markdown("Hello **Wor**ld *again*\n\nSecond World here, World.\n")
        .unwrap()
}

#[test]
fn replace_across_split_runs_keeps_the_formatting_where_the_match_starts() {
    let bytes = split_run_docx();
    let (out, count) = capstan_docx::replace(&bytes, "World again", "Earth").unwrap();
    assert_eq!(count, 1);
    let doc = capstan_docx::read(&out).unwrap();
    let p = doc.paragraphs().next().unwrap();
    assert_eq!(p.text(), "Hello Earth");
    assert_eq!(
        p.runs,
        vec![
            Run {
                text: "Hello ".into(),
                bold: false,
                italic: false
            },
            Run {
                text: "Earth".into(),
                bold: true,
                italic: false
            },
        ]
    );
    // A match inside a plain run stays plain; several matches in one paragraph all go.
    let (out, count) = capstan_docx::replace(&out, "World", "Mars").unwrap();
    assert_eq!(count, 2);
    let doc = capstan_docx::read(&out).unwrap();
    assert_eq!(
        doc.paragraphs().nth(1).unwrap().text(),
        "Second Mars here, Mars."
    );
}

#[test]
fn replace_copies_every_other_part_byte_for_byte() {
    let bytes = split_run_docx();
    let (out, _) = capstan_docx::replace(&bytes, "Hello", "Bye & <farewell>").unwrap();
    let before = parts(&bytes);
    let after = parts(&out);
    assert_eq!(
        before.iter().map(|p| &p.0).collect::<Vec<_>>(),
        after.iter().map(|p| &p.0).collect::<Vec<_>>()
    );
    for ((name, a), (_, b)) in before.iter().zip(&after) {
        if name != "word/document.xml" {
            assert_eq!(a, b, "{name} changed");
        }
    }
    let doc = capstan_docx::read(&out).unwrap();
    assert!(
        doc.paragraphs()
            .next()
            .unwrap()
            .text()
            .starts_with("Bye & <farewell> ")
    );
}

#[test]
fn replace_without_a_match_returns_the_original() {
    let bytes = split_run_docx();
    let (out, count) = capstan_docx::replace(&bytes, "absent", "x").unwrap();
    assert_eq!(count, 0);
    assert_eq!(out, bytes);
    let err = capstan_docx::replace(&bytes, "", "x").unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
}

#[test]
fn replace_finds_text_in_tables_and_never_across_paragraphs() {
    let bytes = capstan_docx::create_from_markdown(
        "end of one\n\ntwo starts\n\n| a | b |\n|---|---|\n| one | two |\n",
    )
    .unwrap();
    let (_, count) = capstan_docx::replace(&bytes, "onetwo", "x").unwrap();
    assert_eq!(count, 0);
    let (out, count) = capstan_docx::replace(&bytes, "one", "1").unwrap();
    assert_eq!(count, 2);
    let doc = capstan_docx::read(&out).unwrap();
    assert_eq!(doc.tables().next().unwrap().rows[1][0].text(), "1");
}

#[test]
fn append_adds_blocks_before_the_section_properties() {
    let bytes =
        capstan_docx::create_from_markdown("# Start\n\n- a\n- b\n\n1. one\n2. two\n").unwrap();
    let out = capstan_docx::append(&bytes, "## Added\n\nMore **text**.\n\n1. again one\n2. again two\n\n- c\n\n| x | y |\n|---|---|\n| 1 | 2 |\n").unwrap();
    let doc = capstan_docx::read(&out).unwrap();
    let paras: Vec<_> = doc.paragraphs().filter(|p| !p.text().is_empty()).collect();
    let texts: Vec<String> = paras.iter().map(|p| p.text()).collect();
    assert_eq!(
        texts,
        vec![
            "Start",
            "a",
            "b",
            "one",
            "two",
            "Added",
            "More text.",
            "again one",
            "again two",
            "c"
        ]
    );
    assert_eq!(paras[5].kind, ParagraphKind::Heading(2));
    assert!(paras[6].runs.iter().any(|r| r.bold && r.text == "text"));
    // The appended numbered list restarts at 1.
    assert_eq!(
        paras[7].kind,
        ParagraphKind::ListItem {
            level: 0,
            ordered: true,
            number: Some(1)
        }
    );
    assert_eq!(
        paras[8].kind,
        ParagraphKind::ListItem {
            level: 0,
            ordered: true,
            number: Some(2)
        }
    );
    assert_eq!(
        paras[9].kind,
        ParagraphKind::ListItem {
            level: 0,
            ordered: false,
            number: None
        }
    );
    assert_eq!(doc.tables().count(), 1);
    let xml = part(&out, "word/document.xml");
    let sect = xml.rfind("<w:sectPr").unwrap();
    assert!(xml.rfind("again two").unwrap() < sect);
    assert!(
        xml[sect..].starts_with("<w:sectPr>") && xml.ends_with("</w:sectPr></w:body></w:document>")
    );
    // Styles and content types untouched (all styles were there already).
    assert_eq!(
        part(&out, "word/styles.xml"),
        part(&bytes, "word/styles.xml")
    );
}

/// A package with only the three parts a reader needs: no styles, no numbering.
fn bare_docx(body: &str) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    let files = [
        ("[Content_Types].xml", "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\"><Default Extension=\"rels\" ContentType=\"application/vnd.openxmlformats-package.relationships+xml\"/><Default Extension=\"xml\" ContentType=\"application/xml\"/><Override PartName=\"/word/document.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml\"/></Types>".to_owned()),
        ("_rels/.rels", "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\"><Relationship Id=\"rId1\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument\" Target=\"word/document.xml\"/></Relationships>".to_owned()),
        ("word/document.xml", format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body>{body}</w:body></w:document>")),
    ];
    for (name, text) in files {
        w.start_file(name, opts).unwrap();
        w.write_all(text.as_bytes()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[test]
fn append_to_a_document_without_styles_or_numbering_adds_them() {
    let bytes = bare_docx("<w:p><w:r><w:t>Existing</w:t></w:r></w:p>");
    let out = capstan_docx::append(&bytes, "# New\n\n1. one\n2. two\n").unwrap();
    let doc = capstan_docx::read(&out).unwrap();
    let paras: Vec<_> = doc.paragraphs().collect();
    assert_eq!(paras[0].text(), "Existing");
    assert_eq!(paras[1].kind, ParagraphKind::Heading(1));
    assert_eq!(
        paras[3].kind,
        ParagraphKind::ListItem {
            level: 0,
            ordered: true,
            number: Some(2)
        }
    );
    assert!(part(&out, "[Content_Types].xml").contains("/word/numbering.xml"));
    assert!(part(&out, "[Content_Types].xml").contains("/word/styles.xml"));
    assert!(part(&out, "word/_rels/document.xml.rels").contains("numbering.xml"));
    // No sectPr: appended at the end of the body.
    assert!(part(&out, "word/document.xml").ends_with("</w:p></w:body></w:document>"));
}

#[test]
fn append_of_nothing_is_an_error() {
    let bytes = capstan_docx::create_from_markdown("x").unwrap();
    let err = capstan_docx::append(&bytes, "  \n").unwrap_err();
    assert!(err.to_string().contains("no content"), "{err}");
}

#[test]
fn info_counts() {
    let bytes = capstan_docx::create_from_markdown(SAMPLE).unwrap();
    let info = capstan_docx::info(&bytes).unwrap();
    assert_eq!(info.title.as_deref(), Some("Quarterly report"));
    assert_eq!(info.tables, 1);
    // 6 headings + 1 paragraph + 5 list items + quote + code line
    assert_eq!(info.paragraphs, 14);
    let levels: Vec<(u8, &str)> = info
        .headings
        .iter()
        .map(|h| (h.level, h.text.as_str()))
        .collect();
    assert_eq!(
        levels[..3],
        [
            (1, "Quarterly report"),
            (2, "Highlights"),
            (3, "Small heading")
        ]
    );
    assert_eq!(info.headings.len(), 6);
    let words: usize = capstan_docx::read(&bytes)
        .unwrap()
        .all_paragraphs()
        .iter()
        .map(|p| p.text().split_whitespace().count())
        .sum();
    assert_eq!(info.words, words);
    assert_eq!(
        info.words,
        2 + 8 + 1 + 2 + 2 + 2 + 2 + 2 + 6 + 2 + 4 + 2 + 2 + 2 + 2
    );
}

#[test]
fn blocks_keep_reading_order() {
    let bytes =
        capstan_docx::create_from_markdown("before\n\n| a |\n|---|\n| b |\n\nafter\n").unwrap();
    let doc = capstan_docx::read(&bytes).unwrap();
    let kinds: Vec<&str> = doc
        .blocks
        .iter()
        .map(|b| match b {
            Block::Paragraph(p) if p.text().is_empty() => "empty",
            Block::Paragraph(_) => "p",
            Block::Table(_) => "table",
        })
        .collect();
    assert_eq!(kinds, vec!["p", "table", "p"]);
}
