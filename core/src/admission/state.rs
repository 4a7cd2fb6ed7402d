//! Who may change what baton remembers, judged on the change and who asks.
//!
//! - **Its memory on StatefulSets** (`baton.dev/gate-state`, `baton.dev/check-state`,
//!   `baton.dev/hook-state`, …) is set by baton's controller only. Anyone else who could set it
//!   could skip what it records: a zone's `clearedAt` skips its soak and its BeforeZone hook, a
//!   future `lastRun` silences a health check, a forged count passes a step, and a new member
//!   created with forged state supplies it to the whole group. Removing it is allowed: baton
//!   then starts afresh, which makes it more careful, never less (a soak restarts, a zone is
//!   gated again, a hook is called again). And a client that replaces the whole object (a PUT
//!   from a GitOps tool) must not be refused for leaving out what it never wrote.
//! - **Its records** (ConfigMaps labelled `app.kubernetes.io/managed-by: baton`: the downscale
//!   ledgers and the eviction records) are created and changed by baton's controller and
//!   webhook only. Whoever else could edit them would remove an entry to lift a downscale's
//!   min-time, or add one to block evictions; make it `immutable` to fail every later write, so
//!   every downscale and drain; add an owner whose deletion takes it away, or a finalizer.
//!   Everything but their annotations is guarded; those stay anyone's. Deleting a whole
//!   record is not judged: a namespace being deleted must not hang on baton's webhook.
//!
//! The objects are decoded by the webhook (with serde, into the types here); which ones are
//! judged, and how, is decided here.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::annotations::{ROLLOUT_GROUP_LABEL, STATE_ANNOTATIONS};
use crate::ledger::MANAGED_BY_LABEL;

use super::verdict::{Reason, Verdict};

/// An object's metadata as the guard reads it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Metadata {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
    /// A finalizer keeps a record from going; an owner reference makes the garbage collector
    /// delete it with its owner (a pod of the attacker's, say).
    #[serde(default)]
    pub finalizers: Option<Vec<String>>,
    #[serde(default, rename = "ownerReferences")]
    pub owner_references: Option<Vec<serde_json::Value>>,
}

/// A StatefulSet as far as its state annotations go; an absent one (a CREATE's old object)
/// is the default, in no group and with no state.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Annotated {
    #[serde(default)]
    pub metadata: Metadata,
}

/// A ConfigMap's parts a record is made of: every field that changes what it means or whether
/// baton can keep writing it (`immutable: true` would fail every later write, so every downscale
/// and drain).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RecordConfigMap {
    #[serde(default)]
    pub metadata: Metadata,
    #[serde(default)]
    pub data: Option<BTreeMap<String, String>>,
    #[serde(default, rename = "binaryData")]
    pub binary_data: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub immutable: Option<bool>,
}

/// A change to what baton remembers, as the review shows it.
#[derive(Debug, Clone, PartialEq)]
pub enum StateChange {
    /// A StatefulSet, before and after.
    StatefulSet { old: Annotated, new: Annotated },
    /// A ConfigMap, before (`None` on CREATE) and after; `name` is the review's.
    ConfigMap {
        name: String,
        old: Option<RecordConfigMap>,
        new: Option<RecordConfigMap>,
    },
}

/// Who may write what baton remembers, as the API server names users.
#[derive(Debug, Clone, Default)]
pub struct Writers {
    /// baton's state annotations on StatefulSets: the controller.
    pub state: Vec<String>,
    /// baton's records: the controller and the webhook.
    pub records: Vec<String>,
}

/// The review's `which` object is not a ConfigMap: refused (a record cannot be judged safe).
pub fn not_a_record(which: &str, error: impl std::fmt::Display) -> Verdict {
    Verdict::refuse(
        Reason::Unreadable,
        format!("the review's {which} is not a ConfigMap: {error}"),
    )
}

/// The review's `which` object has no readable metadata: refused.
pub fn not_an_object(which: &str, error: impl std::fmt::Display) -> Verdict {
    Verdict::refuse(
        Reason::Unreadable,
        format!("the review's {which} is not an object with metadata: {error}"),
    )
}

/// Judges a change (or why its objects could not be read) by who asks (`requester`, the API
/// server's user name). Which writers may is decided first: theirs are allowed unread.
pub fn judge(
    requester: &str,
    writers: &Writers,
    statefulset: bool,
    change: impl FnOnce() -> Result<StateChange, Verdict>,
) -> Verdict {
    let allowed = if statefulset {
        &writers.state
    } else {
        &writers.records
    };
    if allowed.iter().any(|writer| writer == requester) {
        return Verdict::allow();
    }
    match change() {
        Err(unreadable) => unreadable,
        Ok(StateChange::StatefulSet { old, new }) => state(requester, &old, &new),
        Ok(StateChange::ConfigMap { name, old, new }) => {
            records(requester, &name, old.as_ref(), new.as_ref())
        }
    }
}

fn named(requester: &str) -> &str {
    if requester.is_empty() {
        "an unnamed user"
    } else {
        requester
    }
}

impl RecordConfigMap {
    /// Whether `other` means the same: equal in everything but its annotations.
    fn means_the_same_as(&self, other: &Self) -> bool {
        self.data == other.data
            && self.binary_data == other.binary_data
            && self.immutable.unwrap_or(false) == other.immutable.unwrap_or(false)
            && self.metadata.labels == other.metadata.labels
            && self.metadata.finalizers.as_deref().unwrap_or_default()
                == other.metadata.finalizers.as_deref().unwrap_or_default()
            && self
                .metadata
                .owner_references
                .as_deref()
                .unwrap_or_default()
                == other
                    .metadata
                    .owner_references
                    .as_deref()
                    .unwrap_or_default()
    }

    fn is_batons(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(MANAGED_BY_LABEL))
            .is_some_and(|value| value == "baton")
    }
}

impl Annotated {
    /// The rollout group it is in, by its label (an absent object is in none).
    fn group(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(ROLLOUT_GROUP_LABEL)
            .map(String::as_str)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }
}

/// Refuses creating or changing a record's data or labels.
fn records(
    requester: &str,
    name: &str,
    old: Option<&RecordConfigMap>,
    new: Option<&RecordConfigMap>,
) -> Verdict {
    let batons =
        new.is_some_and(RecordConfigMap::is_batons) || old.is_some_and(RecordConfigMap::is_batons);
    let changed = match (old, new) {
        (Some(old), Some(new)) => !old.means_the_same_as(new),
        _ => true,
    };
    if !batons || !changed {
        return Verdict::allow();
    }
    let name = new
        .and_then(|record| record.metadata.name.as_deref())
        .unwrap_or(name);
    Verdict::refuse(
        Reason::RecordChanged,
        format!(
            "ConfigMap {name} is one of baton's records ({MANAGED_BY_LABEL}=baton), which only baton \
             writes, all but its annotations (data, labels, immutable, finalizers, owners; {} may \
             not); its annotations are yours",
            named(requester)
        ),
    )
}

/// Refuses setting or changing one of baton's state annotations.
fn state(requester: &str, old: &Annotated, new: &Annotated) -> Verdict {
    // State carried into a group is set as it joins: written while the StatefulSet was
    // outside every group (where nothing guards it), or kept from another group, then labelled
    // in unchanged, it would otherwise pass as "left as it was".
    let joining = new.group().is_some() && new.group() != old.group();
    let changed: Vec<&str> = STATE_ANNOTATIONS
        .into_iter()
        .filter(|key| {
            let value = new.annotation(key);
            value.is_some() && (joining || value != old.annotation(key))
        })
        .collect();
    if changed.is_empty() {
        return Verdict::allow();
    }
    Verdict::refuse(
        Reason::StateSet,
        format!(
            "{} {} baton's memory of the rollout, which only baton's controller sets ({} may not); \
             remove the annotation to make baton start afresh, or leave it as it is",
            changed.join(" and "),
            if changed.len() == 1 { "is" } else { "are" },
            named(requester)
        ),
    )
}

#[cfg(test)]
mod tests;
