//! The zone-aware disruption budgets of one namespace as both binaries judge with them: watched,
//! and parsed once per version (`baton_core::zpdb::Budget::parse`), so the webhook answering
//! a drain and the controller deleting for a rollout read the same budgets the same way.
//!
//! Serving many namespaces, one watch of every namespace's budgets ([`Budgets::watch_all`])
//! keeps them under `namespace/name` ([`key`]), read a namespace at a time
//! ([`Budgets::listed_in`]): budgets are few, so one cluster-wide watch of them is cheap.
//!
//! A missing CRD is a state, not an error: then there are no budgets ([`Known::NotInstalled`],
//! logged once) and the watch is retried with [`crate::kube_client::watch_backoff`], so
//! installing the CRD later is picked up. Until the first listing nothing is known
//! ([`Known::NotListed`]): what a budget would guard must wait, not go.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, RwLock};

use baton_core::zpdb::{Budget, Observed, ZoneAwarePodDisruptionBudget};
use futures::Stream;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::index::{self, Index, crd_missing};

pub use baton_core::zpdb::Known;

/// What a reader does when budgets change; called on the watch's task.
pub trait BudgetEvents: Send + 'static {
    /// `budget` was parsed: a new one, or a new version of one.
    fn parsed(&mut self, budget: &Observed);
    /// These budgets changed, as they were before and are now (a relist gives all of both).
    fn changed(&mut self, budgets: &[Arc<Observed>]);
}

/// The namespace's budgets as last watched. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Budgets {
    known: Arc<RwLock<Known>>,
}

impl Budgets {
    /// The budgets of `namespace` and the future that watches them (run it as a critical
    /// task), telling `events` of each change.
    pub fn watch(
        client: Client,
        namespace: &str,
        events: impl BudgetEvents,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let api: Api<ZoneAwarePodDisruptionBudget> = Api::namespaced(client, namespace);
        Self::watch_api(api, ResourceExt::name_any, events)
    }

    /// The budgets of every namespace, each kept under [`key`] (`namespace/name`), and the
    /// future that watches them (run it as a critical task), telling `events` of each change.
    /// Read them with [`Budgets::listed_in`].
    pub fn watch_all(
        client: Client,
        events: impl BudgetEvents,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let api: Api<ZoneAwarePodDisruptionBudget> = Api::all(client);
        let key_of = |zpdb: &ZoneAwarePodDisruptionBudget| {
            key(
                zpdb.metadata.namespace.as_deref().unwrap_or_default(),
                &zpdb.name_any(),
            )
        };
        Self::watch_api(api, key_of, events)
    }

    fn watch_api(
        api: Api<ZoneAwarePodDisruptionBudget>,
        key_of: fn(&ZoneAwarePodDisruptionBudget) -> String,
        events: impl BudgetEvents,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let changes = crate::initial_list::watcher(api, watcher::Config::default())
            .backoff(crate::kube_client::watch_backoff());
        Self::watch_changes(changes, key_of, events)
    }

    /// The budgets of one namespace from watch events of one's own (one cluster-wide watch
    /// routed by namespace), and the future that reads them (run it as a critical task).
    pub fn watch_events(
        changes: impl Stream<
            Item = Result<watcher::Event<ZoneAwarePodDisruptionBudget>, watcher::Error>,
        > + Send
        + 'static,
        events: impl BudgetEvents,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        Self::watch_changes(changes, ResourceExt::name_any, events)
    }

    fn watch_changes(
        changes: impl Stream<
            Item = Result<watcher::Event<ZoneAwarePodDisruptionBudget>, watcher::Error>,
        > + Send
        + 'static,
        key_of: fn(&ZoneAwarePodDisruptionBudget) -> String,
        events: impl BudgetEvents,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let budgets = Self::fixed(Known::NotListed { error: None });
        let mut index = BudgetIndex {
            known: budgets.known.clone(),
            versions: BTreeMap::new(),
            events,
            said_not_installed: false,
            key_of,
        };
        let watch = async move {
            let slim = |zpdb: &mut ZoneAwarePodDisruptionBudget| {
                zpdb.metadata.managed_fields = None;
                zpdb.metadata.annotations = None;
            };
            index::drive(changes.modify(slim), &mut index).await;
        };
        (budgets, watch)
    }

    /// Budgets that stay as `known`, with no watch (for tests).
    pub fn fixed(known: Known) -> Self {
        Self {
            known: Arc::new(RwLock::new(known)),
        }
    }

    /// What is known now.
    pub fn known(&self) -> Known {
        self.read().clone()
    }

    /// The listed budgets, or `None` before the first listing (and while the CRD is missing).
    pub fn listed(&self) -> Option<Vec<Arc<Observed>>> {
        match &*self.read() {
            Known::Listed(budgets) => Some(budgets.values().cloned().collect()),
            _ => None,
        }
    }

    /// The listed budgets of `namespace` when every namespace's are watched
    /// ([`Budgets::watch_all`]), or `None` before the first listing (and while the CRD is
    /// missing).
    pub fn listed_in(&self, namespace: &str) -> Option<Vec<Arc<Observed>>> {
        match &*self.read() {
            Known::Listed(budgets) => {
                let from = key(namespace, "");
                Some(
                    budgets
                        .range(from.clone()..)
                        .take_while(|(name, _)| name.starts_with(&from))
                        .map(|(_, budget)| budget.clone())
                        .collect(),
                )
            }
            _ => None,
        }
    }

    /// How many budgets are listed (none before the first listing).
    pub fn count(&self) -> usize {
        match &*self.read() {
            Known::Listed(budgets) => budgets.len(),
            _ => 0,
        }
    }

    /// Whether `name` is a listed budget (with [`Budgets::watch_all`], its [`key`]).
    pub fn contains(&self, name: &str) -> bool {
        matches!(&*self.read(), Known::Listed(budgets) if budgets.contains_key(name))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known.read().expect("budgets lock")
    }
}

/// Where [`Budgets::watch_all`] keeps budget `name` of `namespace`: `namespace/name` (a
/// namespace's name has no `/`, so each namespace's budgets are a range of their own).
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The watch's side: parses each new version once and tells the reader what changed.
struct BudgetIndex<E> {
    known: Arc<RwLock<Known>>,
    /// Budget key → the resourceVersion parsed, so a relist does not parse again.
    versions: BTreeMap<String, String>,
    events: E,
    said_not_installed: bool,
    /// A budget's key: its name (one namespace) or [`key`] (every namespace).
    key_of: fn(&ZoneAwarePodDisruptionBudget) -> String,
}

impl<E: BudgetEvents> BudgetIndex<E> {
    fn parse(
        &mut self,
        zpdb: &ZoneAwarePodDisruptionBudget,
        kept: Option<&Arc<Observed>>,
    ) -> Arc<Observed> {
        let version = zpdb.resource_version().unwrap_or_default();
        if let Some(kept) = kept
            && self.versions.get(&(self.key_of)(zpdb)) == Some(&version)
        {
            return kept.clone();
        }
        let parsed = Arc::new(Budget::parse(zpdb));
        self.versions.insert((self.key_of)(zpdb), version);
        self.events.parsed(&parsed);
        parsed
    }

    fn replace(&mut self, known: Known) -> Known {
        std::mem::replace(&mut *self.known.write().expect("budgets lock"), known)
    }
}

impl<E: BudgetEvents> Index<ZoneAwarePodDisruptionBudget> for BudgetIndex<E> {
    type Kept = ZoneAwarePodDisruptionBudget;
    fn keep(&self, zpdb: ZoneAwarePodDisruptionBudget) -> ZoneAwarePodDisruptionBudget {
        zpdb
    }

    fn reset(&mut self, budgets: Vec<ZoneAwarePodDisruptionBudget>) {
        self.said_not_installed = false;
        tracing::info!(
            budgets = budgets.len(),
            "ZoneAwarePodDisruptionBudgets listed"
        );
        let previous = match &*self.known.read().expect("budgets lock") {
            Known::Listed(listed) => listed.clone(),
            _ => BTreeMap::new(),
        };
        let listing: BTreeMap<String, Arc<Observed>> = budgets
            .iter()
            .map(|zpdb| {
                let name = (self.key_of)(zpdb);
                let parsed = self.parse(zpdb, previous.get(&name));
                (name, parsed)
            })
            .collect();
        self.versions.retain(|name, _| listing.contains_key(name));
        let mut changed: Vec<Arc<Observed>> = listing.values().cloned().collect();
        changed.extend(self.replace(Known::Listed(listing)).listed());
        self.events.changed(&changed);
    }

    fn apply(&mut self, zpdb: ZoneAwarePodDisruptionBudget) {
        let name = (self.key_of)(&zpdb);
        let kept = match &*self.known.read().expect("budgets lock") {
            Known::Listed(listed) => listed.get(&name).cloned(),
            _ => return,
        };
        let parsed = self.parse(&zpdb, kept.as_ref());
        let previous = match &mut *self.known.write().expect("budgets lock") {
            Known::Listed(listed) => listed.insert(name, parsed.clone()),
            _ => return,
        };
        let changed: Vec<Arc<Observed>> = previous.into_iter().chain([parsed]).collect();
        self.events.changed(&changed);
    }

    fn delete(&mut self, zpdb: ZoneAwarePodDisruptionBudget) {
        let name = (self.key_of)(&zpdb);
        self.versions.remove(&name);
        let removed = match &mut *self.known.write().expect("budgets lock") {
            Known::Listed(listed) => listed.remove(&name),
            _ => None,
        };
        let changed: Vec<Arc<Observed>> = removed.into_iter().collect();
        self.events.changed(&changed);
    }

    fn failed(&mut self, error: &watcher::Error) {
        if crd_missing(error) {
            if !self.said_not_installed {
                tracing::info!(
                    "the ZoneAwarePodDisruptionBudget CRD is not installed: there are no budgets (watching for it)"
                );
                self.said_not_installed = true;
            }
            self.versions.clear();
            let previous = self.replace(Known::NotInstalled);
            self.events.changed(&previous.listed());
            return;
        }
        tracing::warn!(%error, "ZoneAwarePodDisruptionBudget watch error; retrying");
        if let Known::NotListed { error: last } = &mut *self.known.write().expect("budgets lock") {
            *last = Some(error.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[derive(Default)]
    struct Seen {
        parsed: Vec<String>,
        changed: Vec<Vec<String>>,
    }

    #[derive(Clone, Default)]
    struct Recorder(Arc<std::sync::Mutex<Seen>>);

    fn name(observed: &Observed) -> String {
        match observed {
            Ok(budget) => budget.name.clone(),
            Err(invalid) => invalid.name.clone(),
        }
    }

    impl BudgetEvents for Recorder {
        fn parsed(&mut self, budget: &Observed) {
            self.0.lock().unwrap().parsed.push(name(budget));
        }
        fn changed(&mut self, budgets: &[Arc<Observed>]) {
            let names = budgets.iter().map(|budget| name(budget)).collect();
            self.0.lock().unwrap().changed.push(names);
        }
    }

    fn budget(name: &str, version: &str) -> ZoneAwarePodDisruptionBudget {
        let mut zpdb: ZoneAwarePodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "apiVersion": "rollout-operator.grafana.com/v1",
            "kind": "ZoneAwarePodDisruptionBudget",
            "metadata": {},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"name": name}}},
        }))
        .expect("a budget");
        zpdb.metadata = ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("ns".to_owned()),
            resource_version: Some(version.to_owned()),
            ..ObjectMeta::default()
        };
        zpdb
    }

    fn index(recorder: &Recorder) -> (Budgets, BudgetIndex<Recorder>) {
        let budgets = Budgets::fixed(Known::NotListed { error: None });
        let index = BudgetIndex {
            known: budgets.known.clone(),
            versions: BTreeMap::new(),
            events: recorder.clone(),
            said_not_installed: false,
            key_of: ResourceExt::name_any,
        };
        (budgets, index)
    }

    #[test]
    fn each_version_is_parsed_once_and_every_change_names_the_budgets_before_and_after() {
        let recorder = Recorder::default();
        let (budgets, mut index) = index(&recorder);
        assert!(
            budgets.listed().is_none(),
            "nothing is known before the listing"
        );
        index.reset(vec![budget("a", "1"), budget("b", "1")]);
        // A relist of the same versions parses nothing again; a new version is parsed.
        index.reset(vec![budget("a", "1"), budget("b", "2")]);
        index.apply(budget("c", "1"));
        index.delete(budget("a", "1"));
        let seen = recorder.0.lock().unwrap();
        assert_eq!(seen.parsed, ["a", "b", "b", "c"]);
        assert_eq!(
            seen.changed,
            [
                vec!["a", "b"],
                vec!["a", "b", "a", "b"],
                vec!["c"],
                vec!["a"],
            ]
        );
        assert!(budgets.contains("b") && budgets.contains("c") && !budgets.contains("a"));
        assert_eq!(budgets.listed().map(|listed| listed.len()), Some(2));
    }

    #[test]
    fn a_missing_crd_means_no_budgets_and_other_errors_keep_what_is_known() {
        let recorder = Recorder::default();
        let (budgets, mut index) = index(&recorder);
        index.failed(&watcher::Error::NoResourceVersion);
        assert!(matches!(
            budgets.known(),
            Known::NotListed { error: Some(_) }
        ));
        index.reset(vec![budget("a", "1")]);
        let missing = kube::core::Status::failure("not found", "NotFound").with_code(404);
        index.failed(&watcher::Error::WatchError(Box::new(missing)));
        assert!(matches!(budgets.known(), Known::NotInstalled));
        assert!(budgets.listed().is_none());
        // The budget that went with the CRD is named as changed.
        assert_eq!(recorder.0.lock().unwrap().changed.last().unwrap(), &["a"]);
        // Changes before the next listing are not applied to a state that is not a listing.
        index.apply(budget("b", "1"));
        assert!(matches!(budgets.known(), Known::NotInstalled));
    }

    #[test]
    fn budgets_of_every_namespace_are_read_a_namespace_at_a_time() {
        let recorder = Recorder::default();
        let (budgets, mut index) = index(&recorder);
        index.key_of = |zpdb| {
            key(
                zpdb.metadata.namespace.as_deref().unwrap_or_default(),
                &zpdb.name_any(),
            )
        };
        let in_namespace = |namespace: &str, name: &str| {
            let mut zpdb = budget(name, "1");
            zpdb.metadata.namespace = Some(namespace.to_owned());
            zpdb
        };
        assert!(
            budgets.listed_in("a").is_none(),
            "nothing before the listing"
        );
        // Two namespaces with a budget of the same name, and one whose name prefixes another's.
        index.reset(vec![
            in_namespace("a", "ingester"),
            in_namespace("ab", "ingester"),
            in_namespace("ab", "store"),
        ]);
        let names = |namespace: &str| -> Vec<String> {
            budgets
                .listed_in(namespace)
                .unwrap()
                .iter()
                .map(|b| name(b))
                .collect()
        };
        assert_eq!(names("a"), ["ingester"]);
        assert_eq!(names("ab"), ["ingester", "store"]);
        assert!(names("b").is_empty());
        index.delete(in_namespace("ab", "ingester"));
        assert_eq!(names("ab"), ["store"]);
        assert_eq!(names("a"), ["ingester"], "the same name elsewhere stays");
        assert!(budgets.contains(&key("a", "ingester")) && !budgets.contains("ingester"));
    }
}
