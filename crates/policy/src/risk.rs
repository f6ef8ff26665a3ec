//! The risk scale shared by the classifier, the policy and plugins: defined
//! once in `capstan-protocol`, re-exported here.

pub use capstan_protocol::Risk;

/// The risk to apply when a plugin declares its own risk for an action.
///
/// A plugin may only make things *stricter*: the result is the maximum of the
/// host's classification and the plugin's request, so a plugin claiming
/// `read_only` for a command the host classifies as `delete` still gets `delete`.
pub fn effective_risk(host: Risk, requested_by_plugin: Option<Risk>) -> Risk {
    host.at_least(requested_by_plugin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_is_by_severity() {
        for pair in Risk::ALL.windows(2) {
            assert!(pair[0] < pair[1], "{} < {}", pair[0], pair[1]);
        }
        assert_eq!(Risk::Write.max(Risk::Unknown), Risk::Unknown);
    }

    #[test]
    fn names_round_trip() {
        for r in Risk::ALL {
            assert_eq!(r.to_string().parse::<Risk>().unwrap(), r);
        }
        assert!("readonly".parse::<Risk>().is_err());
    }

    #[test]
    fn plugins_can_only_tighten() {
        assert_eq!(
            effective_risk(Risk::Delete, Some(Risk::ReadOnly)),
            Risk::Delete
        );
        assert_eq!(
            effective_risk(Risk::ReadOnly, Some(Risk::Network)),
            Risk::Network
        );
        assert_eq!(effective_risk(Risk::Write, None), Risk::Write);
    }
}
