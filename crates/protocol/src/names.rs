//! One spelling per variant: `as_str`, `Display` and `FromStr` for a closed
//! set, generated from the same list so they cannot disagree with each other
//! (serde's `rename_all` is checked against them in the tests).

/// A name that is not one of a closed set's, with the names that are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{got}` (expected {expected})")]
pub struct UnknownName {
    /// What kind of name was expected (`risk`, `profile`...).
    pub what: &'static str,
    /// The name given.
    pub got: String,
    /// The names accepted, comma-separated.
    pub expected: String,
}

/// Implements `ALL`, `as_str`, `Display` and `FromStr` for a fieldless enum.
macro_rules! names {
    ($ty:ident, $what:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: [$ty; [$(stringify!($variant)),+].len()] = [$($ty::$variant),+];

            /// The name on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $crate::names::UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| $crate::names::UnknownName {
                        what: $what,
                        got: s.to_owned(),
                        expected: Self::ALL
                            .iter()
                            .map(|v| v.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
            }
        }
    };
}

pub(crate) use names;
