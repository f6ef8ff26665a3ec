//! An order for a graph, or the cycle that prevents one.

use std::collections::HashMap;
use std::fmt;

use crate::Node;

/// Dependencies that loop: no order can put every node after what it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// Every node that could not be ordered (on a cycle or behind one), by id.
    pub stuck: Vec<String>,
    /// One loop, walked along dependencies: `a -> c -> b -> a`.
    pub path: Vec<String>,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path.join(" -> "))
    }
}

/// Node indices in an order where every node comes after the nodes it depends
/// on; among nodes ready at once, the earliest in `nodes` first, so the order
/// is stable and reads like the input. Dependencies on ids not in `nodes` are
/// ignored here (the scheduler treats them as failed).
pub fn topological_order<N: Node>(nodes: &[N]) -> Result<Vec<usize>, Cycle> {
    let index: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id(), i)).collect();
    let mut waiting_on: Vec<usize> = nodes
        .iter()
        .map(|n| {
            n.depends_on()
                .iter()
                .filter(|d| index.contains_key(d.as_str()))
                .count()
        })
        .collect();
    let mut done = vec![false; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    while order.len() < nodes.len() {
        let Some(next) = (0..nodes.len()).find(|&i| !done[i] && waiting_on[i] == 0) else {
            return Err(cycle(nodes, &index, &done));
        };
        done[next] = true;
        order.push(next);
        for (i, n) in nodes.iter().enumerate() {
            if !done[i] {
                waiting_on[i] -= n
                    .depends_on()
                    .iter()
                    .filter(|d| *d == nodes[next].id())
                    .count();
            }
        }
    }
    Ok(order)
}

/// Walks dependencies from a stuck node until one repeats: that loop is the cycle.
fn cycle<N: Node>(nodes: &[N], index: &HashMap<&str, usize>, done: &[bool]) -> Cycle {
    let mut stuck: Vec<String> = (0..nodes.len())
        .filter(|&i| !done[i])
        .map(|i| nodes[i].id().to_string())
        .collect();
    stuck.sort();
    let mut path: Vec<usize> = Vec::new();
    let mut at = (0..nodes.len()).find(|&i| !done[i]).unwrap_or(0);
    loop {
        if let Some(pos) = path.iter().position(|&p| p == at) {
            let mut names: Vec<String> = path[pos..]
                .iter()
                .map(|&i| nodes[i].id().to_string())
                .collect();
            names.push(nodes[at].id().to_string());
            return Cycle { stuck, path: names };
        }
        path.push(at);
        at = nodes[at]
            .depends_on()
            .iter()
            .filter_map(|d| index.get(d.as_str()).copied())
            .find(|&i| !done[i])
            .unwrap_or(at);
    }
}
