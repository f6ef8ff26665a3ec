//! Short random ids with a kind prefix (`ws_`, `ses_`, `run_`, ...).

/// Lower-case Crockford base32: no `i`, `l`, `o`, `u`, so ids survive being
/// read aloud or typed back from a screenshot.
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// `prefix_` followed by 12 base32 characters (60 random bits).
///
/// Not secret and not cryptographic (fastrand): ids name rows, they grant
/// nothing. 60 bits make a collision between two ids of one kind unlikely
/// below about a billion rows; if one happens anyway the insert fails on the
/// primary key, it never overwrites.
pub fn new_id(prefix: &str) -> String {
    let mut bits = fastrand::u64(..);
    let mut id = String::with_capacity(prefix.len() + 13);
    id.push_str(prefix);
    id.push('_');
    for _ in 0..12 {
        id.push(ALPHABET[(bits & 31) as usize] as char);
        bits >>= 5;
    }
    id
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_have_prefix_and_length() {
        let a = super::new_id("ws");
        let b = super::new_id("ws");
        assert!(a.starts_with("ws_") && a.len() == 15, "{a}");
        assert_ne!(a, b);
    }
}
