//! A downscale as admissions judge it (of a StatefulSet, Deployment or ReplicaSet, or of its
//! `/scale`), and the no-downscale rule: an object labelled `grafana.com/no-downscale=true` may
//! not lose replicas. Prepare-downscale starts from the same [`Downscale`] ([`super::prepare`]).

use std::fmt;

use crate::annotations::NO_DOWNSCALE_LABEL;

use super::verdict::{JudgingFailed, Reason, Verdict};

/// The label value that forbids downscales.
pub const NO_DOWNSCALE_VALUE: &str = "true";

/// Kinds the downscale webhooks understand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    StatefulSet,
    Deployment,
    ReplicaSet,
    /// The `/scale` subresource: it carries replicas but not the parent's labels.
    Scale,
}

/// The resources whose `/scale` the webhooks judge: the parent of a `Scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParentKind {
    StatefulSet,
    Deployment,
    ReplicaSet,
}

impl ParentKind {
    /// From a resource's plural (`statefulsets`).
    pub fn from_resource(resource: &str) -> Option<Self> {
        match resource {
            "statefulsets" => Some(Self::StatefulSet),
            "deployments" => Some(Self::Deployment),
            "replicasets" => Some(Self::ReplicaSet),
            _ => None,
        }
    }
    pub fn resource(self) -> &'static str {
        match self {
            Self::StatefulSet => "statefulsets",
            Self::Deployment => "deployments",
            Self::ReplicaSet => "replicasets",
        }
    }
}

/// The identity and version of a stored object, as a review's copy gives them: what a forged
/// review must guess and a stale one gets wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredAs {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl StoredAs {
    /// Whether `metadata` is the same object at the same version. A copy that names neither
    /// matches nothing: the API server always sends both for an update.
    pub fn matches(
        &self,
        metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> bool {
        self.uid.is_some()
            && self.resource_version.is_some()
            && self.uid == metadata.uid
            && self.resource_version == metadata.resource_version
    }
}

/// A decrease of replicas, with what the messages name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downscale {
    /// The resource's plural, e.g. `statefulsets` (also for `/scale`).
    pub resource: String,
    pub name: String,
    pub namespace: String,
    pub from: i32,
    pub to: i32,
}

impl fmt::Display for Downscale {
    /// The subject of every message, as the Go operator words it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "downscale of {}/{} in {} from {} to {} replicas",
            self.resource, self.name, self.namespace, self.from, self.to
        )
    }
}

/// An UPDATE's replicas, old and new (`None`: absent or null): the `(from, to)` of a downscale,
/// or the verdict that ends the review (anything else is no downscale).
pub fn replicas_change(old: Option<i32>, new: Option<i32>) -> Result<(i32, i32), Verdict> {
    match (old, new) {
        (None, None) => Err(Verdict::allow()),
        (None, Some(_)) | (Some(_), None) => Err(Verdict::allow_with_warning(
            "old/new replicas is nil, allowing the change",
        )),
        (Some(from), Some(to)) if from <= to => Err(Verdict::allow()),
        (Some(from), Some(to)) => Ok((from, to)),
    }
}

/// A review's object that could not be decoded: not judged.
pub fn undecodable(which: &'static str, error: impl fmt::Display) -> Verdict {
    Verdict::Unjudged(JudgingFailed::Undecodable {
        which,
        error: error.to_string(),
    })
}

/// What no-downscale concluded from the review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoDownscale {
    Decided(Verdict),
    /// A downscale through `/scale`: the parent's label decides ([`no_downscale`]).
    NeedsParentLabel(ParentKind),
}

/// Judges a downscale of an object of `kind` as far as the review tells: the object's own
/// no-downscale `label` (as stored) decides, a `/scale`'s parent's must be looked up.
pub fn assess_no_downscale(
    downscale: &Downscale,
    kind: WorkloadKind,
    label: Option<&str>,
) -> NoDownscale {
    match kind {
        WorkloadKind::StatefulSet | WorkloadKind::Deployment | WorkloadKind::ReplicaSet => {
            NoDownscale::Decided(no_downscale(downscale, label))
        }
        WorkloadKind::Scale => match ParentKind::from_resource(&downscale.resource) {
            Some(parent) => NoDownscale::NeedsParentLabel(parent),
            // Not an error: a /scale of a kind no-downscale does not guard.
            None => NoDownscale::Decided(unsupported_resource(downscale)),
        },
    }
}

/// A `/scale` of a kind the webhook does not guard: allowed, with a warning.
pub fn unsupported_resource(downscale: &Downscale) -> Verdict {
    Verdict::allow_with_warning(format!(
        "unsupported resource {}, allowing the change",
        downscale.resource
    ))
}

/// Refuses a downscale of an object whose `grafana.com/no-downscale` label is `label`.
pub fn no_downscale(downscale: &Downscale, label: Option<&str>) -> Verdict {
    if label != Some(NO_DOWNSCALE_VALUE) {
        return Verdict::allow();
    }
    Verdict::refuse(
        Reason::NoDownscaleLabel,
        format!(
            "{downscale} is not allowed because it has the label '{NO_DOWNSCALE_LABEL}={NO_DOWNSCALE_VALUE}'"
        ),
    )
}

/// The parent of a `/scale` could not be read: not judged.
pub fn parent_unavailable(downscale: &Downscale, error: &dyn fmt::Display) -> Verdict {
    Verdict::Unjudged(JudgingFailed::ParentUnreadable {
        resource: downscale.resource.clone(),
        name: downscale.name.clone(),
        namespace: downscale.namespace.clone(),
        error: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn downscale(resource: &str, from: i32, to: i32) -> Downscale {
        Downscale {
            resource: resource.into(),
            name: "ingester-zone-a".into(),
            namespace: "mimir".into(),
            from,
            to,
        }
    }

    #[test]
    fn only_decreases_of_replicas_are_downscales() {
        let warned = Verdict::allow_with_warning("old/new replicas is nil, allowing the change");
        let cases = [
            (Some(5), Some(3), Ok((5, 3))),
            (Some(1), Some(0), Ok((1, 0))),
            (Some(0), Some(-1), Ok((0, -1))),
            (Some(3), Some(5), Err(Verdict::allow())),
            (Some(3), Some(3), Err(Verdict::allow())),
            (None, None, Err(Verdict::allow())),
            (None, Some(3), Err(warned.clone())),
            (Some(3), None, Err(warned)),
        ];
        for (old, new, expected) in cases {
            assert_eq!(replicas_change(old, new), expected, "{old:?} -> {new:?}");
        }
        assert_eq!(
            downscale("statefulsets", 5, 3).to_string(),
            "downscale of statefulsets/ingester-zone-a in mimir from 5 to 3 replicas"
        );
    }

    #[test]
    fn the_label_true_and_only_it_refuses() {
        for (label, refused) in [
            (Some("true"), true),
            (Some("false"), false),
            (Some("TRUE"), false),
            (Some(""), false),
            (None, false),
        ] {
            for resource in ["statefulsets", "deployments", "replicasets"] {
                let verdict = no_downscale(&downscale(resource, 5, 3), label);
                match verdict.refusal() {
                    Some(refusal) => {
                        assert!(refused, "{label:?}");
                        assert_eq!(refusal.kind(), "no-downscale-label");
                        assert_eq!(
                            refusal.message,
                            format!(
                                "downscale of {resource}/ingester-zone-a in mimir from 5 to 3 replicas is not allowed because it has the label 'grafana.com/no-downscale=true'"
                            )
                        );
                    }
                    None => assert_eq!(verdict, Verdict::allow(), "{label:?}"),
                }
            }
        }
    }

    #[test]
    fn objects_decide_by_their_label_scales_by_their_parents() {
        let cases = [
            (WorkloadKind::StatefulSet, "statefulsets", None),
            (WorkloadKind::Deployment, "deployments", None),
            (WorkloadKind::ReplicaSet, "replicasets", None),
            (
                WorkloadKind::Scale,
                "statefulsets",
                Some(ParentKind::StatefulSet),
            ),
            (
                WorkloadKind::Scale,
                "deployments",
                Some(ParentKind::Deployment),
            ),
            (
                WorkloadKind::Scale,
                "replicasets",
                Some(ParentKind::ReplicaSet),
            ),
        ];
        for (kind, resource, parent) in cases {
            let downscale = downscale(resource, 5, 3);
            let assessed = assess_no_downscale(&downscale, kind, Some("true"));
            match parent {
                Some(parent) => assert_eq!(assessed, NoDownscale::NeedsParentLabel(parent)),
                None => assert_eq!(
                    assessed,
                    NoDownscale::Decided(no_downscale(&downscale, Some("true")))
                ),
            }
        }
        let widgets = downscale("widgets", 5, 3);
        assert_eq!(
            assess_no_downscale(&widgets, WorkloadKind::Scale, None),
            NoDownscale::Decided(Verdict::allow_with_warning(
                "unsupported resource widgets, allowing the change"
            ))
        );
    }

    #[test]
    fn an_unreadable_parent_is_not_judged() {
        let verdict = parent_unavailable(&downscale("statefulsets", 2, 1), &"timed out");
        let Verdict::Unjudged(failed) = verdict else {
            panic!("not judged: {verdict}")
        };
        assert_eq!(
            failed.warning(),
            "can't get statefulsets/ingester-zone-a in namespace mimir, allowing the change: timed out"
        );
    }
}
