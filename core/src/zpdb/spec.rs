//! The `ZoneAwarePodDisruptionBudget` custom resource as stored (serde, the Go operator's field
//! names) and its validation into a [`Budget`] the eviction decision can use.
//!
//! Why one parse for both webhooks: `/admission/zpdb-validation` refuses exactly what the
//! eviction decision could not use, and an object that got in anyway (created before the
//! webhook was registered) is named as invalid in every eviction it would have judged.

use std::fmt;

use jiff::SignedDuration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube_core::Selector;

use crate::labels::{LabelSet, Requirements};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::duration::go as go_duration;

pub const GROUP: &str = "rollout-operator.grafana.com";
pub const VERSION: &str = "v1";
pub const KIND: &str = "ZoneAwarePodDisruptionBudget";
pub const PLURAL: &str = "zoneawarepoddisruptionbudgets";
/// `maxUnavailable` when neither form is set.
pub const DEFAULT_MAX_UNAVAILABLE: u32 = 1;

/// A `ZoneAwarePodDisruptionBudget` (`rollout-operator.grafana.com/v1`, namespaced).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneAwarePodDisruptionBudget {
    #[serde(default = "api_version")]
    pub api_version: String,
    #[serde(default = "kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ZpdbSpec,
}

fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}
fn kind() -> String {
    KIND.to_owned()
}

/// `spec`, every field as the user wrote it (validation is [`Budget::parse`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ZpdbSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable_percentage: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name_partition_regex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name_regex_group: Option<i64>,
    /// A Go duration (`20m`, `1h30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_zone_eviction_delay: Option<String>,
}

impl ZoneAwarePodDisruptionBudget {
    pub fn new(name: &str, namespace: &str, spec: ZpdbSpec) -> Self {
        Self {
            api_version: api_version(),
            kind: kind(),
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            spec,
        }
    }

    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }
}

namespaced_resource!(ZoneAwarePodDisruptionBudget, GROUP, VERSION, KIND, PLURAL);

/// How many pods may be unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnavailable {
    Count(u32),
    /// Of the StatefulSet's spec.replicas, rounded down, at least 1; 0 % allows none.
    Percentage(u32),
}

impl MaxUnavailable {
    /// The number of unavailable pods allowed in a StatefulSet of `replicas`.
    pub fn of(self, replicas: i32) -> u32 {
        match self {
            MaxUnavailable::Count(count) => count,
            MaxUnavailable::Percentage(0) => 0,
            MaxUnavailable::Percentage(percent) => {
                let replicas = u64::try_from(replicas.max(0)).unwrap_or(0);
                let floor = u64::from(percent) * replicas / 100;
                u32::try_from(floor).unwrap_or(u32::MAX).max(1)
            }
        }
    }
}

impl fmt::Display for MaxUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxUnavailable::Count(count) => write!(f, "maxUnavailable {count}"),
            MaxUnavailable::Percentage(percent) => write!(f, "maxUnavailablePercentage {percent}"),
        }
    }
}

/// Partition mode: which part of a pod's name is its partition.
#[derive(Debug, Clone)]
pub struct Partition {
    /// Anchored: matched against the whole pod name.
    pub regex: Regex,
    /// The capture group holding the partition (1-based; 0 would be the whole name).
    pub group: usize,
}

impl Partition {
    /// The partition of `pod_name`; `None` when the name does not match or the group is empty.
    /// A member cluster's pod (`cluster/pod`) is matched by its name in its cluster, so the
    /// budget's regex means the same in every member.
    pub fn of<'n>(&self, pod_name: &'n str) -> Option<&'n str> {
        self.regex
            .captures(crate::clusters::split(pod_name).1)?
            .get(self.group)
            .map(|group| group.as_str())
            .filter(|partition| !partition.is_empty())
    }
}

/// A validated budget.
#[derive(Debug, Clone)]
pub struct Budget {
    pub name: String,
    pub selector: Requirements,
    pub max_unavailable: MaxUnavailable,
    pub partition: Option<Partition>,
    /// Partition mode: a pod counts as unavailable until this long after it turned Ready.
    pub cross_zone_eviction_delay: Option<SignedDuration>,
}

/// One thing wrong with a spec, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, e.g. `spec.maxUnavailable`.
    pub field: &'static str,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A budget that failed validation: every problem found, and its selector when that one is
/// usable (so evictions of the pods it selects can name it as the reason they are refused).
#[derive(Debug, Clone)]
pub struct InvalidBudget {
    pub name: String,
    pub selector: Option<Requirements>,
    pub errors: Vec<FieldError>,
}

impl fmt::Display for InvalidBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ZoneAwarePodDisruptionBudget {} is invalid: ", self.name)?;
        for (index, error) in self.errors.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

/// A budget as observed: usable, or invalid with the reasons.
pub type Observed = Result<Budget, InvalidBudget>;

pub const FIELD_SELECTOR: &str = "spec.selector";
pub const FIELD_MAX_UNAVAILABLE: &str = "spec.maxUnavailable";
pub const FIELD_MAX_UNAVAILABLE_PERCENTAGE: &str = "spec.maxUnavailablePercentage";
pub const FIELD_PARTITION_REGEX: &str = "spec.podNamePartitionRegex";
pub const FIELD_REGEX_GROUP: &str = "spec.podNameRegexGroup";
pub const FIELD_CROSS_ZONE_DELAY: &str = "spec.crossZoneEvictionDelay";

impl Budget {
    /// Validates `zpdb` against every rule of the contract; all problems are reported at once.
    pub fn parse(zpdb: &ZoneAwarePodDisruptionBudget) -> Observed {
        let spec = &zpdb.spec;
        let mut errors = Vec::new();
        let mut error = |field, message: String| errors.push(FieldError { field, message });

        let selector = match &spec.selector {
            None => {
                error(FIELD_SELECTOR, "is required".to_owned());
                None
            }
            Some(selector) => match parse_selector(selector) {
                Ok(selector) => Some(selector),
                Err(message) => {
                    error(FIELD_SELECTOR, message);
                    None
                }
            },
        };

        let max_unavailable = match (spec.max_unavailable, spec.max_unavailable_percentage) {
            (Some(_), Some(_)) => {
                error(
                    FIELD_MAX_UNAVAILABLE,
                    "only one of maxUnavailable and maxUnavailablePercentage may be set".to_owned(),
                );
                None
            }
            (Some(count), None) => match u32::try_from(count) {
                Ok(count) => Some(MaxUnavailable::Count(count)),
                Err(_) => {
                    error(
                        FIELD_MAX_UNAVAILABLE,
                        format!("must be an integer from 0 to {}, got {count}", u32::MAX),
                    );
                    None
                }
            },
            (None, Some(percent)) => match u32::try_from(percent) {
                Ok(percent) if percent <= 100 => Some(MaxUnavailable::Percentage(percent)),
                _ => {
                    error(
                        FIELD_MAX_UNAVAILABLE_PERCENTAGE,
                        format!("must be an integer from 0 to 100, got {percent}"),
                    );
                    None
                }
            },
            (None, None) => Some(MaxUnavailable::Count(DEFAULT_MAX_UNAVAILABLE)),
        };

        let regex = spec
            .pod_name_partition_regex
            .as_deref()
            .filter(|regex| !regex.is_empty());
        let partition = match regex {
            None => {
                if let Some(group) = spec.pod_name_regex_group {
                    error(
                        FIELD_REGEX_GROUP,
                        format!("is {group} but podNamePartitionRegex is not set"),
                    );
                }
                None
            }
            Some(regex) => match parse_partition(regex, spec.pod_name_regex_group) {
                Ok(partition) => Some(partition),
                Err(field_error) => {
                    errors.push(field_error);
                    None
                }
            },
        };
        let mut error = |field, message: String| errors.push(FieldError { field, message });
        if regex.is_some() && spec.max_unavailable_percentage.is_some() {
            error(
                FIELD_MAX_UNAVAILABLE_PERCENTAGE,
                "cannot be used with podNamePartitionRegex: set maxUnavailable instead".to_owned(),
            );
        }

        let cross_zone_eviction_delay = match spec.cross_zone_eviction_delay.as_deref() {
            None | Some("") => None,
            Some(text) => match go_duration::parse(text) {
                Ok(nanos) if nanos < 0 => {
                    error(
                        FIELD_CROSS_ZONE_DELAY,
                        format!("must not be negative, got {text:?}"),
                    );
                    None
                }
                Ok(nanos) => {
                    if regex.is_none() {
                        error(
                            FIELD_CROSS_ZONE_DELAY,
                            "needs podNamePartitionRegex: the delay holds a partition's other zones"
                                .to_owned(),
                        );
                    }
                    Some(SignedDuration::from_nanos(nanos))
                }
                Err(message) => {
                    error(
                        FIELD_CROSS_ZONE_DELAY,
                        format!("{message} (a Go duration such as \"20m\" or \"1h30m\")"),
                    );
                    None
                }
            },
        };

        let name = zpdb.name().to_owned();
        match (selector, max_unavailable) {
            (Some(selector), Some(max_unavailable)) if errors.is_empty() => Ok(Budget {
                name,
                selector,
                max_unavailable,
                partition,
                cross_zone_eviction_delay,
            }),
            (selector, _) => Err(InvalidBudget {
                name,
                selector,
                errors,
            }),
        }
    }

    /// Whether this budget selects an object with `labels`.
    /// Whether it selects what carries `labels` (a pod's, or an object's map).
    pub fn selects(&self, labels: &impl LabelSet) -> bool {
        self.selector.matches(labels)
    }
}

impl InvalidBudget {
    pub fn selects(&self, labels: &impl LabelSet) -> bool {
        self.selector
            .as_ref()
            .is_some_and(|selector| selector.matches(labels))
    }
}

/// A label selector that selects something: an empty one would take every pod of the
/// namespace, so it is refused.
fn parse_selector(selector: &LabelSelector) -> Result<Requirements, String> {
    let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|m| m.is_empty());
    if empty {
        return Err("must have matchLabels or matchExpressions: an empty selector would select every pod of the namespace".to_owned());
    }
    Selector::try_from(selector.clone())
        .map(Requirements::from)
        .map_err(|error| format!("is not a valid label selector: {error}"))
}

fn parse_partition(regex: &str, group: Option<i64>) -> Result<Partition, FieldError> {
    let compiled = Regex::new(&format!("^(?:{regex})$")).map_err(|error| FieldError {
        field: FIELD_PARTITION_REGEX,
        message: format!("{regex:?} is not a valid regular expression: {error}"),
    })?;
    // captures_len counts the implicit whole-match group.
    let groups = compiled.captures_len() - 1;
    if groups == 0 {
        return Err(FieldError {
            field: FIELD_PARTITION_REGEX,
            message: format!(
                "{regex:?} has no capture group: the partition is the part of the pod name in parentheses, e.g. \"ingester-zone-[a-z]-([0-9]+)\""
            ),
        });
    }
    let group = match group {
        None if groups > 1 => {
            return Err(FieldError {
                field: FIELD_REGEX_GROUP,
                message: format!(
                    "must be set: podNamePartitionRegex {regex:?} has {groups} capture groups"
                ),
            });
        }
        None => 1,
        Some(group) => match usize::try_from(group) {
            Ok(group) if (1..=groups).contains(&group) => group,
            _ => {
                return Err(FieldError {
                    field: FIELD_REGEX_GROUP,
                    message: format!(
                        "is {group}, out of range: podNamePartitionRegex {regex:?} has {groups} capture group{} (1-based)",
                        if groups == 1 { "" } else { "s" }
                    ),
                });
            }
        },
    };
    Ok(Partition {
        regex: compiled,
        group,
    })
}
