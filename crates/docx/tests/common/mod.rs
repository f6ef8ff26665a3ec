//! Runs Python scripts that use python-docx, a library no one here wrote, to check that
//! what we write is what Word-compatible tools read, and that we read what they write.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// Runs `script` with `python3` (extra `args` in `sys.argv[1:]`) and returns its stdout.
/// Fails, never skips, when python-docx is missing.
pub fn python(script: &str, args: &[&Path]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install Python 3, then `python3 -m pip install python-docx openpyxl`"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named 'docx'") || stderr.contains("No module named 'openpyxl'") {
        panic!(
            "python-docx/openpyxl is not installed for python3; these interop tests need it: run `python3 -m pip install python-docx openpyxl`\n{stderr}"
        );
    }
    assert!(
        out.status.success(),
        "python3 failed:\n{stderr}\nscript:\n{script}"
    );
    String::from_utf8(out.stdout).expect("python output is UTF-8")
}
