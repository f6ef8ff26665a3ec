//! Office Open XML packages (the zip container shared by .docx and .xlsx), read from
//! untrusted bytes and written back.
//!
//! Defences, all applied before any XML is parsed:
//!
//! * an OLE compound file (`D0 CF 11 E0`, the container of encrypted OOXML files and of
//!   legacy `.doc`/`.xls`) is refused by name, never treated as a broken zip;
//! * every part is decompressed from memory with a cap on its size (both the size the
//!   zip declares and the bytes actually produced, since the declaration can lie) and a
//!   cap on the total decompressed across the package; the number of entries is capped;
//! * an XML part containing `<!DOCTYPE` or `<!ENTITY` is refused outright: OOXML never
//!   uses a DTD, and refusing it removes entity-expansion bombs and external entities
//!   whatever the parser would have done;
//! * zip-level encryption is refused; entry names are only ever looked up, never used as
//!   file-system paths, so traversal names (`../x`) are harmless.
//!
//! This module is public so `capstan-xlsx` can share it.

use std::borrow::Cow;
use std::io::{Cursor, Read, Write};

use quick_xml::Reader;
use quick_xml::XmlVersion;
use quick_xml::escape::resolve_xml_entity;
use quick_xml::events::{BytesRef, BytesStart, Event};
use zip::result::ZipError;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

/// Decompressed size allowed for any one part.
pub const MAX_PART_BYTES: u64 = 64 * 1024 * 1024;
/// Decompressed size allowed across all the parts one operation reads.
pub const MAX_TOTAL_BYTES: u64 = 256 * 1024 * 1024;
/// Entries allowed in the zip (real documents have tens).
pub const MAX_ENTRIES: usize = 20_000;

/// The signature of an OLE compound file: legacy .doc/.xls, and every encrypted OOXML file.
const OLE_SIGNATURE: [u8; 8] = [0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];

/// Which kind of package is expected: it only changes the wording of errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A Word document.
    Docx,
    /// An Excel workbook.
    Xlsx,
}

impl Kind {
    /// The file extension, with its dot (`.docx`), for messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Docx => ".docx",
            Kind::Xlsx => ".xlsx",
        }
    }
    fn legacy(self) -> &'static str {
        match self {
            Kind::Docx => ".doc",
            Kind::Xlsx => ".xls",
        }
    }
    /// The local name of the main part's root element.
    pub fn root_element(self) -> &'static str {
        match self {
            Kind::Docx => "document",
            Kind::Xlsx => "workbook",
        }
    }
    /// The main part when `_rels/.rels` does not name one.
    pub fn default_main_part(self) -> &'static str {
        match self {
            Kind::Docx => "word/document.xml",
            Kind::Xlsx => "xl/workbook.xml",
        }
    }
}

/// Everything that can go wrong; each message names the part or the limit involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An OLE compound file (a legacy `.doc`/`.xls`, or any password-protected
    /// OOXML file), or an encrypted zip entry.
    #[error(
        "encrypted or legacy {legacy} files are not supported (this is an OLE compound file, not an Office Open XML zip; save it as {kind} without a password)"
    )]
    Encrypted {
        /// The legacy extension (`.doc`, `.xls`).
        legacy: &'static str,
        /// The expected extension (`.docx`, `.xlsx`).
        kind: &'static str,
    },
    /// Not a readable zip: empty, no zip signature, a corrupt archive or too many entries.
    #[error("not a {kind} file: {detail}")]
    NotAPackage {
        /// The expected extension.
        kind: &'static str,
        /// Which check failed.
        detail: String,
    },
    /// A part the format requires is absent.
    #[error("missing part {part}{hint}")]
    MissingPart {
        /// The part name, without a leading `/`.
        part: String,
        /// A parenthesised guess at the cause (prefixed with a space), or empty.
        hint: String,
    },
    /// A part decompresses past [`MAX_PART_BYTES`], or the package past [`MAX_TOTAL_BYTES`].
    #[error("part {part} is too large: {detail} (limit {limit} bytes)")]
    TooLarge {
        /// The part being read.
        part: String,
        /// How far it got and, for the package total, how much was read before.
        detail: String,
        /// The limit passed, in bytes.
        limit: u64,
    },
    /// A part declares a DOCTYPE or ENTITY: refused (a possible entity bomb).
    #[error(
        "part {part}: DOCTYPE and ENTITY declarations are not allowed (Office Open XML never uses them; refused as a possible XML entity bomb)"
    )]
    Doctype {
        /// The part holding the declaration.
        part: String,
    },
    /// A part is not well-formed XML.
    #[error("part {part}: invalid XML: {detail}")]
    Xml {
        /// The part.
        part: String,
        /// The parser's message, with the byte offset.
        detail: String,
    },
    /// A zip entry that cannot be decompressed, or a part whose content makes no sense.
    #[error("part {part}: {detail}")]
    Corrupt {
        /// The part.
        part: String,
        /// What is wrong.
        detail: String,
    },
    /// A caller's argument was refused (e.g. an empty text to find); the message says which.
    #[error("{0}")]
    InvalidInput(String),
}

/// Results of package reading and editing, failing with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An [`Error::Xml`] for `part`, with the reader's byte position of the failure.
    pub fn xml(part: &str, reader: &Reader<&[u8]>, e: impl std::fmt::Display) -> Error {
        Error::Xml {
            part: part.to_owned(),
            detail: format!("at byte {}: {e}", reader.error_position()),
        }
    }
}

/// A relationship from a `.rels` part, its target resolved to a part name.
#[derive(Debug, Clone)]
pub struct Rel {
    /// The relationship id (`rId1`...), unique within its `.rels` part.
    pub id: String,
    /// The relationship type URI.
    pub rel_type: String,
    /// Part name without a leading `/` (or the raw target if external).
    pub target: String,
    /// `TargetMode="External"`: the target is a URL, not a part.
    pub external: bool,
}

/// An opened package: the zip, read from memory, with size accounting.
pub struct Package<'a> {
    zip: ZipArchive<Cursor<&'a [u8]>>,
    kind: Kind,
    total: u64,
}

impl<'a> Package<'a> {
    /// Opens a package held in memory. Fails with [`Error::Encrypted`] for an OLE
    /// file and [`Error::NotAPackage`] for anything that is not a zip of at most
    /// [`MAX_ENTRIES`] entries.
    pub fn open(bytes: &'a [u8], kind: Kind) -> Result<Self> {
        if bytes.starts_with(&OLE_SIGNATURE[..4]) {
            return Err(Error::Encrypted {
                legacy: kind.legacy(),
                kind: kind.name(),
            });
        }
        if bytes.is_empty() {
            return Err(Error::NotAPackage {
                kind: kind.name(),
                detail: "the file is empty".into(),
            });
        }
        if !bytes.starts_with(b"PK") {
            return Err(Error::NotAPackage {
                kind: kind.name(),
                detail: "no zip signature (an Office Open XML file is a zip archive)".into(),
            });
        }
        let zip = ZipArchive::new(Cursor::new(bytes)).map_err(|e| Error::NotAPackage {
            kind: kind.name(),
            detail: format!("corrupted zip archive ({e})"),
        })?;
        if zip.len() > MAX_ENTRIES {
            return Err(Error::NotAPackage {
                kind: kind.name(),
                detail: format!("{} zip entries (limit {MAX_ENTRIES})", zip.len()),
            });
        }
        Ok(Package {
            zip,
            kind,
            total: 0,
        })
    }

    /// The kind the package was opened as.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Entry names in archive order.
    pub fn names(&self) -> Vec<String> {
        self.zip
            .file_names()
            .filter_map(|n| n.ok().map(|n| n.into_owned()))
            .collect()
    }

    /// The index of a part: exact name first, then case-insensitively (part names in
    /// OPC are case-insensitive).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        let name = name.trim_start_matches('/');
        self.zip.index_for_name(name).or_else(|| {
            self.zip
                .file_names()
                .enumerate()
                .find_map(|(i, n)| n.ok().filter(|n| n.eq_ignore_ascii_case(name)).map(|_| i))
        })
    }

    /// Whether the part exists (names compared as in [`Package::index_of`]).
    pub fn has(&self, name: &str) -> bool {
        self.index_of(name).is_some()
    }

    /// The decompressed bytes of a part, `None` if there is no such part.
    pub fn read(&mut self, name: &str) -> Result<Option<Vec<u8>>> {
        let Some(index) = self.index_of(name) else {
            return Ok(None);
        };
        let part = name.trim_start_matches('/').to_owned();
        let corrupt = |e: ZipError| Error::Corrupt {
            part: part.clone(),
            detail: format!("corrupted zip entry ({e})"),
        };
        let file = self.zip.by_index(index).map_err(corrupt)?;
        if file.encrypted() {
            return Err(Error::Encrypted {
                legacy: self.kind.legacy(),
                kind: self.kind.name(),
            });
        }
        let remaining = MAX_TOTAL_BYTES.saturating_sub(self.total);
        let cap = MAX_PART_BYTES.min(remaining);
        if file.size() > cap {
            return Err(too_large(&part, file.size(), cap, self.total));
        }
        let mut buf = Vec::with_capacity(file.size().min(cap) as usize);
        // The declared size can lie: never read more than the cap, whatever it says.
        file.take(cap.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| Error::Corrupt {
                part: part.clone(),
                detail: format!("cannot decompress ({e})"),
            })?;
        let len = buf.len() as u64;
        if len > cap {
            return Err(too_large(&part, len, cap, self.total));
        }
        self.total += len;
        Ok(Some(buf))
    }

    /// A part that must exist.
    pub fn require(&mut self, name: &str) -> Result<Vec<u8>> {
        let kind = self.kind;
        self.read(name)?.ok_or_else(|| missing(name, kind))
    }

    /// An XML part as text (UTF-8, byte-order mark removed), with any DTD refused.
    pub fn read_xml(&mut self, name: &str) -> Result<Option<String>> {
        let Some(bytes) = self.read(name)? else {
            return Ok(None);
        };
        xml_text(name, bytes).map(Some)
    }

    /// An XML part that must exist ([`Error::MissingPart`] otherwise).
    pub fn require_xml(&mut self, name: &str) -> Result<String> {
        let kind = self.kind;
        self.read_xml(name)?.ok_or_else(|| missing(name, kind))
    }

    /// The relationships of `part` (from `<dir>/_rels/<file>.rels`); empty if none.
    pub fn rels(&mut self, part: &str) -> Result<Vec<Rel>> {
        let rels_name = rels_part_name(part);
        let Some(xml) = self.read_xml(&rels_name)? else {
            return Ok(Vec::new());
        };
        parse_rels(&xml, &rels_name, part)
    }

    /// The main part, from `_rels/.rels` (`officeDocument`), or the usual name.
    pub fn main_part(&mut self) -> Result<String> {
        let rels = self.rels("")?;
        let main = rels
            .into_iter()
            .find(|r| !r.external && r.rel_type.ends_with("/officeDocument"))
            .map(|r| r.target)
            .unwrap_or_else(|| self.kind.default_main_part().to_owned());
        if !self.has(&main) {
            return Err(missing(&main, self.kind));
        }
        Ok(main)
    }

    /// The main part's name and text, checked to be the expected kind of document (its
    /// root element `w:document` or `workbook`).
    pub fn main_xml(&mut self) -> Result<(String, String)> {
        let part = self.main_part()?;
        let xml = self.require_xml(&part)?;
        let expected = self.kind.root_element();
        let mut reader = Reader::from_str(&xml);
        loop {
            match reader
                .read_event()
                .map_err(|e| Error::xml(&part, &reader, e))?
            {
                Event::Start(e) | Event::Empty(e) => {
                    let root = e.local_name().as_ref().to_owned();
                    if root != expected {
                        return Err(Error::NotAPackage {
                            kind: self.kind.name(),
                            detail: format!(
                                "its main part {part} is a <{root}>, not a <{expected}>{}",
                                match root.as_str() {
                                    "document" => " (it looks like a Word document)",
                                    "workbook" => " (it looks like an Excel workbook)",
                                    "presentation" => " (it looks like a PowerPoint presentation)",
                                    _ => "",
                                }
                            ),
                        });
                    }
                    return Ok((part, xml));
                }
                Event::DocType(_) => return Err(Error::Doctype { part }),
                Event::Eof => {
                    return Err(Error::Xml {
                        part,
                        detail: "no root element".into(),
                    });
                }
                _ => {}
            }
        }
    }

    /// Index-wise access for rewriting.
    pub(crate) fn archive(&mut self) -> &mut ZipArchive<Cursor<&'a [u8]>> {
        &mut self.zip
    }
}

fn too_large(part: &str, size: u64, cap: u64, total: u64) -> Error {
    if cap < MAX_PART_BYTES {
        Error::TooLarge {
            part: part.to_owned(),
            detail: format!(
                "{size}+ bytes decompressed would bring the package past its total of {MAX_TOTAL_BYTES} bytes ({total} already read)"
            ),
            limit: MAX_TOTAL_BYTES,
        }
    } else {
        Error::TooLarge {
            part: part.to_owned(),
            detail: format!("{size}+ bytes decompressed"),
            limit: MAX_PART_BYTES,
        }
    }
}

fn missing(name: &str, kind: Kind) -> Error {
    let hint = match kind {
        Kind::Docx => " (is this a Word .docx document?)",
        Kind::Xlsx => " (is this an Excel .xlsx workbook?)",
    };
    Error::MissingPart {
        part: name.trim_start_matches('/').to_owned(),
        hint: hint.into(),
    }
}

/// Bytes of an XML part to text; refuses DTDs.
pub fn xml_text(name: &str, bytes: Vec<u8>) -> Result<String> {
    let bytes = match bytes.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => rest.to_vec(),
        None => bytes,
    };
    if bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF") {
        return Err(Error::Xml {
            part: name.to_owned(),
            detail: "UTF-16 parts are not supported (expected UTF-8)".into(),
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| Error::Xml {
        part: name.to_owned(),
        detail: format!("not UTF-8 ({e})"),
    })?;
    check_no_dtd(name, &text)?;
    Ok(text)
}

/// Refuses any DTD or entity declaration.
pub fn check_no_dtd(name: &str, xml: &str) -> Result<()> {
    if xml.contains("<!DOCTYPE") || xml.contains("<!ENTITY") {
        return Err(Error::Doctype {
            part: name.to_owned(),
        });
    }
    Ok(())
}

/// `word/document.xml` → `word/_rels/document.xml.rels`; `""` → `_rels/.rels`.
pub fn rels_part_name(part: &str) -> String {
    let part = part.trim_start_matches('/');
    match part.rsplit_once('/') {
        Some((dir, file)) => format!("{dir}/_rels/{file}.rels"),
        None => format!("_rels/{part}.rels"),
    }
}

/// The directory of a part name (`word/document.xml` → `word`).
pub fn part_dir(part: &str) -> &str {
    part.trim_start_matches('/')
        .rsplit_once('/')
        .map_or("", |(d, _)| d)
}

/// Resolves a relationship target against the directory of its source part.
pub fn resolve_target(source_dir: &str, target: &str) -> String {
    let (base, target) = match target.strip_prefix('/') {
        Some(abs) => ("", abs),
        None => (source_dir, target),
    };
    let mut parts: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
    for seg in target.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

fn parse_rels(xml: &str, rels_name: &str, source: &str) -> Result<Vec<Rel>> {
    let dir = part_dir(source);
    let mut reader = Reader::from_str(xml);
    let mut out = Vec::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) if e.local_name().as_ref() == "Relationship" => {
                let external = attr(&e, "TargetMode").is_some_and(|m| m == "External");
                let raw = attr(&e, "Target").unwrap_or_default();
                out.push(Rel {
                    id: attr(&e, "Id").unwrap_or_default(),
                    rel_type: attr(&e, "Type").unwrap_or_default(),
                    target: if external {
                        raw
                    } else {
                        resolve_target(dir, &raw)
                    },
                    external,
                });
            }
            Ok(Event::DocType(_)) => {
                return Err(Error::Doctype {
                    part: rels_name.to_owned(),
                });
            }
            Ok(Event::Eof) => return Ok(out),
            Ok(_) => {}
            Err(e) => return Err(Error::xml(rels_name, &reader, e)),
        }
    }
}

/// An attribute's value by local name, unescaped.
pub fn attr(e: &BytesStart<'_>, local: &str) -> Option<String> {
    e.attributes().flatten().find_map(|a| {
        (a.key.local_name().as_ref() == local)
            .then(|| {
                a.normalized_value(XmlVersion::Implicit1_0)
                    .ok()
                    .map(|v| v.into_owned())
            })
            .flatten()
    })
}

/// The text of a general reference (`&amp;`, `&#x41;`): the five predefined entities
/// and character references only; anything else is dropped, never expanded.
pub fn resolve_ref(r: &BytesRef<'_>) -> Option<Cow<'static, str>> {
    if r.is_char_ref() {
        r.resolve_char_ref()
            .ok()
            .flatten()
            .map(|c| Cow::Owned(c.to_string()))
    } else {
        resolve_xml_entity(&r.xml10_content()).map(Cow::Borrowed)
    }
}

/// Whether XML 1.0 allows this character.
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Escapes text content (`&`, `<`, `>`) and drops characters XML 1.0 cannot hold.
pub fn escape_text(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// Escapes an attribute value (also `"` and `'`), dropping characters XML cannot hold.
pub fn escape_attr(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

fn escape(s: &str, attr: bool) -> Cow<'_, str> {
    let needs = s.chars().any(|c| {
        matches!(c, '&' | '<' | '>')
            || (attr && matches!(c, '"' | '\'' | '\n' | '\r' | '\t'))
            || !xml_char(c)
    });
    if !needs {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attr => out.push_str("&quot;"),
            '\'' if attr => out.push_str("&apos;"),
            '\n' if attr => out.push_str("&#10;"),
            '\r' if attr => out.push_str("&#13;"),
            '\t' if attr => out.push_str("&#9;"),
            c if !xml_char(c) => {}
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn zip_error(e: impl std::fmt::Display) -> Error {
    Error::Corrupt {
        part: "(zip)".into(),
        detail: format!("cannot write the zip archive ({e})"),
    }
}

fn deflated() -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(6))
}

/// A new package from `(part name, bytes)` pairs, in that order (put
/// `[Content_Types].xml` first, as Office does).
pub fn write_package(parts: &[(&str, &[u8])]) -> Result<Vec<u8>> {
    let mut w = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, bytes) in parts {
        w.start_file(*name, deflated()).map_err(zip_error)?;
        w.write_all(bytes).map_err(zip_error)?;
    }
    Ok(w.finish().map_err(zip_error)?.into_inner())
}

/// Copies `pkg` into a new zip: the parts named in `replace` get new contents, `add`
/// appends new parts, and every other entry is copied raw (its compressed bytes, so its
/// content is byte-for-byte the original).
pub fn rewrite(
    pkg: &mut Package<'_>,
    replace: &[(String, Vec<u8>)],
    add: &[(String, Vec<u8>)],
) -> Result<Vec<u8>> {
    let mut w = ZipWriter::new(Cursor::new(Vec::new()));
    let names = pkg.names();
    let zip = pkg.archive();
    for (i, name) in names.iter().enumerate() {
        if let Some((_, bytes)) = replace.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
            w.start_file(name.as_str(), deflated()).map_err(zip_error)?;
            w.write_all(bytes).map_err(zip_error)?;
        } else {
            let file = zip.by_index_raw(i).map_err(|e| Error::Corrupt {
                part: name.clone(),
                detail: format!("corrupted zip entry ({e})"),
            })?;
            w.raw_copy_file(file).map_err(zip_error)?;
        }
    }
    for (name, bytes) in add {
        w.start_file(name.as_str(), deflated()).map_err(zip_error)?;
        w.write_all(bytes).map_err(zip_error)?;
    }
    Ok(w.finish().map_err(zip_error)?.into_inner())
}

/// Inserts `<Override>` for a new part into `[Content_Types].xml` unless present.
pub fn add_content_type_override(
    types_xml: &str,
    part: &str,
    content_type: &str,
) -> Result<String> {
    let part_name = format!("/{}", part.trim_start_matches('/'));
    if types_xml.contains(&format!("PartName=\"{part_name}\"")) {
        return Ok(types_xml.to_owned());
    }
    let Some(pos) = types_xml.rfind("</Types>") else {
        return Err(Error::Xml {
            part: "[Content_Types].xml".into(),
            detail: "no </Types> end tag".into(),
        });
    };
    let mut out = String::with_capacity(types_xml.len() + 200);
    out.push_str(&types_xml[..pos]);
    out.push_str(&format!(
        "<Override PartName=\"{}\" ContentType=\"{}\"/>",
        escape_attr(&part_name),
        escape_attr(content_type)
    ));
    out.push_str(&types_xml[pos..]);
    Ok(out)
}
