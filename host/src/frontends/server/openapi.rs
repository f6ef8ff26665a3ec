//! `GET /openapi.json`: the API document. Its paths (and the response views
//! that have no Rust type of their own) are written by hand in
//! `openapi.paths.json`; the schemas of the types the server reads and writes
//! ([`StartRun`], [`Usage`], the event [`Envelope`] of every stream) are
//! generated from those types, so the document cannot drift from them.
//! docs/openapi.json is the same document, checked in; a test fails when it
//! is stale (`CAPSTAN_BLESS=1` rewrites it).

use std::sync::LazyLock;

use capstan_protocol::{Envelope, Usage};
use schemars::generate::SchemaSettings;
use serde_json::Value;

use super::runs::StartRun;

const PATHS: &str = include_str!("openapi.paths.json");

static DOCUMENT: LazyLock<String> =
    LazyLock::new(|| serde_json::to_string_pretty(&document()).unwrap_or_default() + "\n");

/// The document as served (and as docs/openapi.json holds it).
pub fn text() -> &'static str {
    &DOCUMENT
}

/// The hand-written paths with the generated schemas merged into
/// `components.schemas` (generated ones win over a hand-written one of the
/// same name).
pub fn document() -> Value {
    let mut doc: Value = serde_json::from_str(PATHS).unwrap_or_default();
    let mut generator = SchemaSettings::openapi3().into_generator();
    let roots = [
        ("StartRun", generator.subschema_for::<StartRun>()),
        ("Usage", generator.subschema_for::<Usage>()),
        ("Envelope", generator.subschema_for::<Envelope>()),
    ];
    let mut schemas: serde_json::Map<String, Value> =
        generator.take_definitions(true).into_iter().collect();
    for (name, schema) in roots {
        let schema = serde_json::to_value(schema).unwrap_or_default();
        // A root that schemars inlined (no `$ref`) is stored under its name.
        if schema.get("$ref").is_none() {
            schemas.insert(name.to_string(), schema);
        }
    }
    if let Some(Value::Object(existing)) = doc.pointer_mut("/components/schemas") {
        existing.extend(schemas);
    }
    doc
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn the_checked_in_document_is_the_served_one() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
        if std::env::var_os("CAPSTAN_BLESS").is_some() {
            std::fs::write(&path, super::text()).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == super::text(),
            "{} is stale: the API's types or openapi.paths.json changed. Regenerate it with \
             `CAPSTAN_BLESS=1 cargo test --release -p capstan --lib openapi` and commit it.",
            path.display()
        );
    }

    #[test]
    fn generated_schemas_are_merged_and_referenced() {
        let doc = super::document();
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["StartRun"]["additionalProperties"], false);
        assert!(
            schemas["StartRun"]["required"]
                .to_string()
                .contains("message")
        );
        assert!(schemas["Usage"]["properties"]["cost_usd"].is_object());
        assert!(
            doc.to_string().contains("skipped_fail_fast"),
            "the event schema is in"
        );
        assert!(
            !doc.to_string().contains("#/$defs/"),
            "every reference points into components"
        );
        // Every $ref resolves.
        let text = doc.to_string();
        for piece in text.split("\"#/components/schemas/").skip(1) {
            let name = &piece[..piece.find('"').unwrap()];
            assert!(
                schemas.get(name).is_some(),
                "{name} is referenced but not defined"
            );
        }
    }
}
