//! Workspace changes over HTTP: a run's change sets (with diffs) and undo.
//! Same doors as the rest of the API (Host, Origin, token).

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use super::http::ApiJson;
use crate::plugins::services::changes::{event, open_store};

fn store(state: &AppState) -> Result<capstan_changes::Store, ApiError> {
    let app = state.runs.app();
    open_store(&app.dirs.data, &app.config.changes).map_err(ApiError::internal)
}

/// `GET /v1/runs/{id}/changes`: the run's change sets, oldest first, each as
/// its `workspace.changes` event body plus `created_ms` and `kept`.
pub async fn run_changes(
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = store(&state)?;
    let sets = tokio::task::spawn_blocking(move || store.list())
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    let sets: Vec<Value> = sets
        .iter()
        .filter(|r| r.origin.run_id == run_id)
        .map(|r| {
            let mut v = serde_json::to_value(event(r, None, &[])).unwrap_or(Value::Null);
            v["created_ms"] = json!(r.created_ms);
            v["kept"] = json!(r.kept);
            v
        })
        .collect();
    Ok(Json(json!({ "run_id": run_id, "change_sets": sets })))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UndoBody {
    /// Overwrite files changed since the set landed.
    pub force: bool,
    /// Undo the other files, leave the changed ones.
    pub keep_changed: bool,
}

/// `POST /v1/changes/{id}/undo`: 200 with what was restored; 409 naming
/// the files changed since (nothing undone) unless `keep_changed` or
/// `force`.
pub async fn undo(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UndoBody>,
) -> Result<Json<Value>, ApiError> {
    if body.force && body.keep_changed {
        return Err(ApiError::bad_request(
            "`force` and `keep_changed` exclude each other; send one",
        ));
    }
    let conflicts = if body.force {
        capstan_changes::Conflicts::Force
    } else if body.keep_changed {
        capstan_changes::Conflicts::Skip
    } else {
        capstan_changes::Conflicts::Refuse
    };
    capstan_changes::check_id(&id).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let store = store(&state)?;
    let id2 = id.clone();
    let report = tokio::task::spawn_blocking(move || store.undo(&id2, conflicts))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| match e {
            capstan_changes::Error::NotFound(_) => ApiError::not_found(e.to_string()),
            capstan_changes::Error::Invalid(_) => ApiError::conflict(e.to_string()),
            e => ApiError::internal(e),
        })?;
    if !report.done {
        let names: Vec<&str> = report.refused.iter().map(|r| r.path.as_str()).collect();
        return Err(ApiError::conflict(format!(
            "nothing undone: these files changed since change set {id} landed: {}; send {{\"keep_changed\": true}} to undo the others or {{\"force\": true}} to overwrite them",
            names.join(", ")
        )));
    }
    Ok(Json(json!(report)))
}
