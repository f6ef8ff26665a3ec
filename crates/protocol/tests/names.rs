//! Every closed set spells each value the same way on the wire (serde) and in
//! text (`as_str`, `Display`, `FromStr`), and refuses unknown names by listing
//! the known ones.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_protocol::*;

macro_rules! check {
    ($($ty:ty),+ $(,)?) => {$(
        for v in <$ty>::ALL {
            let wire = serde_json::to_value(v).expect("serialises");
            assert_eq!(wire, serde_json::Value::String(v.as_str().into()), "{}", stringify!($ty));
            assert_eq!(v.to_string(), v.as_str());
            assert_eq!(v.as_str().parse::<$ty>().expect("parses"), v);
            let back: $ty = serde_json::from_value(wire).expect("deserialises");
            assert_eq!(back, v);
        }
        let err = "no-such-name".parse::<$ty>().expect_err("unknown name refused");
        assert_eq!(err.got, "no-such-name");
        for v in <$ty>::ALL {
            assert!(err.expected.contains(v.as_str()), "{err}");
        }
    )+};
}

#[test]
fn serde_and_as_str_agree_for_every_closed_set() {
    check!(
        ChangeKind,
        ChangeSetState,
        ConnectProtocol,
        ConnectVerdict,
        DecidedBy,
        EntryType,
        FailureReason,
        GrantSource,
        Profile,
        Risk,
        SandboxMode,
        SkipReason,
        StepDecision,
        TaskStatus,
    );
}
