//! Prints the passages of files, for eyeballing the parsers:
//! `cargo run -p capstan-kb-parse --example dump -- FILE...`
#![allow(clippy::unwrap_used, clippy::expect_used)]

fn main() {
    let opts = capstan_kb_parse::ChunkOptions::default();
    for path in std::env::args().skip(1) {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        match capstan_kb_parse::parse(&path, &bytes, &opts) {
            Ok(parsed) => {
                for w in parsed.warnings {
                    eprintln!("{path}: warning: {w}");
                }
                for p in parsed.passages {
                    println!(
                        "=== {path}:{}-{} [{}] ({} chars)\n{}",
                        p.line_start,
                        p.line_end,
                        p.heading,
                        p.text.chars().count(),
                        p.text
                    );
                }
            }
            Err(e) => eprintln!("{path}: {e}"),
        }
    }
}
