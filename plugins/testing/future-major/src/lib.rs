//! A component for `capstan:plugin@9.0.0` (see wit/): the host must refuse it.

wit_bindgen::generate!({ world: "plugin", path: "wit" });

use exports::capstan::plugin::capability::{Guest, Task};

struct Future;

impl Guest for Future {
    fn describe() -> Vec<String> {
        vec!["future".into()]
    }

    fn invoke(t: Task) -> Result<String, String> {
        Ok(t.input)
    }
}

export!(Future);
