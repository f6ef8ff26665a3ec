//! Reading, creating and editing Word `.docx` files (Office Open XML
//! WordprocessingML), for the `docx` capability.
//!
//! Pure Rust so it builds for `wasm32-wasip2`: the plugin that embeds it runs inside
//! the sandbox. It never touches the file system; callers pass and receive bytes.
//!
//! * [`read`] → [`Document`]: paragraphs (normal, title, headings, list items with level
//!   and number, quotes, code), runs with bold/italic, tables; rendered by
//!   [`Document::to_text`] and [`Document::to_markdown`].
//! * [`create_from_markdown`] → a new minimal package: `[Content_Types].xml`,
//!   `_rels/.rels`, `word/document.xml`, `word/_rels/document.xml.rels`,
//!   `word/styles.xml` (Heading1–6, list, quote, code and table styles),
//!   `word/numbering.xml`, `docProps/core.xml` (title) and `docProps/app.xml`.
//! * [`replace`] → find and replace in the body, also where Word split the text across
//!   runs; the replacement takes the formatting of the run where the match starts, and
//!   every other part of the package is copied byte-for-byte.
//! * [`append`] → Markdown appended at the end of the body (before `w:sectPr`), adding
//!   the styles and numbering it needs.
//! * [`info`] → title and counts.
//!
//! Untrusted input is bounded (see [`opc`]): an OLE file (encrypted, or a legacy `.doc`)
//! is refused by name, parts are capped at [`opc::MAX_PART_BYTES`] decompressed
//! ([`opc::MAX_TOTAL_BYTES`] in all), any `<!DOCTYPE`/`<!ENTITY` is refused, nesting is
//! bounded. Every failure is an [`Error`] naming the part, never a panic.

#![warn(missing_docs)]

mod edit;
mod model;
pub mod opc;
mod read;
mod write;

pub use model::{Block, Cell, Document, Paragraph, ParagraphKind, Run, Table};
pub use opc::{Error, Result};

/// Reads a `.docx` into its body's blocks.
pub fn read(bytes: &[u8]) -> Result<Document> {
    read::read(bytes)
}

/// A new `.docx` from Markdown; the title (`docProps/core.xml`) is the first heading's text.
pub fn create_from_markdown(markdown: &str) -> Result<Vec<u8>> {
    create_from_markdown_with_title(markdown, None)
}

/// A new `.docx` from Markdown with an explicit title (`None`: the first heading's text).
pub fn create_from_markdown_with_title(markdown: &str, title: Option<&str>) -> Result<Vec<u8>> {
    let body = write::markdown_body(markdown, 1, &Default::default());
    let title = title
        .map(str::to_owned)
        .or_else(|| body.first_heading.clone());
    let document = write::document_xml(&body);
    let styles = write::styles_xml();
    let numbering = write::numbering_xml(&body.nums);
    let core = write::core_xml(title.as_deref());
    opc::write_package(&[
        ("[Content_Types].xml", write::CONTENT_TYPES.as_bytes()),
        ("_rels/.rels", write::ROOT_RELS.as_bytes()),
        ("docProps/core.xml", core.as_bytes()),
        ("docProps/app.xml", write::APP_XML.as_bytes()),
        ("word/document.xml", document.as_bytes()),
        (
            "word/_rels/document.xml.rels",
            write::DOCUMENT_RELS.as_bytes(),
        ),
        ("word/styles.xml", styles.as_bytes()),
        ("word/numbering.xml", numbering.as_bytes()),
    ])
}

/// Replaces every occurrence of `find` in the body with `replace_with`; returns the new
/// file and the number of replacements (with 0, the original bytes unchanged).
///
/// Matches are found in each paragraph's text, so a phrase Word split across runs
/// (spell-check marks, revisions, formatting changes) is still found; a match never
/// spans a tab or line break. The replacement is plain text in the run where the match
/// starts; the matched text in the following runs is removed, their formatting kept for
/// whatever text they still hold.
pub fn replace(bytes: &[u8], find: &str, replace_with: &str) -> Result<(Vec<u8>, usize)> {
    edit::replace(bytes, find, replace_with)
}

/// Appends the Markdown's paragraphs, lists and tables to the end of the body.
pub fn append(bytes: &[u8], markdown: &str) -> Result<Vec<u8>> {
    edit::append(bytes, markdown)
}

/// A heading of the document: level 0 is the `Title` style.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading {
    /// 0 for `Title`, 1 to 9 for `Heading1`..`Heading9` (or the outline level).
    pub level: u8,
    /// The heading's plain text.
    pub text: String,
}

/// A summary of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// `dc:title`, else the text of the first `Title` paragraph.
    pub title: Option<String>,
    /// Non-empty paragraphs outside tables (headings and list items included).
    pub paragraphs: usize,
    /// Top-level tables.
    pub tables: usize,
    /// Whitespace-separated words in all the text, tables included.
    pub words: usize,
    /// The title and headings outside tables, in document order.
    pub headings: Vec<Heading>,
}

/// Title and counts.
pub fn info(bytes: &[u8]) -> Result<Info> {
    Ok(document_info(&read(bytes)?))
}

/// [`info`] of an already read document.
pub fn document_info(doc: &Document) -> Info {
    let mut headings = Vec::new();
    for p in doc.paragraphs() {
        let level = match p.kind {
            ParagraphKind::Title => 0,
            ParagraphKind::Heading(l) => l,
            _ => continue,
        };
        let text = p.text().trim().to_owned();
        if !text.is_empty() {
            headings.push(Heading { level, text });
        }
    }
    let title = doc.title.clone().or_else(|| {
        headings
            .iter()
            .find(|h| h.level == 0)
            .map(|h| h.text.clone())
    });
    Info {
        title,
        paragraphs: doc
            .paragraphs()
            .filter(|p| !p.text().trim().is_empty())
            .count(),
        tables: doc.tables().count(),
        words: doc
            .all_paragraphs()
            .iter()
            .map(|p| p.text().split_whitespace().count())
            .sum(),
        headings,
    }
}
