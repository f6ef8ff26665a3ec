//! Every kind of bad input gives an error that says what was wrong, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Cursor, Write};

use capstan_docx::Error;
use zip::write::SimpleFileOptions;

fn zip_of(files: &[(&str, &[u8])], stored: bool) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let mut opts = SimpleFileOptions::default().large_file(true);
    if stored {
        opts = opts.compression_method(zip::CompressionMethod::Stored);
    }
    for (name, bytes) in files {
        w.start_file(*name, opts).unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

const RELS: &[u8] = b"<?xml version=\"1.0\"?><Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\"><Relationship Id=\"rId1\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument\" Target=\"word/document.xml\"/></Relationships>";

fn docx_with(document: &[u8]) -> Vec<u8> {
    zip_of(
        &[("_rels/.rels", RELS), ("word/document.xml", document)],
        false,
    )
}

/// Runs every entry point on `bytes` and checks each error's message.
fn all_fail(bytes: &[u8], expect: &str) {
    let errors = [
        capstan_docx::read(bytes).map(|_| ()).unwrap_err(),
        capstan_docx::info(bytes).map(|_| ()).unwrap_err(),
        capstan_docx::replace(bytes, "a", "b")
            .map(|_| ())
            .unwrap_err(),
        capstan_docx::append(bytes, "text").map(|_| ()).unwrap_err(),
    ];
    for e in errors {
        assert!(e.to_string().contains(expect), "expected {expect:?} in {e}");
    }
}

#[test]
fn encrypted_or_legacy_doc_is_refused_by_name() {
    let mut ole = vec![0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];
    ole.extend_from_slice(&[0u8; 504]);
    all_fail(&ole, "encrypted or legacy .doc files are not supported");
    assert!(matches!(
        capstan_docx::read(&ole),
        Err(Error::Encrypted { .. })
    ));
}

#[test]
fn not_a_zip() {
    all_fail(b"", "the file is empty");
    all_fail(b"just some text, not a document", "no zip signature");
    all_fail(
        b"PK\x03\x04 this is not really a zip",
        "corrupted zip archive",
    );
}

#[test]
fn truncated_zip() {
    let good =
        capstan_docx::create_from_markdown("# Title\n\nSome text that fills the file a little.")
            .unwrap();
    let cut = &good[..good.len() / 2];
    all_fail(cut, "corrupted zip archive");
}

#[test]
fn corrupted_entry_data() {
    let mut bytes = docx_with(b"<w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body><w:p><w:r><w:t>hello hello hello hello</w:t></w:r></w:p></w:body></w:document>");
    // Flip bytes inside the compressed data of the document part (after its local header).
    let at = bytes
        .windows(17)
        .position(|w| w == b"word/document.xml")
        .unwrap()
        + 17;
    for b in &mut bytes[at + 4..at + 24] {
        *b ^= 0x5A;
    }
    let err = capstan_docx::read(&bytes).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("word/document.xml"), "{msg}");
}

#[test]
fn missing_document_part() {
    let bytes = zip_of(
        &[
            ("[Content_Types].xml", b"<Types/>"),
            ("docProps/core.xml", b"<x/>"),
        ],
        false,
    );
    all_fail(&bytes, "missing part word/document.xml");
    // The relationship names a part that is not there.
    let bytes = zip_of(&[("_rels/.rels", RELS)], false);
    all_fail(&bytes, "missing part word/document.xml");
}

#[test]
fn an_xlsx_is_not_a_docx() {
    let bytes = zip_of(&[("xl/workbook.xml", b"<workbook/>")], false);
    let err = capstan_docx::read(&bytes).unwrap_err().to_string();
    assert!(
        err.contains("missing part word/document.xml") && err.contains("Word"),
        "{err}"
    );
}

#[test]
fn a_real_workbook_is_not_a_docx() {
    // A package whose main part is a workbook: refused by name, not read as empty.
    let rels = b"<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\"><Relationship Id=\"rId1\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument\" Target=\"xl/workbook.xml\"/></Relationships>";
    let bytes = zip_of(
        &[
            ("_rels/.rels", rels),
            (
                "xl/workbook.xml",
                b"<workbook xmlns=\"http://schemas.openxmlformats.org/spreadsheetml/2006/main\"/>",
            ),
        ],
        false,
    );
    all_fail(
        &bytes,
        "not a .docx file: its main part xl/workbook.xml is a <workbook>, not a <document> (it looks like an Excel workbook)",
    );
}

#[test]
fn xml_bombs_are_refused() {
    let bomb = br#"<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>&lol3;</w:t></w:r></w:p></w:body></w:document>"#;
    all_fail(
        &docx_with(bomb),
        "DOCTYPE and ENTITY declarations are not allowed",
    );
    all_fail(&docx_with(bomb), "word/document.xml");
    // External entities too, and in any part we read (here the relationships).
    let xxe = b"<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><Relationships>&x;</Relationships>";
    let bytes = zip_of(
        &[
            ("_rels/.rels", xxe),
            ("word/document.xml", b"<w:document/>"),
        ],
        false,
    );
    all_fail(&bytes, "part _rels/.rels: DOCTYPE");
}

#[test]
fn doctype_in_styles_is_refused_too() {
    let doc = capstan_docx::create_from_markdown("text").unwrap();
    // Rebuild with a styles part that declares an entity.
    let mut zip = zip::ZipArchive::new(Cursor::new(&doc[..])).unwrap();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut buf).unwrap();
        let name = f.name().unwrap().into_owned();
        if name == "word/styles.xml" {
            buf = b"<!DOCTYPE x [<!ENTITY a \"b\">]><w:styles/>".to_vec();
        }
        files.push((name, buf));
    }
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    let bytes = zip_of(&refs, false);
    let err = capstan_docx::read(&bytes).unwrap_err().to_string();
    assert!(
        err.contains("word/styles.xml") && err.contains("DOCTYPE"),
        "{err}"
    );
}

#[test]
fn huge_parts_are_refused() {
    // 65 MiB declared (stored, so the test stays fast): refused before decompressing.
    let big = vec![b' '; 65 * 1024 * 1024];
    let bytes = zip_of(&[("_rels/.rels", RELS), ("word/document.xml", &big)], true);
    let err = capstan_docx::read(&bytes).unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("word/document.xml") && msg.contains("too large") && msg.contains("67108864"),
        "{msg}"
    );
}

#[test]
fn malformed_xml_names_the_part() {
    all_fail(
        &docx_with(b"<w:document><w:body><w:p></w:body></w:document>"),
        "part word/document.xml: invalid XML",
    );
    all_fail(&docx_with(b"\xff\xfe<\x00w\x00"), "word/document.xml");
    all_fail(
        &docx_with(b"<w:document>\xc3\x28</w:document>"),
        "not UTF-8",
    );
}

#[test]
fn deep_nesting_is_bounded() {
    let mut xml = String::from(
        "<w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body>",
    );
    for _ in 0..100 {
        xml.push_str("<w:tbl><w:tr><w:tc>");
    }
    for _ in 0..100 {
        xml.push_str("<w:p/></w:tc></w:tr></w:tbl>");
    }
    xml.push_str("</w:body></w:document>");
    let err = capstan_docx::read(&docx_with(xml.as_bytes()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("nested too deeply"), "{err}");
}

#[test]
fn traversal_entry_names_are_harmless() {
    // We never extract to disk: an entry named ../../evil is just a name.
    let doc = b"<w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body><w:p><w:r><w:t>ok</w:t></w:r></w:p></w:body></w:document>";
    let bytes = zip_of(
        &[
            ("_rels/.rels", RELS),
            ("../../evil.sh", b"#!/bin/sh"),
            ("word/document.xml", doc),
        ],
        false,
    );
    let read = capstan_docx::read(&bytes).unwrap();
    assert_eq!(read.to_text(), "ok\n");
    let (out, n) = capstan_docx::replace(&bytes, "ok", "fine").unwrap();
    assert_eq!(n, 1);
    assert_eq!(capstan_docx::read(&out).unwrap().to_text(), "fine\n");
}

#[test]
fn undeclared_entities_are_not_expanded() {
    // Without a DTD an unknown entity is an error or dropped, never expanded.
    let doc = b"<w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body><w:p><w:r><w:t>a&amp;b&#x41;&unknown;c</w:t></w:r></w:p></w:body></w:document>";
    let read = capstan_docx::read(&docx_with(doc)).unwrap();
    assert_eq!(read.to_text(), "a&bAc\n");
}
