use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;

use super::*;

struct T {
    id: String,
    deps: Vec<String>,
    fails: bool,
}

impl Node for T {
    fn id(&self) -> &str {
        &self.id
    }
    fn depends_on(&self) -> &[String] {
        &self.deps
    }
}

fn t(id: &str, deps: &[&str]) -> T {
    T {
        id: id.into(),
        deps: deps.iter().map(|d| d.to_string()).collect(),
        fails: false,
    }
}

fn failing(id: &str, deps: &[&str]) -> T {
    T {
        fails: true,
        ..t(id, deps)
    }
}

/// Records what the scheduler did; stops after the first failure when
/// `fail_fast`.
#[derive(Default)]
struct Log {
    log: Vec<String>,
    fail_fast: bool,
    failed: bool,
    now: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Handler<T> for Log {
    type Output = bool;
    type Running = BoxFuture<'static, bool>;
    fn stopped(&self) -> bool {
        self.fail_fast && self.failed
    }
    fn start(&mut self, node: &T) -> BoxFuture<'static, bool> {
        self.log.push(format!("start {}", node.id));
        let (now, peak) = (self.now.clone(), self.peak.clone());
        let fails = node.fails;
        async move {
            let running = now.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(running, Ordering::SeqCst);
            tokio::task::yield_now().await;
            now.fetch_sub(1, Ordering::SeqCst);
            !fails
        }
        .boxed()
    }
    fn ended(&mut self, node: &T, ok: bool) -> Ended {
        self.log.push(format!("end {} {ok}", node.id));
        if ok {
            Ended::Completed
        } else {
            self.failed = true;
            Ended::Failed
        }
    }
    fn not_run(&mut self, node: &T, why: NotRun<'_>) {
        self.log.push(match why {
            NotRun::DependencyFailed(d) => format!("skip {} for {d}", node.id),
            NotRun::Stopped => format!("stop {}", node.id),
        });
    }
}

fn lines(log: &Log, prefix: &str) -> Vec<String> {
    let mut out: Vec<String> = log
        .log
        .iter()
        .filter(|l| l.starts_with(prefix))
        .cloned()
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn every_node_starts_after_its_dependencies_complete() {
    let nodes = [
        t("c", &["a", "b"]),
        t("a", &[]),
        t("b", &["a"]),
        t("d", &[]),
    ];
    let mut log = Log::default();
    run(&nodes, 4, &[], &mut log).await;
    let pos = |l: &str| log.log.iter().position(|x| x == l).unwrap();
    assert!(pos("end a true") < pos("start b"), "{:?}", log.log);
    assert!(pos("end b true") < pos("start c"), "{:?}", log.log);
    assert_eq!(lines(&log, "end").len(), 4, "{:?}", log.log);
}

#[tokio::test]
async fn no_more_than_the_limit_run_at_once() {
    let nodes: Vec<T> = (0..8).map(|i| t(&format!("n{i}"), &[])).collect();
    for limit in [1, 3] {
        let mut log = Log::default();
        run(&nodes, limit, &[], &mut log).await;
        assert_eq!(log.peak.load(Ordering::SeqCst), limit);
        assert_eq!(lines(&log, "end").len(), 8);
    }
    let mut log = Log::default();
    run(&nodes, 0, &[], &mut log).await;
    assert_eq!(log.peak.load(Ordering::SeqCst), 1, "0 counts as 1");
}

#[tokio::test]
async fn dependents_of_a_failure_are_skipped_transitively_and_the_rest_runs() {
    // Listed before what they wait for, to show skips are decided in any order.
    let nodes = [
        t("c", &["b"]),
        t("b", &["a"]),
        failing("a", &[]),
        t("x", &[]),
    ];
    let mut log = Log::default();
    run(&nodes, 1, &[], &mut log).await;
    assert_eq!(lines(&log, "skip"), ["skip b for a", "skip c for b"]);
    assert_eq!(lines(&log, "end"), ["end a false", "end x true"]);
}

#[tokio::test]
async fn once_stopped_nothing_new_starts_and_every_waiting_node_is_reported() {
    let nodes = [
        failing("a", &[]),
        t("b", &[]),
        t("c", &["b"]),
        t("d", &["a"]),
    ];
    let mut log = Log {
        fail_fast: true,
        ..Default::default()
    };
    run(&nodes, 1, &[], &mut log).await;
    assert_eq!(lines(&log, "start"), ["start a"]);
    assert_eq!(lines(&log, "skip"), ["skip d for a"]);
    assert_eq!(lines(&log, "stop"), ["stop b", "stop c"]);
}

#[tokio::test]
async fn failed_ids_from_outside_and_missing_ids_count_as_failed() {
    let nodes = [t("a", &["rejected"]), t("b", &["ghost"]), t("c", &[])];
    let mut log = Log::default();
    run(&nodes, 2, &["rejected"], &mut log).await;
    assert_eq!(
        lines(&log, "skip"),
        ["skip a for rejected", "skip b for ghost"]
    );
    assert_eq!(lines(&log, "end"), ["end c true"]);
}

#[tokio::test]
async fn a_cycle_is_reported_not_run_instead_of_hanging() {
    let nodes = [t("a", &["b"]), t("b", &["a"]), t("c", &[])];
    let mut log = Log::default();
    run(&nodes, 2, &[], &mut log).await;
    assert_eq!(lines(&log, "stop"), ["stop a", "stop b"]);
    assert_eq!(lines(&log, "end"), ["end c true"]);
}

#[test]
fn the_order_is_stable_and_a_cycle_is_named_as_a_loop() {
    let nodes = [t("t3", &["t1", "t2"]), t("t1", &[]), t("t2", &[])];
    let order: Vec<&str> = topological_order(&nodes)
        .unwrap()
        .into_iter()
        .map(|i| nodes[i].id.as_str())
        .collect();
    assert_eq!(order, ["t1", "t2", "t3"]);
    let nodes = [
        t("a", &["c"]),
        t("b", &["a"]),
        t("c", &["b"]),
        t("d", &["a"]),
        t("e", &[]),
    ];
    let cycle = topological_order(&nodes).unwrap_err();
    assert_eq!(cycle.to_string(), "a -> c -> b -> a");
    assert_eq!(cycle.stuck, ["a", "b", "c", "d"]);
}
