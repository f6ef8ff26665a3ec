//! Gives freed heap back to the system now and then in a long-running process.
//!
//! glibc keeps what a thread's arena freed (a component compiled on first use,
//! an index refresh, a burst of runs) mapped and resident until that arena's
//! top is free, which in a server is rarely: measured on `capstan serve` after
//! warm-up and five questions, 170 MiB resident of which `malloc_trim(0)`
//! returned 63 MiB. So a server trims every [`PERIOD`]: one pass over the
//! arenas (`madvise(MADV_DONTNEED)` on their free pages), well under a
//! millisecond of CPU when little is free.

use std::time::Duration;

/// How often a long-running process trims.
pub const PERIOD: Duration = Duration::from_secs(10);

/// Trims every [`PERIOD`] until the runtime stops. A no-op where the C library
/// is not glibc.
pub fn spawn() {
    tokio::spawn(async {
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let _ = tokio::task::spawn_blocking(trim).await;
        }
    });
}

/// Returns the free pages of every malloc arena to the system.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: malloc_trim only takes the arenas' own locks and releases
        // pages that malloc holds free; no pointer of ours is involved.
        unsafe {
            malloc_trim(0);
        }
    }
}
