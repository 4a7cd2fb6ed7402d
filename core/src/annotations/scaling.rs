//! Parsing of the labels and annotations that steer scaling (leader/follower zones, replica
//! mirroring from a reference resource, delayed downscale).
//!
//! Scaling removes pods, so a bad value never falls back to something that could scale: the
//! parse fails with an [`InvalidAnnotation`] and the controller holds that StatefulSet's
//! scaling and tells why in an Event. The one exception is `grafana.com/rollout-force-replicas`,
//! which the Go operator ignores when invalid (scaling then follows the leader or reference).

use std::collections::BTreeMap;
use std::time::Duration;

use super::rollout::{InvalidAnnotation, Parsed};
use super::{
    DELAYED_DOWNSCALE_ANNOTATION, DOWNSCALE_LEADER_ANNOTATION, FORCE_REPLICAS_ANNOTATION,
    MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, MIRROR_REPLICAS_API_VERSION_ANNOTATION,
    MIRROR_REPLICAS_KIND_ANNOTATION, MIRROR_REPLICAS_NAME_ANNOTATION,
    MIRROR_REPLICAS_WRITE_BACK_ANNOTATION, PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION,
    UPSCALE_ONLY_WHEN_LEADER_READY_ANNOTATION,
};
use crate::duration::{go as go_duration, prometheus};

/// What `grafana.com/rollout-force-replicas` accepts.
pub const FORCE_REPLICAS_ACCEPTED: &str = "an integer >= 0";
/// What `"true"`/`"false"` switches accept.
pub const BOOLEAN_ACCEPTED: &str = "\"true\" or \"false\"";
/// What the min-time annotation (or label) accepts.
pub const MIN_TIME_ACCEPTED: &str = "a Go duration such as 12h, 30m or 1h30m";
/// What the min-time label may hold beside the annotation.
pub const MIN_TIME_LABEL_ACCEPTED: &str =
    "as a label beside the annotation of the same name, the same time (the annotation wins)";
/// What the delayed-downscale annotation accepts.
pub const DELAYED_DOWNSCALE_ACCEPTED: &str =
    "a Prometheus duration such as 1h, 2d or 1w; 0 disables; never negative";
/// What the delayed-downscale URL annotation accepts.
pub const DELAYED_DOWNSCALE_URL_ACCEPTED: &str =
    "an http:// or https:// URL (its host is replaced by each pod's address)";
/// What the mirroring annotations need together.
pub const MIRROR_ACCEPTED: &str = "both the -name and the -kind annotations (non-empty)";

/// Fallback named in warnings of settings whose failure holds scaling.
const HOLD: &str = "no scaling of this StatefulSet until fixed";

/// The StatefulSet this one follows (`grafana.com/rollout-downscale-leader`); empty = none.
pub fn downscale_leader(annotations: &BTreeMap<String, String>) -> Option<&str> {
    annotations
        .get(DOWNSCALE_LEADER_ANNOTATION)
        .map(String::as_str)
        .filter(|leader| !leader.is_empty())
}

/// `grafana.com/rollout-upscale-only-when-leader-ready`: only `"true"` turns it on, as in the
/// Go operator; other values than `"false"`/empty warn (the author most likely wanted it on).
pub fn upscale_only_when_leader_ready(annotations: &BTreeMap<String, String>) -> Parsed<bool> {
    switch(
        annotations,
        UPSCALE_ONLY_WHEN_LEADER_READY_ANNOTATION,
        false,
    )
}

/// `grafana.com/rollout-force-replicas`: replicas overriding the leader's or the reference's.
/// Invalid values are ignored (with a warning), like the Go operator does.
pub fn force_replicas(annotations: &BTreeMap<String, String>) -> Parsed<Option<i32>> {
    let Some(raw) = annotations.get(FORCE_REPLICAS_ANNOTATION) else {
        return Parsed {
            value: None,
            warning: None,
        };
    };
    match raw.parse::<i32>() {
        Ok(replicas) if replicas >= 0 => Parsed {
            value: Some(replicas),
            warning: None,
        },
        _ => Parsed {
            value: None,
            warning: Some(InvalidAnnotation {
                key: FORCE_REPLICAS_ANNOTATION,
                value: raw.clone(),
                accepted: FORCE_REPLICAS_ACCEPTED,
                fallback: "ignored: the leader's or the reference's replicas".to_owned(),
            }),
        },
    }
}

/// `grafana.com/min-time-between-zones-downscale`, as an annotation or a label (Go duration
/// syntax); `None` when neither is set. The Go operator moved it from a label to an annotation
/// and still reads the label: both are read here, and when both are set and mean different
/// times the annotation wins and the label is warned about. An invalid value of the one used is
/// an error (no downscale until fixed).
pub fn min_time_between_zones_downscale(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<Parsed<Option<Duration>>, InvalidAnnotation> {
    let key = MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL;
    let parse = |raw: &String| {
        go_duration::parse(raw)
            .ok()
            .and_then(|nanos| u64::try_from(nanos).ok())
            .map(Duration::from_nanos)
            .ok_or_else(|| InvalidAnnotation {
                key,
                value: raw.clone(),
                accepted: MIN_TIME_ACCEPTED,
                fallback: "no downscale of this StatefulSet until fixed".to_owned(),
            })
    };
    match (annotations.get(key), labels.get(key)) {
        (None, None) => Ok(Parsed::valid(None)),
        (None, Some(label)) => Ok(Parsed::valid(Some(parse(label)?))),
        (Some(annotation), label) => {
            let value = parse(annotation)?;
            let warning = label
                .filter(|label| parse(label).ok() != Some(value))
                .map(|label| InvalidAnnotation {
                    key,
                    value: label.clone(),
                    accepted: MIN_TIME_LABEL_ACCEPTED,
                    fallback: format!("using the annotation's {annotation:?}"),
                });
            Ok(Parsed {
                value: Some(value),
                warning,
            })
        }
    }
}

/// Where the min-time between zone downscales that [`min_time_between_zones_downscale`] uses was
/// written: a denial says so, so the person reading it changes the right field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinTimeWrittenAs {
    Annotation,
    Label,
}

impl MinTimeWrittenAs {
    /// Of a StatefulSet whose min-time is set: the annotation when there is one (it wins), else
    /// the label.
    pub fn of(
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Option<Self> {
        let key = MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL;
        if annotations.contains_key(key) {
            Some(Self::Annotation)
        } else if labels.contains_key(key) {
            Some(Self::Label)
        } else {
            None
        }
    }

    /// "annotated" or "labelled", as in "is annotated to wait 1h0m0s".
    pub fn participle(self) -> &'static str {
        match self {
            Self::Annotation => "annotated",
            Self::Label => "labelled",
        }
    }
}

/// The reference resource a StatefulSet mirrors its replicas from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorReference {
    pub name: String,
    pub kind: String,
    /// `group/version`, or `version` for the core group (`v1` when the annotation is empty).
    pub api_version: String,
    /// Whether the reference's `status.replicas` is written back.
    pub write_back: bool,
}

/// The `grafana.com/rollout-mirror-replicas-from-resource-*` annotations. `Ok(None)` when none
/// is set. `-write-back` reads as the Go operator reads it ([`write_back`]).
pub fn mirror_reference(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<Parsed<MirrorReference>>, InvalidAnnotation> {
    let get = |key: &str| {
        annotations
            .get(key)
            .map(String::as_str)
            .filter(|value| !value.is_empty())
    };
    let name = get(MIRROR_REPLICAS_NAME_ANNOTATION);
    let kind = get(MIRROR_REPLICAS_KIND_ANNOTATION);
    let (name, kind) = match (name, kind) {
        (None, None) => return Ok(None),
        (Some(name), Some(kind)) => (name, kind),
        (None, Some(kind)) => {
            return Err(InvalidAnnotation {
                key: MIRROR_REPLICAS_NAME_ANNOTATION,
                value: String::new(),
                accepted: MIRROR_ACCEPTED,
                fallback: format!("{HOLD} (the -kind annotation says {kind})"),
            });
        }
        (Some(name), None) => {
            return Err(InvalidAnnotation {
                key: MIRROR_REPLICAS_KIND_ANNOTATION,
                value: String::new(),
                accepted: MIRROR_ACCEPTED,
                fallback: format!("{HOLD} (the -name annotation says {name})"),
            });
        }
    };
    let write_back = write_back(annotations);
    Ok(Some(Parsed {
        value: MirrorReference {
            name: name.to_owned(),
            kind: kind.to_owned(),
            api_version: get(MIRROR_REPLICAS_API_VERSION_ANNOTATION)
                .unwrap_or("v1")
                .to_owned(),
            write_back: write_back.value,
        },
        warning: write_back.warning,
    }))
}

/// Delayed-downscale settings of a StatefulSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayedDownscale {
    /// How long every pod going away must have been prepared.
    pub delay: Duration,
    /// The prepare URL as written; [`DelayedDownscale::url_for_host`] puts a pod's address in.
    pub url: url::Url,
}

impl DelayedDownscale {
    /// The prepare URL with its host replaced by `host` (a DNS name, an IPv4 address or a
    /// bracketed IPv6 address); scheme, port, path and query are kept.
    pub fn url_for_host(&self, host: &str) -> Result<String, String> {
        let mut url = self.url.clone();
        url.set_host(Some(host))
            .map_err(|error| format!("cannot put host {host:?} into {}: {error}", self.url))?;
        Ok(url.to_string())
    }
}

/// `grafana.com/rollout-delayed-downscale` and `grafana.com/rollout-prepare-delayed-downscale-url`.
/// `Ok(None)` when the delay is absent or 0 (disabled). A delay without a valid URL is an error.
pub fn delayed_downscale(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<DelayedDownscale>, InvalidAnnotation> {
    let Some(raw) = annotations.get(DELAYED_DOWNSCALE_ANNOTATION) else {
        return Ok(None);
    };
    let delay = prometheus::parse(raw).map_err(|_| InvalidAnnotation {
        key: DELAYED_DOWNSCALE_ANNOTATION,
        value: raw.clone(),
        accepted: DELAYED_DOWNSCALE_ACCEPTED,
        fallback: HOLD.to_owned(),
    })?;
    if delay.is_zero() {
        return Ok(None);
    }
    let raw_url = annotations
        .get(PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let invalid_url = || InvalidAnnotation {
        key: PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION,
        value: raw_url.clone(),
        accepted: DELAYED_DOWNSCALE_URL_ACCEPTED,
        fallback: HOLD.to_owned(),
    };
    let url = url::Url::parse(&raw_url).map_err(|_| invalid_url())?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(invalid_url());
    }
    Ok(Some(DelayedDownscale { delay, url }))
}

/// A `"true"`/`"false"` annotation with a default for absent or empty values.
/// What `-write-back` accepts: what Go's `strconv.ParseBool` does.
pub const GO_BOOLEAN_ACCEPTED: &str =
    "true or false as Go reads them (1, t, T, TRUE, true, True; 0, f, F, FALSE, false, False)";

/// `grafana.com/rollout-mirror-replicas-from-resource-write-back`, as the Go operator reads it
/// (`strconv.ParseBool`): absent, write back; a value it parses, as it says; any other value
/// (an empty one included) warns and does not write back, as the Go operator does not. So a
/// user switching between the two never finds the reference written when it was not before.
pub fn write_back(annotations: &BTreeMap<String, String>) -> Parsed<bool> {
    let Some(raw) = annotations.get(MIRROR_REPLICAS_WRITE_BACK_ANNOTATION) else {
        return Parsed {
            value: true,
            warning: None,
        };
    };
    match raw.as_str() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Parsed {
            value: true,
            warning: None,
        },
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Parsed {
            value: false,
            warning: None,
        },
        other => Parsed {
            value: false,
            warning: Some(InvalidAnnotation {
                key: MIRROR_REPLICAS_WRITE_BACK_ANNOTATION,
                value: other.to_owned(),
                accepted: GO_BOOLEAN_ACCEPTED,
                fallback: "not writing status.replicas back (as the Go operator)".to_owned(),
            }),
        },
    }
}

fn switch(
    annotations: &BTreeMap<String, String>,
    key: &'static str,
    default: bool,
) -> Parsed<bool> {
    match annotations.get(key).map(String::as_str) {
        None | Some("") => Parsed {
            value: default,
            warning: None,
        },
        Some("true") => Parsed {
            value: true,
            warning: None,
        },
        Some("false") => Parsed {
            value: false,
            warning: None,
        },
        Some(other) => Parsed {
            value: default,
            warning: Some(InvalidAnnotation {
                key,
                value: other.to_owned(),
                accepted: BOOLEAN_ACCEPTED,
                fallback: format!("using {default}"),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn leader_is_the_annotation_value_and_empty_means_none() {
        assert_eq!(
            downscale_leader(&annotated(&[(DOWNSCALE_LEADER_ANNOTATION, "zone-a")])),
            Some("zone-a")
        );
        assert_eq!(
            downscale_leader(&annotated(&[(DOWNSCALE_LEADER_ANNOTATION, "")])),
            None
        );
        assert_eq!(downscale_leader(&BTreeMap::new()), None);
    }

    #[test]
    fn upscale_only_when_leader_ready_bad_values_warn_and_stay_off() {
        assert!(
            upscale_only_when_leader_ready(&annotated(&[(
                UPSCALE_ONLY_WHEN_LEADER_READY_ANNOTATION,
                "true"
            )]))
            .value
        );
        for raw in ["yes", "True", "1"] {
            let parsed = upscale_only_when_leader_ready(&annotated(&[(
                UPSCALE_ONLY_WHEN_LEADER_READY_ANNOTATION,
                raw,
            )]));
            assert!(!parsed.value, "{raw:?}");
            assert_eq!(parsed.warning.expect("warns").value, raw);
        }
    }

    #[test]
    fn force_replicas_takes_non_negative_integers() {
        for (raw, expected) in [("0", 0), ("5", 5), ("+3", 3)] {
            let parsed = force_replicas(&annotated(&[(FORCE_REPLICAS_ANNOTATION, raw)]));
            assert_eq!(parsed.value, Some(expected), "{raw:?}");
            assert_eq!(parsed.warning, None, "{raw:?}");
        }
        assert_eq!(force_replicas(&BTreeMap::new()).value, None);
    }

    #[test]
    fn force_replicas_bad_values_are_ignored_with_a_warning() {
        for raw in ["-1", "", "two", "1.5", " 3", "99999999999"] {
            let parsed = force_replicas(&annotated(&[(FORCE_REPLICAS_ANNOTATION, raw)]));
            assert_eq!(parsed.value, None, "{raw:?}");
            let warning = parsed.warning.expect("a bad value warns");
            assert_eq!(warning.key, FORCE_REPLICAS_ANNOTATION);
            assert_eq!(warning.value, raw);
        }
    }

    #[test]
    fn min_time_uses_go_syntax_as_a_label_or_an_annotation() {
        let empty = BTreeMap::new();
        for (labels, annotations) in [(true, false), (false, true), (true, true)] {
            let read = |raw: &str| {
                let set = annotated(&[(MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, raw)]);
                let parsed = min_time_between_zones_downscale(
                    if labels { &set } else { &empty },
                    if annotations { &set } else { &empty },
                )?;
                assert_eq!(parsed.warning, None, "the same value twice is no conflict");
                Ok::<_, InvalidAnnotation>(parsed.value)
            };
            assert_eq!(read("12h"), Ok(Some(Duration::from_secs(12 * 3600))));
            assert_eq!(read("1h30m"), Ok(Some(Duration::from_secs(5400))));
            assert_eq!(read("5s"), Ok(Some(Duration::from_secs(5))));
            assert_eq!(read("0"), Ok(Some(Duration::ZERO)));
        }
        assert_eq!(
            min_time_between_zones_downscale(&empty, &empty),
            Ok(Parsed::valid(None))
        );
    }

    /// The annotation wins over a label that means another time, which is warned about; "60m"
    /// and "1h" mean the same and are no conflict.
    #[test]
    fn min_time_annotation_wins_over_a_different_label() {
        let label = annotated(&[(MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, "5m")]);
        let annotation = annotated(&[(MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, "12h")]);
        let parsed = min_time_between_zones_downscale(&label, &annotation).unwrap();
        assert_eq!(parsed.value, Some(Duration::from_secs(12 * 3600)));
        let warning = parsed.warning.expect("a different label warns");
        assert_eq!(warning.value, "5m");
        assert!(
            warning.to_string().contains("the annotation's \"12h\""),
            "{warning}"
        );

        let same = annotated(&[(MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, "720m")]);
        let parsed = min_time_between_zones_downscale(&same, &annotation).unwrap();
        assert_eq!(parsed.warning, None);
        // A broken label beside a good annotation only warns; a broken annotation holds.
        let broken = annotated(&[(MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, "soon")]);
        let parsed = min_time_between_zones_downscale(&broken, &annotation).unwrap();
        assert_eq!(parsed.value, Some(Duration::from_secs(12 * 3600)));
        assert!(parsed.warning.is_some());
        assert!(min_time_between_zones_downscale(&label, &broken).is_err());
    }

    #[test]
    fn min_time_bad_values_are_errors() {
        let empty = BTreeMap::new();
        for raw in ["12", "1d", "-1h", "abc", "", "h"] {
            let set = annotated(&[(MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, raw)]);
            for (labels, annotations) in [(&set, &empty), (&empty, &set)] {
                let error = min_time_between_zones_downscale(labels, annotations).expect_err(raw);
                assert_eq!(error.key, MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL);
                assert_eq!(error.value, raw);
            }
        }
    }

    #[test]
    fn mirror_reference_needs_name_and_kind() {
        assert_eq!(mirror_reference(&BTreeMap::new()), Ok(None));
        let parsed = mirror_reference(&annotated(&[
            (MIRROR_REPLICAS_NAME_ANNOTATION, "ingester"),
            (MIRROR_REPLICAS_KIND_ANNOTATION, "ReplicaTemplate"),
            (
                MIRROR_REPLICAS_API_VERSION_ANNOTATION,
                "rollout-operator.grafana.com/v1",
            ),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            parsed.value,
            MirrorReference {
                name: "ingester".into(),
                kind: "ReplicaTemplate".into(),
                api_version: "rollout-operator.grafana.com/v1".into(),
                write_back: true,
            }
        );
        let core = mirror_reference(&annotated(&[
            (MIRROR_REPLICAS_NAME_ANNOTATION, "rc"),
            (MIRROR_REPLICAS_KIND_ANNOTATION, "ReplicationController"),
            (MIRROR_REPLICAS_WRITE_BACK_ANNOTATION, "false"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(core.value.api_version, "v1");
        assert!(!core.value.write_back);
    }

    #[test]
    fn mirror_reference_missing_name_or_kind_is_an_error() {
        let no_kind = mirror_reference(&annotated(&[(MIRROR_REPLICAS_NAME_ANNOTATION, "x")]));
        assert_eq!(no_kind.unwrap_err().key, MIRROR_REPLICAS_KIND_ANNOTATION);
        let no_name = mirror_reference(&annotated(&[
            (MIRROR_REPLICAS_KIND_ANNOTATION, "ReplicaTemplate"),
            (MIRROR_REPLICAS_NAME_ANNOTATION, ""),
        ]));
        assert_eq!(no_name.unwrap_err().key, MIRROR_REPLICAS_NAME_ANNOTATION);
    }

    #[test]
    fn mirror_write_back_reads_as_go_and_a_value_go_cannot_parse_warns_and_writes_nothing() {
        let reference = |value: Option<&str>| {
            let mut annotations = vec![
                (MIRROR_REPLICAS_NAME_ANNOTATION, "x"),
                (MIRROR_REPLICAS_KIND_ANNOTATION, "ReplicaTemplate"),
            ];
            annotations.extend(value.map(|value| (MIRROR_REPLICAS_WRITE_BACK_ANNOTATION, value)));
            mirror_reference(&annotated(&annotations)).unwrap().unwrap()
        };
        let absent = reference(None);
        assert!(absent.value.write_back && absent.warning.is_none());
        for yes in ["1", "t", "T", "TRUE", "true", "True"] {
            let parsed = reference(Some(yes));
            assert!(parsed.value.write_back && parsed.warning.is_none(), "{yes}");
        }
        for no in ["0", "f", "F", "FALSE", "false", "False"] {
            let parsed = reference(Some(no));
            assert!(!parsed.value.write_back && parsed.warning.is_none(), "{no}");
        }
        for unparsable in ["no", "", "yes", " true", "tRUE"] {
            let parsed = reference(Some(unparsable));
            assert!(!parsed.value.write_back, "{unparsable:?}");
            let warning = parsed.warning.expect("a warning");
            assert_eq!(warning.key, MIRROR_REPLICAS_WRITE_BACK_ANNOTATION);
            assert!(warning.fallback.contains("not writing"), "{warning:?}");
        }
    }

    #[test]
    fn delayed_downscale_disabled_when_absent_or_zero() {
        assert_eq!(delayed_downscale(&BTreeMap::new()), Ok(None));
        assert_eq!(
            delayed_downscale(&annotated(&[(DELAYED_DOWNSCALE_ANNOTATION, "0")])),
            Ok(None)
        );
    }

    #[test]
    fn delayed_downscale_with_url_replaces_the_host_only() {
        let parsed = delayed_downscale(&annotated(&[
            (DELAYED_DOWNSCALE_ANNOTATION, "1h"),
            (
                PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION,
                "http://example:8080/ingester/prepare-delayed-downscale?x=1",
            ),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(parsed.delay, Duration::from_secs(3600));
        assert_eq!(
            parsed.url_for_host("127.0.3.4").unwrap(),
            "http://127.0.3.4:8080/ingester/prepare-delayed-downscale?x=1"
        );
        assert_eq!(
            parsed
                .url_for_host("ingester-zone-a-1.ingester-zone-a.ns.svc.cluster.local")
                .unwrap(),
            "http://ingester-zone-a-1.ingester-zone-a.ns.svc.cluster.local:8080/ingester/prepare-delayed-downscale?x=1"
        );
    }

    #[test]
    fn delayed_downscale_bad_delay_is_an_error() {
        for raw in ["-1h", "1.5h", "soon", ""] {
            let error = delayed_downscale(&annotated(&[
                (DELAYED_DOWNSCALE_ANNOTATION, raw),
                (PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION, "http://x/p"),
            ]))
            .expect_err(raw);
            assert_eq!(error.key, DELAYED_DOWNSCALE_ANNOTATION);
            assert_eq!(error.value, raw);
        }
    }

    #[test]
    fn delayed_downscale_bad_or_missing_url_is_an_error() {
        for url in [
            None,
            Some(""),
            Some("not a url"),
            Some("ftp://x/p"),
            Some("/path"),
        ] {
            let mut pairs = vec![(DELAYED_DOWNSCALE_ANNOTATION, "1h")];
            if let Some(url) = url {
                pairs.push((PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION, url));
            }
            let error = delayed_downscale(&annotated(&pairs)).expect_err("bad url");
            assert_eq!(
                error.key, PREPARE_DELAYED_DOWNSCALE_URL_ANNOTATION,
                "{url:?}"
            );
        }
    }
}
