//! Which namespaces one baton serves: one (the Go operator's way, and the default), a list, or
//! every namespace, each narrowed by a label selector over namespaces.
//!
//! One answer for both binaries, so that admission and the controller never disagree on what is
//! served: the controller keeps the namespaces that [`Scope::serves`] (watching Namespaces, so a
//! label added or removed takes a namespace up or lets it go while running), and the webhook
//! configurations select the same ones with [`Scope::webhook_selector`].

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube_core::{Selector, SelectorExt};

/// The label Kubernetes sets on every namespace, its own name: what a list of namespaces
/// becomes in a webhook's namespaceSelector.
pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The namespaces named, before the selector narrows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Names {
    /// Every namespace of the cluster.
    All,
    /// These namespaces (at least one).
    Listed(BTreeSet<String>),
}

/// The namespaces one baton serves.
#[derive(Debug, Clone, PartialEq)]
pub struct Scope {
    names: Names,
    /// Narrows `names`; `None` narrows nothing.
    selector: Option<Selector>,
    /// The selector as written, for the webhook configurations and messages.
    written: Option<LabelSelector>,
}

/// Why a selector cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("namespace_selector: {0}")]
pub struct SelectorError(pub String);

impl Scope {
    /// One namespace, as the Go operator serves.
    pub fn single(namespace: &str) -> Self {
        Self {
            names: Names::Listed(BTreeSet::from([namespace.to_owned()])),
            selector: None,
            written: None,
        }
    }

    /// `names` narrowed by `selector` (an empty selector narrows nothing).
    pub fn new(names: Names, selector: LabelSelector) -> Result<Self, SelectorError> {
        let empty = crate::pods::selector_is_empty(&selector);
        if empty {
            return Ok(Self {
                names,
                selector: None,
                written: None,
            });
        }
        let parsed =
            Selector::try_from(selector.clone()).map_err(|error| SelectorError(error.0))?;
        Ok(Self {
            names,
            selector: Some(parsed),
            written: Some(selector),
        })
    }

    /// The one namespace served, when it is one namespace named with no selector: served with
    /// namespaced watches and a Role, as today. `None`: served with cluster-wide watches of
    /// objects filtered by [`Scope::serves`], which needs a ClusterRole.
    pub fn only(&self) -> Option<&str> {
        match (&self.names, &self.selector) {
            (Names::Listed(names), None) if names.len() == 1 => names.first().map(String::as_str),
            _ => None,
        }
    }

    /// Whether the namespace named `name`, carrying `labels`, is served.
    pub fn serves(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        let named = match &self.names {
            Names::All => true,
            Names::Listed(names) => names.contains(name),
        };
        named
            && self
                .selector
                .as_ref()
                .is_none_or(|selector| selector.matches(labels))
    }

    /// Whether a namespace could be served whatever its labels: named, or every namespace.
    pub fn names(&self, name: &str) -> bool {
        match &self.names {
            Names::All => true,
            Names::Listed(names) => names.contains(name),
        }
    }

    /// The namespaceSelector of baton's webhook configurations: the listed names (by the label
    /// Kubernetes sets, [`NAME_LABEL`]) and the selector's requirements. `None`: every
    /// namespace.
    pub fn webhook_selector(&self) -> Option<LabelSelector> {
        let mut selector = self.written.clone().unwrap_or_default();
        if let Names::Listed(names) = &self.names {
            selector
                .match_expressions
                .get_or_insert_with(Vec::new)
                .push(LabelSelectorRequirement {
                    key: NAME_LABEL.to_owned(),
                    operator: "In".to_owned(),
                    values: Some(names.iter().cloned().collect()),
                });
        }
        let empty = crate::pods::selector_is_empty(&selector);
        (!empty).then_some(selector)
    }

    /// How the scope reads in a log line or a message: `namespace default`, `namespaces a, b`,
    /// `every namespace`, each followed by the selector when there is one.
    pub fn describe(&self) -> String {
        let names = match &self.names {
            Names::All => "every namespace".to_owned(),
            Names::Listed(names) if names.len() == 1 => {
                format!(
                    "namespace {}",
                    names.iter().next().map_or("", String::as_str)
                )
            }
            Names::Listed(names) => format!(
                "namespaces {}",
                names.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        };
        match &self.selector {
            Some(selector) => format!("{names} labelled {selector}"),
            None => names,
        }
    }
}

/// A group's key where one baton serves several namespaces: `namespace/group`, so that two
/// namespaces' groups of one name (an `ingester` in each tenant's namespace) are never one.
/// Neither part can hold a `/` (a namespace name, a label value), so the key splits back.
pub fn qualify(namespace: &str, group: &str) -> String {
    format!("{namespace}/{group}")
}

/// A group key's namespace (`None` for a bare group name, one namespace served) and group name.
pub fn split(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((namespace, group)) => (Some(namespace), group),
        None => (None, key),
    }
}

/// What a watch of Namespaces found served, and what that says to a person: a selector that
/// matches nothing is worth a warning (baton runs and does nothing), as is a listed namespace
/// that does not exist (yet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served {
    pub namespaces: BTreeSet<String>,
    pub warnings: Vec<String>,
}

/// The served namespaces among `namespaces` (name and labels, as listed), and the warnings.
pub fn served<'a>(
    scope: &Scope,
    namespaces: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
) -> Served {
    let mut existing = BTreeSet::new();
    let mut served = BTreeSet::new();
    for (name, labels) in namespaces {
        existing.insert(name.to_owned());
        if scope.serves(name, labels) {
            served.insert(name.to_owned());
        }
    }
    let mut warnings = Vec::new();
    if let Names::Listed(names) = &scope.names {
        for missing in names.difference(&existing) {
            warnings.push(format!(
                "namespace {missing} is listed in namespaces but does not exist; it is served once created"
            ));
        }
    }
    if served.is_empty() {
        warnings.push(format!(
            "no namespace matches {}: nothing is served until one does",
            scope.describe()
        ));
    }
    Served {
        namespaces: served,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn team(value: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(&[("team", value)])),
            ..LabelSelector::default()
        }
    }

    #[test]
    fn one_namespace_is_served_with_namespaced_watches_and_nothing_else_is_served() {
        let scope = Scope::single("mimir");
        assert_eq!(scope.only(), Some("mimir"));
        assert!(scope.serves("mimir", &BTreeMap::new()));
        assert!(!scope.serves("loki", &BTreeMap::new()));
        assert_eq!(scope.describe(), "namespace mimir");
    }

    #[test]
    fn a_list_serves_its_names_alone_and_needs_cluster_wide_watches() {
        let names = Names::Listed(BTreeSet::from(["a".to_owned(), "b".to_owned()]));
        let scope = Scope::new(names, LabelSelector::default()).unwrap();
        assert_eq!(scope.only(), None);
        assert!(scope.serves("a", &BTreeMap::new()) && scope.serves("b", &BTreeMap::new()));
        assert!(!scope.serves("c", &BTreeMap::new()));
        assert_eq!(scope.describe(), "namespaces a, b");
    }

    #[test]
    fn a_selector_narrows_every_namespace_to_those_labelled() {
        let scope = Scope::new(Names::All, team("storage")).unwrap();
        assert_eq!(scope.only(), None);
        assert!(scope.serves("x", &labels(&[("team", "storage")])));
        assert!(!scope.serves("x", &labels(&[("team", "web")])));
        assert!(!scope.serves("x", &BTreeMap::new()));
        assert_eq!(scope.describe(), "every namespace labelled team=storage");
    }

    #[test]
    fn a_selector_narrows_even_a_single_name_which_then_is_watched_cluster_wide() {
        let names = Names::Listed(BTreeSet::from(["a".to_owned()]));
        let scope = Scope::new(names, team("storage")).unwrap();
        assert_eq!(
            scope.only(),
            None,
            "a label can come and go: Namespaces are watched"
        );
        assert!(!scope.serves("a", &BTreeMap::new()));
        assert!(scope.serves("a", &labels(&[("team", "storage")])));
        assert!(!scope.serves("b", &labels(&[("team", "storage")])));
    }

    #[test]
    fn the_webhooks_select_the_same_namespaces_as_the_controller_serves() {
        let listed = Names::Listed(BTreeSet::from(["a".to_owned(), "b".to_owned()]));
        let scope = Scope::new(listed, team("storage")).unwrap();
        let selector = scope.webhook_selector().unwrap();
        assert_eq!(selector.match_labels, Some(labels(&[("team", "storage")])));
        let requirement = &selector.match_expressions.as_ref().unwrap()[0];
        assert_eq!(requirement.key, NAME_LABEL);
        assert_eq!(requirement.operator, "In");
        assert_eq!(
            requirement.values,
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        // The webhook selector, matched as Kubernetes matches it, agrees with `serves` on each
        // namespace (with the name label Kubernetes sets).
        let matcher = Selector::try_from(selector).unwrap();
        for (name, team_label) in [("a", "storage"), ("b", "web"), ("c", "storage")] {
            let mut with_name = labels(&[("team", team_label)]);
            with_name.insert(NAME_LABEL.to_owned(), name.to_owned());
            assert_eq!(
                matcher.matches(&with_name),
                scope.serves(name, &with_name),
                "{name}"
            );
        }
        assert_eq!(
            Scope::new(Names::All, LabelSelector::default())
                .unwrap()
                .webhook_selector(),
            None
        );
    }

    #[test]
    fn a_selector_with_an_unknown_operator_is_refused_naming_it() {
        let selector = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "team".to_owned(),
                operator: "Like".to_owned(),
                values: Some(vec!["x".to_owned()]),
            }]),
            ..LabelSelector::default()
        };
        let error = Scope::new(Names::All, selector).unwrap_err();
        assert!(
            error.to_string().starts_with("namespace_selector: "),
            "{error}"
        );
    }

    #[test]
    fn a_qualified_group_key_splits_back_and_a_bare_one_names_no_namespace() {
        assert_eq!(qualify("tenant-a", "ingester"), "tenant-a/ingester");
        assert_eq!(split("tenant-a/ingester"), (Some("tenant-a"), "ingester"));
        assert_eq!(split("ingester"), (None, "ingester"));
    }

    #[test]
    fn served_warns_of_a_selector_matching_nothing_and_of_listed_namespaces_missing() {
        let scope = Scope::new(
            Names::Listed(BTreeSet::from(["a".to_owned(), "gone".to_owned()])),
            team("storage"),
        )
        .unwrap();
        let web = labels(&[("team", "web")]);
        let found = served(&scope, [("a", &web)]);
        assert!(found.namespaces.is_empty());
        assert_eq!(found.warnings.len(), 2, "{:?}", found.warnings);
        assert!(found.warnings[0].contains("namespace gone is listed"));
        assert!(
            found.warnings[1]
                .contains("no namespace matches namespaces a, gone labelled team=storage")
        );
        let storage = labels(&[("team", "storage")]);
        let found = served(&scope, [("a", &storage), ("gone", &storage)]);
        assert_eq!(
            found.namespaces,
            BTreeSet::from(["a".to_owned(), "gone".to_owned()])
        );
        assert!(found.warnings.is_empty());
    }
}
