//! Parsing of untrusted workspace files into heading-aware passages for `local_kb_retrieval`.
//!
//! This crate runs inside the kb-retrieval plugin (a `wasm32-wasip2` component, workspace
//! mounted read-only), so it is pure Rust: no threads, no mmap, no C code. Parsing never
//! reads the file system: the caller hands it a path (for the format and the heading of
//! source files) and the file's bytes. Only [`walk`] lists files: which ones a refresh of
//! the index considers, the same for the plugin and the host.
//!
//! [`parse`] picks a format by the path's extension (see [`detect_format`]), or for a file
//! whose name says nothing (`copyright`, `GPL-2`, `Apache-2.0`) by its content (see
//! [`detect_format_by_content`]), turns the file
//! into a flat list of blocks (headings, prose, code) and chunks them into [`Passage`]s:
//!
//! * a passage never spans two sections (the heading path is in [`Passage::heading`],
//!   never repeated in [`Passage::text`]);
//! * a section longer than [`ChunkOptions::target_chars`] is split at block (paragraph)
//!   boundaries, consecutive pieces sharing up to [`ChunkOptions::overlap_chars`];
//! * code blocks (Markdown fences, rST literal blocks and code directives, HTML `<pre>`)
//!   are never split unless bigger than 4 × `target_chars`, and then only at line breaks;
//! * sections without text produce no passage.
//!
//! Line numbers are 1-based and inclusive, in the source file's lines (`\n`, `\r\n` and a
//! lone `\r` each end a line). For `.docx` a "line" is a paragraph index of
//! `word/document.xml` (1-based, every `w:p` counted, empty ones too).
//!
//! Failure modes are values, never panics: binary content ([`ParseError::Binary`]), files
//! over the size cap ([`ParseError::TooLarge`]), unknown formats
//! ([`ParseError::Unsupported`]) and broken containers ([`ParseError::Malformed`]). Invalid
//! UTF-8 is decoded lossily and reported in [`Parsed::warnings`].

#![warn(missing_docs)]

mod chunk;
mod docx;
mod html;
mod ignore_rules;
mod lines;
mod markdown;
pub mod rank;
mod rst;
mod text;
pub mod walk;

pub use ignore_rules::{BUILTIN_SKIPS, IgnoreRules};

/// How files are chunked into passages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkOptions {
    /// Aim for passages of about this many characters (Unicode scalar values). A section
    /// shorter than this is one passage; longer ones are split at block boundaries. A single
    /// block (paragraph, code block) up to 4 × this size is kept whole.
    pub target_chars: usize,
    /// When a section is split, the next passage repeats up to this many characters of the
    /// end of the previous one (whole blocks, else whole lines), so a sentence cut at the
    /// boundary is still found with its context. Never applied to code blocks.
    pub overlap_chars: usize,
    /// Files bigger than this are refused with [`ParseError::TooLarge`] before any work.
    pub max_file_bytes: u64,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        Self {
            target_chars: 1200,
            overlap_chars: 150,
            max_file_bytes: 8 * 1024 * 1024,
        }
    }
}

/// One retrievable unit of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// Heading path of the section, outermost first, joined by `" > "`, e.g.
    /// `"Guide > Keys > Rotation"`. Empty for text before the first heading (or in files
    /// without headings); the file path for source code.
    pub heading: String,
    /// The passage's text, without the heading lines. Never empty or all-whitespace.
    pub text: String,
    /// First source line (1-based, inclusive).
    pub line_start: u32,
    /// Last source line (1-based, inclusive), `>= line_start`.
    pub line_end: u32,
}

/// The result of [`parse`]: passages in file order, plus non-fatal problems.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The passages, in the order they appear in the file.
    pub passages: Vec<Passage>,
    /// Problems that did not stop parsing, e.g. invalid UTF-8 replaced by U+FFFD.
    pub warnings: Vec<String>,
}

/// Why a file produced no passages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The path's extension (or name) is not one this crate parses.
    #[error("unsupported file type: {path}")]
    Unsupported {
        /// The path as given to [`parse`].
        path: String,
    },
    /// A NUL byte in the first 8 KiB: binary content (also UTF-16 text, which is not decoded).
    #[error("binary file (NUL byte in the first 8 KiB)")]
    Binary,
    /// The file (or, for `.docx`, a decompressed part of it) is over the size cap.
    #[error("file too large: {size} bytes (limit {limit})")]
    TooLarge {
        /// The size found, in bytes.
        size: u64,
        /// The cap it passed, in bytes.
        limit: u64,
    },
    /// A container format (`.docx`) that cannot be read; `detail` names the problem.
    #[error("malformed {format}: {detail}")]
    Malformed {
        /// The format's name (e.g. `docx`).
        format: &'static str,
        /// What is wrong with it.
        detail: String,
    },
}

/// The formats [`parse`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// CommonMark + GFM tables; ATX and setext headings.
    Markdown,
    /// reStructuredText; heading levels by order of first appearance of each adornment.
    Rst,
    /// `.txt` and well-known extension-less text files. A `.txt` file that looks like
    /// reStructuredText (adorned titles, directives) is parsed as [`Format::Rst`].
    PlainText,
    /// HTML; headings `h1`..`h6` build the heading path, scripts and styles are dropped.
    Html,
    /// Source code and configuration: blank-line separated blocks, heading = the path.
    Code,
    /// Office Open XML word processing documents (`word/document.xml` in a zip).
    Docx,
}

/// The format of `path`, by its extension (case-insensitive) or well-known file name, or
/// `None` when [`parse`] would answer [`ParseError::Unsupported`]. Cheap: lets a walker skip
/// files without reading them.
pub fn detect_format(path: &str) -> Option<Format> {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".rst.txt") {
        return Some(Format::Rst);
    }
    let ext = match lower.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => ext,
        // No extension, or a dot file such as `.gitignore`.
        _ => {
            return match lower.as_str() {
                "readme" | "license" | "licence" | "copying" | "authors" | "contributors"
                | "changelog" | "changes" | "news" | "notice" | "install" | "todo" | "history" => {
                    Some(Format::PlainText)
                }
                "makefile" | "gnumakefile" | "dockerfile" | "containerfile" | "justfile"
                | "rakefile" | "gemfile" | "vagrantfile" | "jenkinsfile" | "procfile"
                | ".gitignore" | ".capstanignore" | ".editorconfig" | ".gitattributes" => {
                    Some(Format::Code)
                }
                _ => None,
            };
        }
    };
    Some(match ext {
        "md" | "markdown" | "mdown" | "mkd" | "mdx" => Format::Markdown,
        "rst" | "rest" => Format::Rst,
        "txt" | "text" | "adoc" | "asciidoc" | "org" | "tex" => Format::PlainText,
        "html" | "htm" | "xhtml" => Format::Html,
        "docx" => Format::Docx,
        "rs" | "py" | "pyi" | "js" | "mjs" | "cjs" | "jsx" | "ts" | "mts" | "cts" | "tsx"
        | "go" | "c" | "h" | "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" | "java" | "kt"
        | "kts" | "scala" | "rb" | "sh" | "bash" | "zsh" | "fish" | "ps1" | "toml" | "yaml"
        | "yml" | "json" | "jsonc" | "json5" | "ini" | "cfg" | "conf" | "xml" | "sql" | "lua"
        | "php" | "swift" | "m" | "mm" | "cs" | "fs" | "fsx" | "ex" | "exs" | "erl" | "hrl"
        | "hs" | "ml" | "mli" | "clj" | "cljs" | "el" | "vim" | "r" | "jl" | "dart" | "zig"
        | "nim" | "proto" | "graphql" | "gql" | "gradle" | "cmake" | "mk" | "css" | "scss"
        | "sass" | "less" | "vue" | "svelte" | "tf" | "hcl" | "nix" | "pl" | "pm"
        | "properties" | "bzl" | "star" | "wit" | "wat" | "s" | "asm" => Format::Code,
        _ => return None,
    })
}

/// Where [`detect_format_by_content`] looks: enough to judge, little enough to read for
/// every unknown file of a big tree.
pub const SNIFF_BYTES: usize = 8 * 1024;

/// Extensions that are never text, so a file with one is skipped without being read.
const BINARY_EXTENSIONS: &[&str] = &[
    "png", "jpg", "jpeg", "gif", "bmp", "ico", "webp", "tif", "tiff", "psd", "pdf", "zip", "gz",
    "tgz", "bz2", "xz", "zst", "lz4", "7z", "rar", "tar", "jar", "war", "class", "o", "a", "so",
    "dylib", "dll", "exe", "bin", "wasm", "cwasm", "rlib", "mp3", "mp4", "wav", "ogg", "flac",
    "avi", "mov", "mkv", "webm", "woff", "woff2", "ttf", "otf", "eot", "pyc", "db", "sqlite",
    "iso", "dmg", "deb", "rpm", "xlsx", "pptx", "odt", "ods",
];

/// Names that may hold secrets: never indexed on the strength of their content (a
/// knowledge-base passage goes to the model). Dot files are excluded as a whole.
const SECRET_EXTENSIONS: &[&str] = &["pem", "key", "p12", "pfx", "jks", "keystore", "gpg", "kdbx"];
const SECRET_NAMES: &[&str] = &["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "credentials"];

/// Whether the path's extension is one that is never text (images, archives, objects).
pub fn is_binary_extension(path: &str) -> bool {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    name.to_ascii_lowercase()
        .rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && BINARY_EXTENSIONS.contains(&ext))
}

/// Whether a file the extension says nothing about may be judged by its content: not a
/// dot file, not a known binary or secret extension, not a private key's name.
pub fn may_sniff(path: &str) -> bool {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let lower = name.to_ascii_lowercase();
    if lower.starts_with('.') || SECRET_NAMES.contains(&lower.as_str()) {
        return false;
    }
    match lower.rsplit_once('.') {
        Some((_, ext)) => !BINARY_EXTENSIONS.contains(&ext) && !SECRET_EXTENSIONS.contains(&ext),
        None => true,
    }
}

/// Whether the start of a file reads as text: no NUL byte, UTF-8 (a character cut at the
/// end of the sample is fine), and almost no control characters other than tab, line
/// feed, carriage return and form feed. An empty file is not text (nothing to index).
pub fn looks_like_text(head: &[u8]) -> bool {
    let head = &head[..head.len().min(SNIFF_BYTES)];
    if head.is_empty() || head.contains(&0) {
        return false;
    }
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        // Up to 3 bytes of a character cut by the sample's end.
        Err(e) if e.error_len().is_none() && head.len() - e.valid_up_to() < 4 => {
            match std::str::from_utf8(&head[..e.valid_up_to()]) {
                Ok(t) => t,
                Err(_) => return false,
            }
        }
        Err(_) => return false,
    };
    let total = text.chars().count();
    let control = text
        .chars()
        .filter(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c'))
        .count();
    // Allow a stray escape or two (coloured logs), not a binary format's structure.
    control * 100 <= total
}

/// [`detect_format`], and for a path it does not know, plain text when the content reads
/// as text (see [`may_sniff`] and [`looks_like_text`]). `head` is the start of the file
/// (at least [`SNIFF_BYTES`] of it when the file is that long).
pub fn detect_format_by_content(path: &str, head: &[u8]) -> Option<Format> {
    detect_format(path)
        .or_else(|| (may_sniff(path) && looks_like_text(head)).then_some(Format::PlainText))
}

/// Parses one file into passages.
///
/// `path` is the workspace-relative path (used for the format, see [`detect_format`], and
/// as the heading of source-code passages); `bytes` is the whole file.
///
/// # Errors
/// [`ParseError::TooLarge`] when `bytes` is over [`ChunkOptions::max_file_bytes`],
/// [`ParseError::Unsupported`] for unknown formats (an unknown name whose content is not
/// text, see [`detect_format_by_content`]), [`ParseError::Binary`] for text formats
/// with a NUL byte in the first 8 KiB, [`ParseError::Malformed`] for unreadable `.docx`.
/// Never panics on any input.
pub fn parse(path: &str, bytes: &[u8], opts: &ChunkOptions) -> Result<Parsed, ParseError> {
    let size = bytes.len() as u64;
    if size > opts.max_file_bytes {
        return Err(ParseError::TooLarge {
            size,
            limit: opts.max_file_bytes,
        });
    }
    let format = detect_format_by_content(path, bytes).ok_or_else(|| ParseError::Unsupported {
        path: path.to_owned(),
    })?;
    let mut warnings = Vec::new();
    // Outlives `blocks`, whose lines borrow from it.
    let text;
    let blocks = match format {
        // A zip: NUL bytes are normal, and the text inside is XML, decoded strictly.
        Format::Docx => docx::blocks(bytes, opts.max_file_bytes.max(DOCX_MIN_PART_CAP))?,
        _ => {
            text = decode_text(bytes, &mut warnings)?;
            match format {
                Format::Markdown => markdown::blocks(&text),
                Format::Rst => rst::blocks(&text),
                Format::PlainText if rst::looks_like_rst(&text) => rst::blocks(&text),
                Format::PlainText => text::paragraph_blocks(&text),
                Format::Html => html::blocks(&text),
                Format::Code => text::paragraph_blocks(&text),
                Format::Docx => unreachable!("handled above"),
            }
        }
    };
    let base_heading = if format == Format::Code { path } else { "" };
    let passages = chunk::chunk(blocks, base_heading, opts);
    Ok(Parsed { passages, warnings })
}

/// Decompressed `.docx` parts may be this big even when `max_file_bytes` is smaller: a
/// 64 MiB XML part is far beyond any real document, and far below memory trouble.
const DOCX_MIN_PART_CAP: u64 = 64 * 1024 * 1024;

/// How far [`parse`] looks for a NUL byte to call a file binary.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Checks for binary content and decodes UTF-8, lossily (with a warning) when invalid.
fn decode_text<'a>(
    bytes: &'a [u8],
    warnings: &mut Vec<String>,
) -> Result<std::borrow::Cow<'a, str>, ParseError> {
    let sniff = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    if sniff.contains(&0) {
        return Err(ParseError::Binary);
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    Ok(match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(e) => {
            warnings.push(format!(
                "invalid UTF-8 (first at byte {}): replaced with U+FFFD",
                e.valid_up_to()
            ));
            String::from_utf8_lossy(bytes)
        }
    })
}

#[cfg(test)]
mod tests;
