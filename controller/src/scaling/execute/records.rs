//! The downscale records a pass reads and writes: in one cluster, the group's ledger and the
//! zone tracker as the hub's watches cache them; across member clusters, each member's in its
//! own cluster (the webhook there claims its downscales in that cluster's ledger, and the Go
//! operator's tracker there is that cluster's), read just before the pass.
//!
//! Across clusters the pass decides on one view, keyed as members are named (`cluster/name`):
//! each cluster's entries of its own members, qualified. A write goes back to the cluster the
//! entry came from, under the key it has there, conditioned on that cluster's version.
//!
//! A cluster whose records cannot be read (not connected, a read that fails or times out, a
//! ConfigMap of the record's name that is not baton's) is *unread*: the pass decides nothing
//! on a partial view ([`baton_core::scaling::plan::plan`]).

use std::collections::BTreeMap;

use baton_core::clusters::{Outage, qualified, split};
use baton_core::downscale_history::ZoneTracker;
use baton_core::ledger::{Ledger, ledger_name};
use baton_core::scaling::plan::Unread;
use baton_shared::downscale_history::read_tracker;
use baton_shared::kube_client::bounded;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use std::sync::Arc;

use super::Scaler;

/// One cluster's records as read, and the version each write is conditioned on.
#[derive(Debug, Clone, Default)]
pub(super) struct ClusterRecords {
    pub ledger: Ledger,
    pub tracker: ZoneTracker,
}

/// The records of one pass.
#[derive(Debug, Clone)]
pub(super) enum GroupRecords {
    /// The controller's own cluster: the ledger and the tracker as cached.
    Local {
        ledger: Ledger,
        tracker: ZoneTracker,
    },
    /// Member clusters: each cluster's records, by cluster name, and the merged view.
    Clusters {
        by_cluster: BTreeMap<String, ClusterRecords>,
        ledger: Ledger,
        tracker: ZoneTracker,
    },
}

impl GroupRecords {
    /// The view the pass decides on.
    pub fn view(&self) -> (&Ledger, &ZoneTracker) {
        match self {
            Self::Local { ledger, tracker }
            | Self::Clusters {
                ledger, tracker, ..
            } => (ledger, tracker),
        }
    }

    /// The ledger `member`'s entry is written in, and its key there.
    pub fn ledger_of<'a>(&'a self, member: &str) -> Option<(&'a Ledger, String)> {
        match self {
            Self::Local { ledger, .. } => Some((ledger, member.to_owned())),
            Self::Clusters { by_cluster, .. } => {
                let (records, key) =
                    in_cluster(by_cluster, member, |records| &records.ledger.data)?;
                Some((&records.ledger, key))
            }
        }
    }

    /// The tracker `member`'s entry is written in, and its key there.
    pub fn tracker_of<'a>(&'a self, member: &str) -> Option<(&'a ZoneTracker, String)> {
        match self {
            Self::Local { tracker, .. } => Some((tracker, member.to_owned())),
            Self::Clusters { by_cluster, .. } => {
                let (records, key) =
                    in_cluster(by_cluster, member, |records| &records.tracker.data)?;
                Some((&records.tracker, key))
            }
        }
    }
}

/// The records of `member`'s cluster and its key there: the qualified key if that cluster's
/// record holds one (a webhook may write members so), else its name in its cluster.
fn in_cluster<'a>(
    by_cluster: &'a BTreeMap<String, ClusterRecords>,
    member: &str,
    data: impl Fn(&ClusterRecords) -> &BTreeMap<String, String>,
) -> Option<(&'a ClusterRecords, String)> {
    let (Some(cluster), local) = split(member) else {
        return None;
    };
    let records = by_cluster.get(cluster)?;
    let key = if data(records).contains_key(member) {
        member.to_owned()
    } else {
        local.to_owned()
    };
    Some((records, key))
}

/// The entries of `cluster`'s record that are its own members' (keyed by their name there or
/// qualified), keyed by the qualified name. Entries naming another cluster's member are that
/// cluster's to say.
fn own_entries(cluster: &str, data: &BTreeMap<String, String>) -> Vec<(String, String)> {
    data.iter()
        .filter_map(|(key, value)| match split(key) {
            (None, local) => Some((qualified(cluster, local), value.clone())),
            (Some(of), _) if of == cluster => Some((key.clone(), value.clone())),
            _ => None,
        })
        .collect()
}

/// The one view of every cluster's records: their own members' entries, qualified. The
/// versions are none of them (a write goes to one cluster's record, [`GroupRecords`]).
pub(super) fn merge(by_cluster: &BTreeMap<String, ClusterRecords>) -> (Ledger, ZoneTracker) {
    let mut ledger = Ledger::default();
    let mut tracker = ZoneTracker::default();
    for (cluster, records) in by_cluster {
        ledger
            .data
            .extend(own_entries(cluster, &records.ledger.data));
        tracker
            .data
            .extend(own_entries(cluster, &records.tracker.data));
    }
    (ledger, tracker)
}

/// The member clusters `outages` says cannot be trusted now that concern the group: one with
/// a member of it, or one never listed (it may hold members unseen).
pub(super) fn unread_outages(members: &[Arc<StatefulSet>], outages: &[Outage]) -> Vec<Unread> {
    outages
        .iter()
        .filter(|outage| {
            !outage.listed
                || members.iter().any(|member| {
                    split(member.metadata.name.as_deref().unwrap_or_default()).0
                        == Some(outage.cluster.as_str())
                })
        })
        .map(|outage| Unread {
            cluster: outage.cluster.clone(),
            why: baton_core::explained::quoted(
                &outage.error,
                baton_core::clusters::MOST_OUTAGE_CHARS,
            ),
        })
        .collect()
}

impl Scaler {
    /// Each member cluster's records of `group` but those of the clusters `out`, read now
    /// (bounded), or which clusters could not be read and why.
    pub(super) async fn read_cluster_records(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        out: &[&str],
    ) -> (BTreeMap<String, ClusterRecords>, Vec<Unread>) {
        let mut clusters: Vec<&str> = members
            .iter()
            .filter_map(|member| split(member.metadata.name.as_deref()?).0)
            .filter(|cluster| !out.contains(cluster))
            .collect();
        clusters.sort_unstable();
        clusters.dedup();
        let reads = clusters.into_iter().map(|cluster| async move {
            (cluster.to_owned(), self.read_records(group, cluster).await)
        });
        let mut by_cluster = BTreeMap::new();
        let mut unread = Vec::new();
        for (cluster, read) in futures::future::join_all(reads).await {
            match read {
                Ok(records) => {
                    by_cluster.insert(cluster, records);
                }
                Err(why) => unread.push(Unread { cluster, why }),
            }
        }
        (by_cluster, unread)
    }

    async fn read_records(&self, group: &str, cluster: &str) -> Result<ClusterRecords, String> {
        let name = ledger_name(baton_core::namespaces::split(group).1);
        // Any object of the cluster routes there: the ledger's name, qualified.
        let (config_maps, _): (Api<ConfigMap>, _) = self
            .clusters
            .api(&self.namespace, &qualified(cluster, &name))
            .map_err(|error| error.to_string())?;
        let ledger = bounded(
            self.request_timeout,
            format!("reading the downscale ledger {name}"),
            baton_shared::ledger::read(&config_maps, &name),
        );
        let tracker = bounded(
            self.request_timeout,
            format!("reading the zone tracker {}", self.zone_tracker),
            read_tracker(&config_maps, &self.zone_tracker),
        );
        let (ledger, tracker) = futures::join!(ledger, tracker);
        let ledger = ledger
            .map_err(|error| error.to_string())?
            .map_err(|error| format!("reading the downscale ledger {name}: {error}"))?;
        let tracker = tracker
            .map_err(|error| error.to_string())?
            .map_err(|error| {
                format!(
                    "reading the zone tracker {}: {}",
                    self.zone_tracker,
                    baton_shared::pod_client::error_chain(&error)
                )
            })?;
        Ok(ClusterRecords { ledger, tracker })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(ledger: &[(&str, &str)], tracker: &[(&str, &str)]) -> ClusterRecords {
        let data = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect()
        };
        ClusterRecords {
            ledger: Ledger {
                resource_version: Some("3".into()),
                data: data(ledger),
            },
            tracker: ZoneTracker {
                resource_version: Some("9".into()),
                data: data(tracker),
            },
        }
    }

    #[test]
    fn each_cluster_says_its_own_members_downscales_and_is_written_back_under_its_key() {
        let by_cluster = BTreeMap::from([
            (
                "cluster-a".to_owned(),
                records(
                    // cluster-a's own member, and a claim naming cluster-b's member.
                    &[("ingester", "a"), ("cluster-b/ingester", "forged")],
                    &[("ingester", "ta")],
                ),
            ),
            (
                "cluster-b".to_owned(),
                records(&[("cluster-b/ingester", "b")], &[("ingester", "tb")]),
            ),
        ]);
        let (ledger, tracker) = merge(&by_cluster);
        assert_eq!(
            ledger.data,
            BTreeMap::from([
                ("cluster-a/ingester".to_owned(), "a".to_owned()),
                ("cluster-b/ingester".to_owned(), "b".to_owned()),
            ])
        );
        assert_eq!(tracker.data["cluster-a/ingester"], "ta");
        assert_eq!(tracker.data["cluster-b/ingester"], "tb");
        assert_eq!(
            (ledger.resource_version, tracker.resource_version),
            (None, None)
        );
        let records = GroupRecords::Clusters {
            by_cluster,
            ledger: Ledger::default(),
            tracker: ZoneTracker::default(),
        };
        // Written back where it came from, under the key it has there.
        let (ledger_a, key_a) = records.ledger_of("cluster-a/ingester").expect("cluster-a");
        assert_eq!(
            (ledger_a.data["ingester"].as_str(), key_a.as_str()),
            ("a", "ingester")
        );
        let (ledger_b, key_b) = records.ledger_of("cluster-b/ingester").expect("cluster-b");
        assert_eq!(
            (ledger_b.data["cluster-b/ingester"].as_str(), key_b.as_str()),
            ("b", "cluster-b/ingester")
        );
        let (tracker_b, key) = records.tracker_of("cluster-b/ingester").expect("cluster-b");
        assert_eq!(
            (tracker_b.resource_version.as_deref(), key.as_str()),
            (Some("9"), "ingester")
        );
        // A cluster not read has no record to write.
        assert!(records.ledger_of("cluster-c/ingester").is_none());
    }

    #[test]
    fn an_outage_concerns_the_groups_with_a_member_there_and_every_group_before_its_first_list() {
        let member = |name: &str| {
            let mut statefulset = StatefulSet::default();
            statefulset.metadata.name = Some(name.to_owned());
            Arc::new(statefulset)
        };
        let members = [member("cluster-a/ingester"), member("cluster-b/ingester")];
        let outage = |cluster: &str, listed: bool| Outage {
            cluster: cluster.to_owned(),
            error: "watching its pods failed: \u{1b}[31mrefused".to_owned(),
            listed,
        };
        let unread = unread_outages(
            &members,
            &[
                outage("cluster-b", true),
                outage("cluster-c", true),
                outage("cluster-d", false),
            ],
        );
        let clusters: Vec<&str> = unread.iter().map(|u| u.cluster.as_str()).collect();
        assert_eq!(clusters, ["cluster-b", "cluster-d"]);
        // Whatever answers at a member's address writes part of the error: quoted.
        assert!(!unread[0].why.contains('\u{1b}'), "{}", unread[0].why);
    }
}
