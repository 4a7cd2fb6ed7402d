//! A pod's labels as the caches keep them, and the strings pods share.
//!
//! Why not the `BTreeMap<String, String>` of the API types: a cache holds every StatefulSet pod
//! of the namespaces served (150,000 in a large cluster), and such a map costs a 544-byte node
//! and two allocations per label, ~1 KB a pod. Most of those strings are the same in every pod
//! of a StatefulSet (the label keys, the group, the zone, the revision hash, the namespace, the
//! owner), so they are interned ([`Interned`]: one copy each, freed with its last user), and the
//! labels are one sorted slice of interned pairs, 16 bytes a label.
//!
//! Selectors are Kubernetes' (parsed by kube-core); [`Requirements::matches`] reads their
//! expressions as kube-core's own matching does on a map, on a pod's [`Labels`] as on a map, which
//! a test checks over every operator.

use std::collections::BTreeMap;
use std::fmt;

use kube_core::{Expression, Selector};

/// A string stored once however many pods carry it (atomically counted, freed with its last
/// holder). Compares by address, as equal strings are one. A thin pointer (to a counted
/// `String`): 8 bytes a use, where a shared `str` would take 16, for a one-off string's one
/// more allocation.
pub type Interned = internment::ArcIntern<String>;

/// `value`, interned.
pub fn intern(value: &str) -> Interned {
    Interned::from_ref(value)
}

/// Labels, sorted by key, each key once.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels(Box<[(Interned, Interned)]>);

impl Labels {
    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(label, _)| label.as_str().cmp(key))
            .ok()
            .map(|index| self.0[index].1.as_str())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Each label as (key, value), by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The labels as the API types hold them.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect()
    }
}

/// Labels a selector reads: a pod's [`Labels`], an object's map, or none.
pub trait LabelSet {
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSet for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl LabelSet for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// Absent labels: none at all.
impl<T: LabelSet> LabelSet for Option<T> {
    fn label(&self, key: &str) -> Option<&str> {
        self.as_ref().and_then(|labels| labels.label(key))
    }
}

impl<T: LabelSet + ?Sized> LabelSet for &T {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
}

/// A label selector, parsed (by kube-core) once and matched against many label sets: its
/// requirements all hold (none: every label set matches, as with kube-core's [`Selector`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements(Vec<Expression>);

impl Requirements {
    pub fn matches(&self, labels: &impl LabelSet) -> bool {
        self.0.iter().all(|expression| holds(expression, labels))
    }
}

impl From<Selector> for Requirements {
    fn from(selector: Selector) -> Self {
        Self(selector.into_iter().collect())
    }
}

impl FromIterator<Expression> for Requirements {
    fn from_iter<I: IntoIterator<Item = Expression>>(expressions: I) -> Self {
        Self(expressions.into_iter().collect())
    }
}

/// kube-core's reading of one expression (`SelectorExt::matches` on a map), on any label set.
fn holds(expression: &Expression, labels: &impl LabelSet) -> bool {
    match expression {
        Expression::In(key, values) => labels.label(key).is_some_and(|v| values.contains(v)),
        Expression::NotIn(key, values) => labels.label(key).is_none_or(|v| !values.contains(v)),
        Expression::Equal(key, value) => labels.label(key) == Some(value.as_str()),
        Expression::NotEqual(key, value) => labels.label(key) != Some(value.as_str()),
        Expression::Exists(key) => labels.label(key).is_some(),
        Expression::DoesNotExist(key) => labels.label(key).is_none(),
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Labels {
    /// The last value given for a key wins, as in a map built the same way.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut labels: Vec<(Interned, Interned)> = pairs
            .into_iter()
            .map(|(key, value)| (intern(key.as_ref()), intern(value.as_ref())))
            .collect();
        // By value (interned strings order as their text). Stable: equal keys keep their order,
        // and each run of a key keeps its last value in its first slot.
        labels.sort_by(|(a, _), (b, _)| a.cmp(b));
        labels.dedup_by(|(key, value), (kept, kept_value)| {
            let same = key == kept;
            if same {
                std::mem::swap(value, kept_value);
            }
            same
        });
        Self(labels.into_boxed_slice())
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(map: &BTreeMap<String, String>) -> Self {
        map.iter().collect()
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use kube_core::SelectorExt;
    use proptest::prelude::*;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().copied().collect()
    }

    #[test]
    fn a_label_is_read_by_its_key_and_the_last_value_given_for_a_key_is_kept() {
        let labels = labels(&[("zone", "b"), ("app", "ingester"), ("zone", "c")]);
        assert_eq!(labels.get("zone"), Some("c"));
        assert_eq!(labels.get("app"), Some("ingester"));
        assert_eq!(labels.get("name"), None);
        assert_eq!(labels.len(), 2);
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            [("app", "ingester"), ("zone", "c")]
        );
        assert_eq!(
            labels.to_map(),
            BTreeMap::from([
                ("app".to_owned(), "ingester".to_owned()),
                ("zone".to_owned(), "c".to_owned())
            ])
        );
    }

    #[test]
    fn equal_strings_are_stored_once() {
        let a = labels(&[("rollout-group", "ingester")]);
        let b = labels(&[("rollout-group", "ingester")]);
        let (key_a, value_a) = &a.0[0];
        let (key_b, value_b) = &b.0[0];
        assert!(std::ptr::eq(key_a.as_str(), key_b.as_str()));
        assert!(std::ptr::eq(value_a.as_str(), value_b.as_str()));
        assert_eq!(a, b);
    }

    fn key() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["app", "zone", "name", "tier"]).prop_map(str::to_owned)
    }

    fn value() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["", "a", "b", "c"]).prop_map(str::to_owned)
    }

    fn expression() -> impl Strategy<Value = Expression> {
        let values = || prop::collection::btree_set(value(), 0..3);
        prop_oneof![
            (key(), values()).prop_map(|(k, v)| Expression::In(k, v)),
            (key(), values()).prop_map(|(k, v)| Expression::NotIn(k, v)),
            (key(), value()).prop_map(|(k, v)| Expression::Equal(k, v)),
            (key(), value()).prop_map(|(k, v)| Expression::NotEqual(k, v)),
            key().prop_map(Expression::Exists),
            key().prop_map(Expression::DoesNotExist),
        ]
    }

    proptest! {
        /// A selector matches a pod's labels, and the same labels as a map, exactly when
        /// kube-core's matching of the map does, for every operator.
        #[test]
        fn a_selector_matches_labels_as_kube_core_matches_them_as_a_map(
            map in prop::collection::btree_map(key(), value(), 0..4),
            selector in prop::collection::vec(expression(), 0..4),
        ) {
            let kube: Selector = selector.iter().cloned().collect();
            let expected = kube.matches(&map);
            let requirements: Requirements = selector.into_iter().collect();
            prop_assert_eq!(requirements.matches(&Labels::from(&map)), expected);
            prop_assert_eq!(requirements.matches(&map), expected);
            prop_assert_eq!(requirements.matches(&Some(&map)), expected);
        }
    }
}
