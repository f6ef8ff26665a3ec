//! The wasmtime engine configuration, defined once for the runtime and for
//! host/build.rs, which compiles the bundled components ahead of time with it.
//!
//! Compiled code loads only into an engine with the same compatibility hash
//! (wasmtime version, code-generation settings, wasm features, the CPU's
//! features): when the two configurations drift apart, the bundled code is
//! simply not used and the first run compiles again. `tests` in
//! `plugins::runtime` catch that drift.
//!
//! This file is compiled into build.rs too (`#[path]`), so it names nothing
//! from the crate.

/// The most memory a plugin may ask for (`limits.memory_mb`), and what the
/// pooling allocator reserves per linear memory.
pub const MAX_MEMORY_MB: u64 = 1024;

/// How many plugin instances a process may run at once.
///
/// Setting up the engine's pool costs in proportion (a guard page per slot):
/// about 0.9 ms at the server's size, paid by every one-shot command before
/// it sized its pool to one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capacity {
    /// One run at a time, with up to 8 tasks in parallel (`capstan ask`,
    /// `invoke`, `chat`, `index`...; a higher `[run] max_parallel` takes
    /// [`Capacity::Server`]).
    OneRun,
    /// Many runs at once (`capstan serve`, `capstan mcp`).
    Server,
}

impl Capacity {
    /// Component instances in the pool.
    pub fn instances(self) -> u32 {
        match self {
            // Every capability's `describe`, the tasks in parallel, an
            // indexer's parser instances: well under this.
            Capacity::OneRun => 32,
            Capacity::Server => 256,
        }
    }
}

/// The configuration of the process's one engine, whose pooling allocator has
/// slots for `capacity`'s component instances running at once (stacks,
/// memories and tables in proportion).
///
/// The slot counts only size the pool set up when the engine is created;
/// they are not part of the compatibility hash, so compiled code loads at
/// every capacity (build.rs checks that it compiled for all of them).
pub fn config(capacity: Capacity) -> wasmtime::Config {
    let instances = capacity.instances();
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    // No plugin interface uses the component model's concurrency (streams,
    // futures, concurrent calls): without it a store sets up no concurrent
    // state, and dropping one disposes of no idle fiber.
    config.concurrency_support(false);
    // Deadlines and cancellation (a ticker bumps the epoch) and optional fuel
    // limits are compiled into the code as checks.
    config.epoch_interruption(true);
    config.consume_fuel(true);
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(instances);
    pool.total_core_instances(4 * instances);
    pool.total_memories(2 * instances);
    pool.total_tables(2 * instances);
    pool.total_stacks(instances);
    pool.max_memory_size((MAX_MEMORY_MB as usize) << 20);
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    config
}

/// The key compiled code is filed under: the first 8 bytes of the SHA-256 of
/// the engine's compatibility hash, in hex. Stable across processes (std's
/// `DefaultHasher` makes no such promise, so the `Hash` output is fed into
/// SHA-256).
pub fn compatibility_key(engine: &wasmtime::Engine) -> String {
    use sha2::Digest;
    use std::hash::{Hash, Hasher};

    struct ShaHasher(sha2::Sha256);
    impl Hasher for ShaHasher {
        fn finish(&self) -> u64 {
            unreachable!("only finalized through sha256")
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }

    let mut h = ShaHasher(sha2::Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    hex::encode(&h.0.finalize()[..8])
}
