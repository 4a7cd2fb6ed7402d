//! Parsing of the annotations that steer a rollout.
//!
//! A bad value never stops a rollout and never panics: it falls back to the value the Go
//! operator uses and comes with an [`InvalidAnnotation`] that the controller turns into a
//! Kubernetes Event, so the person who wrote it finds out.

use std::collections::BTreeMap;

use super::{
    MAX_ROLLING_MEMBERS_ANNOTATION, MAX_UNAVAILABLE_ANNOTATION, PARTITION_ANNOTATION,
    ROLLOUT_PAUSED_ANNOTATION, UPDATE_BY_ANNOTATION,
};

/// What `rollout-max-unavailable` accepts, as told to the person who wrote something else.
pub const MAX_UNAVAILABLE_ACCEPTED: &str = "a positive integer or a percentage from 1% to 100%";
/// What `baton.dev/max-rolling-members` accepts, as told to the person who wrote something else.
pub const MAX_ROLLING_MEMBERS_ACCEPTED: &str = "a positive integer";

/// How many members of a group may be not ready at once (`baton.dev/max-rolling-members`) by
/// one member's annotations: missing → none said; a positive integer as written (Go's
/// `strconv.Atoi` syntax, as `rollout-max-unavailable`); anything else → 1, the zone rule,
/// and a warning.
pub fn max_rolling_members(annotations: &BTreeMap<String, String>) -> Option<Parsed<u32>> {
    let raw = annotations.get(MAX_ROLLING_MEMBERS_ANNOTATION)?;
    Some(match parse_positive(raw) {
        Some(value) => Parsed::valid(value),
        None => Parsed {
            value: 1,
            warning: Some(InvalidAnnotation {
                key: MAX_ROLLING_MEMBERS_ANNOTATION,
                value: raw.clone(),
                accepted: MAX_ROLLING_MEMBERS_ACCEPTED,
                fallback: "using 1 (one member at a time)".to_owned(),
            }),
        },
    })
}

/// What `grafana.com/rollout-paused` accepts, as told to the person who wrote something else.
pub const PAUSED_ACCEPTED: &str = "\"true\" to pause, \"false\" or nothing otherwise";

/// What `baton.dev/update-by` accepts, as told to the person who wrote something else.
pub const UPDATE_BY_ACCEPTED: &str =
    "\"partition\" (a RollingUpdate StatefulSet whose partition baton lowers) or \"delete\"";

/// A value read from an annotation, and why it was not taken as written (if it was not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<T> {
    pub value: T,
    pub warning: Option<InvalidAnnotation>,
}

impl<T> Parsed<T> {
    pub(crate) fn valid(value: T) -> Self {
        Self {
            value,
            warning: None,
        }
    }
}

/// An annotation whose value was ignored: which key, what it held, what is accepted and
/// what baton does instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {key} has the invalid value {value:?} (accepted: {accepted}); {fallback}")]
pub struct InvalidAnnotation {
    pub key: &'static str,
    pub value: String,
    pub accepted: &'static str,
    /// What baton does instead, as the end of the sentence: `using 1` for a value taken in its
    /// place, `holding the group until it is fixed` for a hold.
    pub fallback: String,
}

/// How many pods of a StatefulSet with `replicas` replicas a rollout may have not ready at once,
/// from its `rollout-max-unavailable` annotation.
///
/// A positive integer is taken as is; `N%` with N in 1..=100 is `floor(N * replicas / 100)`
/// but at least 1 (so any percentage of 0 replicas is 1). Missing → 1. Anything else (0,
/// negative, over 100%, whitespace, empty, garbage) → 1 and a warning. Integers are read like
/// Go's `strconv.Atoi` (an optional sign, then digits), so values the Go operator accepted,
/// such as `+2` or `02`, keep working.
pub fn max_unavailable(annotations: &BTreeMap<String, String>, replicas: u32) -> Parsed<u32> {
    const DEFAULT: u32 = 1;
    let Some(raw) = annotations.get(MAX_UNAVAILABLE_ANNOTATION) else {
        return Parsed::valid(DEFAULT);
    };
    match parse_max_unavailable(raw, replicas) {
        Some(value) => Parsed::valid(value),
        None => Parsed {
            value: DEFAULT,
            warning: Some(InvalidAnnotation {
                key: MAX_UNAVAILABLE_ANNOTATION,
                value: raw.clone(),
                accepted: MAX_UNAVAILABLE_ACCEPTED,
                fallback: format!("using {DEFAULT}"),
            }),
        },
    }
}

fn parse_max_unavailable(raw: &str, replicas: u32) -> Option<u32> {
    if let Some(percent) = raw.strip_suffix('%') {
        let percent: i64 = percent.parse().ok()?;
        if !(1..=100).contains(&percent) {
            return None;
        }
        // Both factors fit in 32 bits, so the product cannot overflow 64.
        let scaled = percent * i64::from(replicas) / 100;
        return Some(u32::try_from(scaled).unwrap_or(u32::MAX).max(1));
    }
    parse_positive(raw)
}

/// A positive integer, as Go's `strconv.Atoi` reads one (an optional sign, then digits).
fn parse_positive(raw: &str) -> Option<u32> {
    let count: i64 = raw.parse().ok()?;
    if count <= 0 {
        return None;
    }
    Some(u32::try_from(count).unwrap_or(u32::MAX))
}

/// Whether a StatefulSet's rollout is paused by `grafana.com/rollout-paused`.
///
/// Only `"true"` pauses, exactly like the Go operator. `"false"`, an empty value or no
/// annotation mean not paused; anything else (`"True"`, `"yes"`, `"1"`) also means not paused,
/// but warns, because whoever wrote it most likely wanted a pause they are not getting.
pub fn paused(annotations: &BTreeMap<String, String>) -> Parsed<bool> {
    match annotations
        .get(ROLLOUT_PAUSED_ANNOTATION)
        .map(String::as_str)
    {
        Some("true") => Parsed::valid(true),
        None | Some("false") | Some("") => Parsed::valid(false),
        Some(other) => Parsed {
            value: false,
            warning: Some(InvalidAnnotation {
                key: ROLLOUT_PAUSED_ANNOTATION,
                value: other.to_owned(),
                accepted: PAUSED_ACCEPTED,
                fallback: "using not paused".to_owned(),
            }),
        },
    }
}

/// How a StatefulSet's pods are replaced in a rollout (`baton.dev/update-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateBy {
    /// baton deletes them and the StatefulSet controller recreates them (`OnDelete`).
    Delete,
    /// baton lowers `spec.updateStrategy.rollingUpdate.partition` and the StatefulSet
    /// controller replaces the pods at or above it (`RollingUpdate`).
    Partition,
}

/// How a StatefulSet's pods are replaced: missing or `delete` → [`UpdateBy::Delete`],
/// `partition` → [`UpdateBy::Partition`]; anything else → `Delete` and a warning (a
/// RollingUpdate StatefulSet then holds its group, as without the annotation).
pub fn update_by(annotations: &BTreeMap<String, String>) -> Parsed<UpdateBy> {
    match annotations.get(UPDATE_BY_ANNOTATION).map(String::as_str) {
        None | Some("delete") => Parsed::valid(UpdateBy::Delete),
        Some("partition") => Parsed::valid(UpdateBy::Partition),
        Some(other) => Parsed {
            value: UpdateBy::Delete,
            warning: Some(InvalidAnnotation {
                key: UPDATE_BY_ANNOTATION,
                value: other.to_owned(),
                accepted: UPDATE_BY_ACCEPTED,
                fallback: "using delete".to_owned(),
            }),
        },
    }
}

/// The partition baton last set on a StatefulSet (`baton.dev/partition`), if it set one; an
/// unreadable value is none, with a warning (baton then takes the partition as it finds it).
pub fn partition_set(annotations: &BTreeMap<String, String>) -> Parsed<Option<u32>> {
    match annotations.get(PARTITION_ANNOTATION) {
        None => Parsed::valid(None),
        Some(raw) => match raw.parse::<u32>() {
            Ok(partition) => Parsed::valid(Some(partition)),
            Err(_) => Parsed {
                value: None,
                warning: Some(InvalidAnnotation {
                    key: PARTITION_ANNOTATION,
                    value: raw.clone(),
                    accepted: "the partition baton set, a number",
                    fallback: "using the partition in the spec".to_owned(),
                }),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(key: &str, value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(key.to_owned(), value.to_owned())])
    }

    fn max_unavailable_of(value: &str, replicas: u32) -> Parsed<u32> {
        max_unavailable(&annotated(MAX_UNAVAILABLE_ANNOTATION, value), replicas)
    }

    #[test]
    fn max_unavailable_defaults_to_one_without_warning_when_missing() {
        assert_eq!(
            max_unavailable(&BTreeMap::new(), 10),
            Parsed {
                value: 1,
                warning: None
            }
        );
    }

    #[test]
    fn max_unavailable_takes_positive_integers_as_written() {
        for (raw, expected) in [("1", 1), ("2", 2), ("7", 7), ("+3", 3), ("02", 2)] {
            let parsed = max_unavailable_of(raw, 5);
            assert_eq!(parsed.value, expected, "value {raw:?}");
            assert_eq!(parsed.warning, None, "value {raw:?}");
        }
    }

    #[test]
    fn max_unavailable_integer_larger_than_replicas_is_kept() {
        assert_eq!(max_unavailable_of("10", 3).value, 10);
    }

    #[test]
    fn max_unavailable_integer_beyond_u32_saturates() {
        let parsed = max_unavailable_of("99999999999", 3);
        assert_eq!(parsed.value, u32::MAX);
        assert_eq!(parsed.warning, None);
    }

    #[test]
    fn max_unavailable_percentage_is_floored_and_at_least_one() {
        for (raw, replicas, expected) in [
            ("50%", 4, 2),
            ("50%", 3, 1),
            ("34%", 3, 1),
            ("67%", 3, 2),
            ("100%", 5, 5),
            ("1%", 5, 1),
            ("10%", 100, 10),
            ("25%", 1, 1),
            ("100%", u32::MAX, u32::MAX),
        ] {
            let parsed = max_unavailable_of(raw, replicas);
            assert_eq!(parsed.value, expected, "{raw} of {replicas}");
            assert_eq!(parsed.warning, None, "{raw} of {replicas}");
        }
    }

    #[test]
    fn max_unavailable_percentage_of_zero_replicas_is_one() {
        assert_eq!(
            max_unavailable_of("50%", 0),
            Parsed {
                value: 1,
                warning: None
            }
        );
        assert_eq!(max_unavailable_of("100%", 0).value, 1);
    }

    #[test]
    fn max_unavailable_bad_values_fall_back_to_one_with_a_warning() {
        let bad_values = [
            "0",
            "-1",
            "-50%",
            "0%",
            "101%",
            "150%",
            "abc",
            "1.5",
            "1.5%",
            "%",
            "",
            " ",
            " 2",
            "2 ",
            "2 %",
            "two",
            "1e3",
            "0x10",
            "2%%",
            "50 %",
            "-0",
            "99999999999999999999",
        ];
        for raw in bad_values {
            let parsed = max_unavailable_of(raw, 6);
            assert_eq!(parsed.value, 1, "value {raw:?}");
            assert_eq!(
                parsed.warning,
                Some(InvalidAnnotation {
                    key: MAX_UNAVAILABLE_ANNOTATION,
                    value: raw.to_owned(),
                    accepted: MAX_UNAVAILABLE_ACCEPTED,
                    fallback: "using 1".to_owned(),
                }),
                "value {raw:?}"
            );
        }
    }

    #[test]
    fn max_unavailable_warning_names_key_value_and_what_is_accepted() {
        let warning = max_unavailable_of("lots", 3)
            .warning
            .expect("garbage must warn");
        assert_eq!(
            warning.to_string(),
            "annotation rollout-max-unavailable has the invalid value \"lots\" \
             (accepted: a positive integer or a percentage from 1% to 100%); using 1"
        );
    }

    #[test]
    fn paused_only_when_exactly_true() {
        let parsed = paused(&annotated(ROLLOUT_PAUSED_ANNOTATION, "true"));
        assert_eq!(
            parsed,
            Parsed {
                value: true,
                warning: None
            }
        );
    }

    #[test]
    fn not_paused_without_warning_when_missing_false_or_empty() {
        assert_eq!(paused(&BTreeMap::new()), Parsed::valid(false));
        for raw in ["false", ""] {
            assert_eq!(
                paused(&annotated(ROLLOUT_PAUSED_ANNOTATION, raw)),
                Parsed::valid(false),
                "value {raw:?}"
            );
        }
    }

    #[test]
    fn paused_bad_values_are_not_paused_and_warn() {
        for raw in [
            "True", "TRUE", "yes", "1", "on", " true", "true ", "paused", "False",
        ] {
            let parsed = paused(&annotated(ROLLOUT_PAUSED_ANNOTATION, raw));
            assert!(!parsed.value, "value {raw:?}");
            let warning = parsed.warning.expect("a bad value must warn");
            assert_eq!(warning.key, ROLLOUT_PAUSED_ANNOTATION);
            assert_eq!(warning.value, raw);
            assert_eq!(warning.accepted, PAUSED_ACCEPTED);
            assert_eq!(warning.fallback, "using not paused");
        }
    }

    #[test]
    fn other_annotations_are_ignored() {
        let annotations = annotated("rollout-max-unavailable-typo", "garbage");
        assert_eq!(max_unavailable(&annotations, 3), Parsed::valid(1));
        assert_eq!(paused(&annotations), Parsed::valid(false));
    }
}
