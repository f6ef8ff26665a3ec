//! docs/events.schema.json is generated from the protocol's types: this fails
//! when the checked-in copy is stale. `CAPSTAN_BLESS=1 cargo test -p
//! capstan-protocol --test schema` rewrites it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn the_checked_in_event_schema_is_generated_from_the_types() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/events.schema.json");
    let generated = serde_json::to_string_pretty(&capstan_protocol::event_schema()).unwrap() + "\n";
    if std::env::var_os("CAPSTAN_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: the event types changed. Regenerate it with \
         `CAPSTAN_BLESS=1 cargo test --release -p capstan-protocol --test schema` and commit it.",
        path.display()
    );
}

#[test]
fn the_schema_names_every_event_type() {
    let schema = capstan_protocol::event_schema().to_string();
    for name in [
        "run.started",
        "task.skipped",
        "approval.requested",
        "run.cancelled",
    ] {
        assert!(
            schema.contains(&format!("\"{name}\"")),
            "{name} missing from the schema"
        );
    }
    assert!(
        schema.contains("skipped_fail_fast"),
        "skip reasons are a closed set in the schema"
    );
    assert!(schema.contains("unsupported-legacy-capability"));
}
