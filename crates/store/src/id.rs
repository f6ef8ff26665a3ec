//! Short ids with a kind prefix (`ws_`, `ses_`, `run_`, ...), ordered by
//! creation time.

use std::time::{SystemTime, UNIX_EPOCH};

/// Lower-case Crockford base32: no `i`, `l`, `o`, `u`, so ids survive being
/// read aloud or typed back from a screenshot. In ASCII order, so the
/// encoded time sorts as the time does.
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Base32 digits of the creation time: 45 bits of milliseconds since 1970,
/// enough until the year 3084.
const TIME_DIGITS: u32 = 9;

/// Base32 digits of randomness after the time: 50 bits.
const RANDOM_DIGITS: u32 = 10;

/// `prefix_` followed by 19 base32 characters: the creation time in
/// milliseconds, then 50 random bits.
///
/// Why time first: every table is keyed by these ids, so ids that grow with
/// time make each new row land at the right edge of its B-trees, in pages
/// that are already dirty and cached, instead of in a random leaf. A run's
/// commit then writes a few pages instead of one per index per row (measured
/// in docs/BENCHMARKS.md). The time in an id says no more than the row's own
/// `created_at`/`started_at`.
///
/// Not secret and not cryptographic (fastrand): ids name rows, they grant
/// nothing. Two ids collide only when made in the same millisecond with the
/// same 50 random bits; if that happens anyway the insert fails on the
/// primary key, it never overwrites.
pub fn new_id(prefix: &str) -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut id = String::with_capacity(prefix.len() + 1 + (TIME_DIGITS + RANDOM_DIGITS) as usize);
    id.push_str(prefix);
    id.push('_');
    push_base32(
        &mut id,
        u64::try_from(millis).unwrap_or(u64::MAX),
        TIME_DIGITS,
    );
    push_base32(&mut id, fastrand::u64(..), RANDOM_DIGITS);
    id
}

/// Appends the low `digits * 5` bits of `value`, most significant first.
fn push_base32(id: &mut String, value: u64, digits: u32) {
    for i in (0..digits).rev() {
        id.push(ALPHABET[((value >> (5 * i)) & 31) as usize] as char);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_have_prefix_and_length() {
        let a = super::new_id("ws");
        let b = super::new_id("ws");
        assert!(a.starts_with("ws_") && a.len() == 22, "{a}");
        assert_ne!(a, b);
    }

    /// Later ids sort after earlier ones (a millisecond apart at least), as
    /// strings: what keeps new rows at the right edge of the B-trees.
    #[test]
    fn ids_sort_by_creation_time() {
        let mut ids = Vec::new();
        for _ in 0..5 {
            ids.push(super::new_id("run"));
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }
}
