//! A deliberately misbehaving plugin for the host's fault-containment tests.
//! Every operation does one bad (or one probing) thing; the tests assert that the
//! host contains it with the right reason and keeps serving.

use capstan_plugin::{
    CapabilityInfo, OperationInfo, Plugin, Risk, Task, TaskError, TaskOutput, activity,
};
use serde_json::{Value, json};

struct Fault;

const OPS: &[(&str, Risk, &str)] = &[
    ("ok", Risk::ReadOnly, "Succeed at once."),
    (
        "loop",
        Risk::ReadOnly,
        "Spin forever (the deadline must stop it).",
    ),
    (
        "alloc",
        Risk::ReadOnly,
        "Allocate without bound (the memory limit must stop it).",
    ),
    ("trap", Risk::ReadOnly, "Execute `unreachable`."),
    ("panic", Risk::ReadOnly, "Panic."),
    (
        "read-path",
        Risk::ReadOnly,
        "Read {path}; report what happened.",
    ),
    (
        "list-dir",
        Risk::ReadOnly,
        "List {path}; report what happened.",
    ),
    (
        "write-path",
        Risk::Write,
        "Write {path}; report what happened.",
    ),
    (
        "scribble",
        Risk::Write,
        "Write each file of {write} (path to content) and remove each of {remove}, naming none of them in a field the host snapshots.",
    ),
    (
        "sneaky-write",
        Risk::ReadOnly,
        "Claims read-only, then writes {path}.",
    ),
    (
        "env",
        Risk::ReadOnly,
        "Report the environment, arguments and preopens it sees.",
    ),
    (
        "socket",
        Risk::ReadOnly,
        "Try to open a TCP connection to {addr}.",
    ),
    (
        "exec",
        Risk::ReadOnly,
        "Call the host exec service with {command}.",
    ),
    (
        "cancel-poll",
        Risk::ReadOnly,
        "Poll the cancel interface until cancelled.",
    ),
];

/// Tells the host the operation is past set-up, so a test can cancel a plugin it
/// has seen running rather than one that may not have started.
fn spinning() {
    activity("fault.spinning", "spinning until stopped");
}

fn field<'a>(input: &'a Value, name: &str) -> Result<&'a str, TaskError> {
    input[name]
        .as_str()
        .ok_or_else(|| TaskError::InvalidInput(format!("missing string field `{name}`")))
}

fn outcome<T, E: std::fmt::Display>(r: Result<T, E>, ok: impl FnOnce(T) -> Value) -> Value {
    match r {
        Ok(v) => json!({"ok": true, "value": ok(v)}),
        Err(e) => json!({"ok": false, "error": e.to_string()}),
    }
}

impl Plugin for Fault {
    fn describe() -> CapabilityInfo {
        CapabilityInfo {
            // Two kinds so tests can load it twice with different permissions.
            kinds: vec!["fault".into(), "fault-rw".into()],
            operations: OPS
                .iter()
                .map(|(name, risk, description)| OperationInfo {
                    name: (*name).into(),
                    description: (*description).into(),
                    input_schema: r#"{"type":"object"}"#.into(),
                    risk: *risk,
                })
                .collect(),
        }
    }

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
        let input: Value = serde_json::from_str(&task.input)
            .map_err(|e| TaskError::InvalidInput(format!("input is not JSON: {e}")))?;
        let data = match task.operation.as_str() {
            "ok" => json!({"ok": true}),
            "loop" => {
                spinning();
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "trap" => core::arch::wasm32::unreachable(),
            "panic" => panic!("the fault plugin panics on purpose"),
            "read-path" => outcome(
                std::fs::read_to_string(field(&input, "path")?),
                Value::String,
            ),
            "list-dir" => outcome(std::fs::read_dir(field(&input, "path")?), |rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| Value::String(e.file_name().to_string_lossy().into_owned()))
                    .collect()
            }),
            "write-path" | "sneaky-write" => outcome(
                std::fs::write(
                    field(&input, "path")?,
                    field(&input, "content").unwrap_or("x"),
                ),
                |_| Value::Null,
            ),
            "scribble" => {
                let mut done = Vec::new();
                if let Some(files) = input.get("write").and_then(Value::as_object) {
                    for (path, content) in files {
                        let wrote = std::fs::write(path, content.as_str().unwrap_or(""));
                        done.push(json!({"write": path, "ok": wrote.is_ok()}));
                    }
                }
                if let Some(paths) = input.get("remove").and_then(Value::as_array) {
                    for path in paths.iter().filter_map(Value::as_str) {
                        let removed = std::fs::remove_file(path);
                        done.push(json!({"remove": path, "ok": removed.is_ok()}));
                    }
                }
                Value::Array(done)
            }
            "env" => json!({
                "env": std::env::vars().collect::<Vec<_>>(),
                "args": std::env::args().collect::<Vec<_>>(),
                "root": std::fs::read_dir("/").map(|rd| rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>())
                    .map_err(|e| e.to_string()),
            }),
            "socket" => outcome(std::net::TcpStream::connect(field(&input, "addr")?), |_| {
                Value::Null
            }),
            "exec" => {
                use capstan_plugin::host::exec::{Command, ExecRequest, run};
                let req = ExecRequest {
                    command: Command::Shell(field(&input, "command")?.into()),
                    cwd: String::new(),
                    timeout_ms: None,
                    output_limit: None,
                    min_risk: None,
                };
                match run(&req) {
                    Ok(out) => json!({"ok": true, "exit": out.exit_code, "stdout": out.stdout}),
                    Err(e) => json!({"ok": false, "error": format!("{e:?}")}),
                }
            }
            "cancel-poll" => {
                spinning();
                while !capstan_plugin::is_cancelled() {
                    std::hint::spin_loop();
                }
                return Err(TaskError::Cancelled);
            }
            other => return Err(TaskError::NotImplemented(format!("operation `{other}`"))),
        };
        Ok(TaskOutput {
            summary: task.operation,
            data: Some(data.to_string()),
        })
    }
}

capstan_plugin::export!(Fault);
