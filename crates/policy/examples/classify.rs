//! Prints the classification of each argument as a shell command line:
//! `cargo run -p capstan-policy --example classify -- 'rm -rf x'`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
fn main() {
    for cmd in std::env::args().skip(1) {
        let c = capstan_policy::classify_shell(&cmd);
        println!("{cmd}\n  risk: {}", c.risk);
        for r in &c.reasons {
            println!("  - {r}");
        }
        for k in &c.commands {
            println!(
                "  cmd {:?} ({}){}",
                k.argv,
                k.risk,
                k.via
                    .as_deref()
                    .map(|v| format!(" via {v}"))
                    .unwrap_or_default()
            );
        }
    }
}
