//! The WIT contract evolves without breaking plugins: components built against
//! capstan:plugin@0.1.0 (the frozen snapshot in wit-snapshots/) still load and run
//! on this host, the SDK's plugins run as 0.2.0, and a component for a version the
//! host does not know is refused with the supported range named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use capstan::plugins::context::{HostServices, RunContext};
use capstan::plugins::registry::{ManifestSources, Registry};
use capstan::plugins::runtime::{Capacity, Runtime};
use capstan_protocol::{Event, FailureReason, TaskRequest};
use common::{Home, Recorder, plugin_entry};
use serde_json::{Value, json};

async fn setup(home: &Home) -> (Runtime, Registry) {
    let dirs = home.dirs();
    let runtime = Runtime::new(
        dirs.component_cache(),
        vec![dirs.config.clone(), dirs.data.clone()],
        Capacity::OneRun,
    )
    .unwrap();
    let registry = Registry::load(
        &runtime,
        &ManifestSources::new(dirs.user_config_file(), None),
    )
    .await;
    (runtime, registry)
}

fn task(kind: &str, op: &str, input: Value) -> TaskRequest {
    TaskRequest {
        id: format!("{kind}-{op}"),
        kind: kind.into(),
        operation: op.into(),
        input,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_built_against_0_1_0_still_loads_and_runs() {
    let home = Home::new(&plugin_entry("legacy", "v0_1", &["legacy_echo"], ""));
    let (rt, reg) = setup(&home).await;
    assert!(reg.problems().is_empty(), "{:?}", reg.problems());
    let plugin = reg.resolve(&rt, "legacy_echo", None).await.unwrap();
    assert_eq!(plugin.wit_version.to_string(), "0.1.0");
    assert_eq!(plugin.operations.len(), 3);

    let rec = Recorder::default();
    let run = RunContext::new(None, Arc::new(rec.clone()), HostServices::default());
    let out = capstan::run::dispatch::run_task(
        &rt,
        &reg,
        &task("legacy_echo", "echo", json!({"a": [1, 2]})),
        &run,
    )
    .await
    .unwrap();
    assert_eq!(out.data, json!({"a": [1, 2]}));
    assert_eq!(out.summary, "echoed");
    // 0.1.0's "" for "no details" arrives as no details, and progress still flows.
    let activity = rec
        .events()
        .into_iter()
        .find_map(|e| match e {
            Event::Activity { kind, data, .. } if kind == "legacy.echoed" => Some(data),
            _ => None,
        })
        .expect("the 0.1.0 plugin's activity reached the event stream");
    assert_eq!(activity, Value::Null);
    assert!(
        rec.types().contains(&"progress".to_string()),
        "{:?}",
        rec.types()
    );

    let empty =
        capstan::run::dispatch::run_task(&rt, &reg, &task("legacy_echo", "empty", json!({})), &run)
            .await
            .unwrap();
    assert_eq!(empty.data, Value::Null);

    let failed =
        capstan::run::dispatch::run_task(&rt, &reg, &task("legacy_echo", "fail", json!({})), &run)
            .await
            .unwrap_err();
    assert_eq!(failed.reason, FailureReason::InvalidInput);
    assert_eq!(failed.message, "the 0.1.0 plugin says no");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_plugins_are_0_2_0_and_their_schemas_come_from_their_input_types() {
    let home = Home::new(&plugin_entry("xlsx", "xlsx", &["xlsx"], ""));
    let (rt, reg) = setup(&home).await;
    assert!(reg.problems().is_empty(), "{:?}", reg.problems());
    let xlsx = reg.resolve(&rt, "xlsx", None).await.unwrap();
    assert_eq!(xlsx.wit_version.to_string(), "0.2.0");
    let read = &xlsx.operation("read").unwrap().input_schema;
    assert_eq!(read["required"], json!(["path"]));
    assert_eq!(read["additionalProperties"], false);
    assert_eq!(
        read["properties"]["path"]["description"],
        "The .xlsx file, relative to the workspace root"
    );
    assert_eq!(read["properties"]["format"]["default"], "csv");
    assert_eq!(
        read["properties"]["format"]["enum"],
        json!(["csv", "markdown"])
    );
    // One input type, two defaults: `create` keeps files, `write` replaces them.
    let create = &xlsx.operation("create").unwrap().input_schema;
    let write = &xlsx.operation("write").unwrap().input_schema;
    assert_eq!(create["properties"]["overwrite"]["default"], false);
    assert_eq!(write["properties"]["overwrite"]["default"], true);
    assert_eq!(
        write["properties"]["sheets"]["items"]["properties"]["name"]["maxLength"],
        31
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_for_an_unknown_major_version_is_refused_with_the_supported_range() {
    let home = Home::new(&plugin_entry("future", "future_major", &["future"], ""));
    let (rt, reg) = setup(&home).await;
    let problem = reg
        .problems()
        .into_iter()
        .find(|p| p.plugin.as_deref() == Some("future") || p.message.contains("future"))
        .expect("the 9.0.0 component is refused");
    assert!(
        problem.message.contains("capstan:plugin@9.0.0")
            && problem
                .message
                .contains("this host supports capstan:plugin 0.1.0 to 0.2.0"),
        "{}",
        problem.message
    );
    assert!(reg.resolve(&rt, "future", None).await.is_err());
    // The rest still load.
    assert!(reg.resolve(&rt, "docx", None).await.is_ok());
}
