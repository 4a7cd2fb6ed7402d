//! The pods and StatefulSets of the other member clusters (`webhook.clusters`), watched in the
//! groups' namespace through each member's client, for the eviction decision across members
//! (`baton_core::zpdb::members`): a cache read without a call in the admission path, as the
//! webhook's own.
//!
//! - **Whether a member can be trusted** is kept per member: not until both its watches have
//!   listed, and not again from a watch's first error (or its client gone: its Secret unusable)
//!   until both have listed again. A watch that merely resumed would not show what changed
//!   while it was away, so every failure starts the watch over with a fresh list, through the
//!   member's client as it is then (a rotated kubeconfig is picked up there). A member that
//!   cannot be trusted is [`Away`], and the decision counts its pods as unavailable.
//! - **Every pod of the namespace** is watched, as the webhook's own pods are: a budget's
//!   selector is anyone's to change, and a watch per selector would list again at each change.
//!   The watches start with the first budget, as the webhook's own pod watch does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_core::pods::CachedPod;
use baton_core::zpdb::members::Away;
use baton_shared::pod_cache::{self, PodCache};
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;

/// A member's client as it is now, or why it has none.
pub type ClientOf = Arc<dyn Fn(&str) -> Result<kube::Client, String> + Send + Sync>;

/// How often a member without a client is asked for one again, and a watching member whether
/// it still has one.
const CLIENT_POLL: Duration = Duration::from_secs(1);

/// Whether one watch of a member has listed since it last failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Listed {
    /// Not yet; the last problem, if any.
    NotYet(Option<String>),
    Listed,
}

#[derive(Debug, Clone)]
struct Health {
    pods: Listed,
    statefulsets: Listed,
}

impl Health {
    fn away(&self) -> Option<Option<String>> {
        match (&self.pods, &self.statefulsets) {
            (Listed::Listed, Listed::Listed) => None,
            (Listed::NotYet(Some(error)), _) | (_, Listed::NotYet(Some(error))) => {
                Some(Some(error.clone()))
            }
            _ => Some(None),
        }
    }
}

/// Which of a member's two watches.
#[derive(Debug, Clone, Copy)]
enum Watch {
    Pods,
    StatefulSets,
}

impl Health {
    fn of(&mut self, watch: Watch) -> &mut Listed {
        match watch {
            Watch::Pods => &mut self.pods,
            Watch::StatefulSets => &mut self.statefulsets,
        }
    }
}

struct Member {
    cluster: String,
    pods: PodCache,
    statefulsets: Store<StatefulSet>,
    health: Arc<Mutex<Health>>,
}

/// The caches of the other members. Cheap to clone.
#[derive(Clone)]
pub struct MemberPods {
    members: Arc<Vec<Member>>,
}

impl std::fmt::Debug for MemberPods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.members.iter().map(|member| &member.cluster))
            .finish()
    }
}

/// One member's StatefulSets and pods, as its caches hold them.
pub type Objects = (Vec<Arc<StatefulSet>>, Vec<Arc<CachedPod>>);

/// What the members' caches hold now: the StatefulSets and pods of each member that can be
/// trusted, by cluster, and the members that cannot.
#[derive(Debug, Default)]
pub struct MembersNow {
    pub readable: BTreeMap<String, Objects>,
    pub away: Vec<Away>,
}

impl MemberPods {
    /// The caches of `clusters` (the other members) in `namespace` and the future that fills
    /// them once `wanted` turns true (run it as a critical task).
    pub fn start(
        client_of: ClientOf,
        clusters: &[String],
        namespace: &str,
        wanted: tokio::sync::watch::Receiver<bool>,
    ) -> (Self, futures::future::BoxFuture<'static, ()>) {
        let mut members = Vec::new();
        let mut fills = Vec::new();
        for cluster in clusters {
            let health = Arc::new(Mutex::new(Health {
                pods: Listed::NotYet(None),
                statefulsets: Listed::NotYet(None),
            }));
            let pod_events = events::<Pod>(
                client_of.clone(),
                cluster.clone(),
                namespace.to_owned(),
                health.clone(),
                Watch::Pods,
            );
            let (pods, fill_pods) = pod_cache::watch_stream(pod_events, |_| {});
            let (statefulsets, writer) = reflector::store();
            let fill_statefulsets = reflector::reflector(
                writer,
                events::<StatefulSet>(
                    client_of.clone(),
                    cluster.clone(),
                    namespace.to_owned(),
                    health.clone(),
                    Watch::StatefulSets,
                ),
            )
            .for_each(|_| async {});
            let mut wanted = wanted.clone();
            fills.push(
                async move {
                    if wanted.wait_for(|wanted| *wanted).await.is_ok() {
                        futures::join!(fill_pods, fill_statefulsets);
                    }
                }
                .boxed(),
            );
            members.push(Member {
                cluster: cluster.clone(),
                pods,
                statefulsets,
                health,
            });
        }
        let fill = futures::future::join_all(fills).map(|_| ()).boxed();
        (
            Self {
                members: Arc::new(members),
            },
            fill,
        )
    }

    /// The members' caches as they are now.
    pub fn now(&self) -> MembersNow {
        let mut now = MembersNow::default();
        for member in self.members.iter() {
            let health = member
                .health
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            match health.away() {
                Some(error) => now.away.push(Away {
                    cluster: member.cluster.clone(),
                    error,
                }),
                None => {
                    now.readable.insert(
                        member.cluster.clone(),
                        (member.statefulsets.state(), member.pods.state()),
                    );
                }
            }
        }
        now
    }
}

/// The watch events of `K` in `cluster`, started over with a fresh list after every failure
/// and whenever the member loses its client, each noted in `health`.
fn events<K>(
    client_of: ClientOf,
    cluster: String,
    namespace: String,
    health: Arc<Mutex<Health>>,
    watch: Watch,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let note = {
        let health = health.clone();
        move |listed: Listed| {
            *health
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .of(watch) = listed;
        }
    };
    let clients = futures::stream::unfold(
        (client_of, cluster, namespace, note.clone(), false),
        |(client_of, cluster, namespace, note, failed)| async move {
            let mut backoff = baton_shared::kube_client::watch_backoff();
            if failed {
                tokio::time::sleep(backoff.next().unwrap_or(CLIENT_POLL)).await;
            }
            let client = loop {
                match client_of(&cluster) {
                    Ok(client) => break client,
                    Err(why) => {
                        note(Listed::NotYet(Some(format!("not connected: {why}"))));
                        tokio::time::sleep(CLIENT_POLL).await;
                    }
                }
            };
            let lost = {
                let (client_of, cluster, note) = (client_of.clone(), cluster.clone(), note.clone());
                async move {
                    loop {
                        tokio::time::sleep(CLIENT_POLL).await;
                        if let Err(why) = client_of(&cluster) {
                            note(Listed::NotYet(Some(format!("not connected: {why}"))));
                            return;
                        }
                    }
                }
            };
            let api: Api<K> = Api::namespaced(client, &namespace);
            let watched = baton_shared::initial_list::watcher(api, watcher::Config::default())
                .take_until(lost)
                .boxed();
            Some((watched, (client_of, cluster, namespace, note, true)))
        },
    );
    clients.flat_map(move |watched| {
        let note = note.clone();
        // A watch ends at its first error, to be started over with a fresh list.
        let mut failed = false;
        watched
            .take_while(move |event| {
                let go_on = !failed;
                failed = failed || event.is_err();
                futures::future::ready(go_on)
            })
            .inspect(move |event| match event {
                Ok(watcher::Event::InitDone) => note(Listed::Listed),
                Err(error) => note(Listed::NotYet(Some(error.to_string()))),
                Ok(_) => {}
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_away_until_both_watches_listed_and_says_why() {
        let mut health = Health {
            pods: Listed::NotYet(None),
            statefulsets: Listed::NotYet(None),
        };
        assert_eq!(health.away(), Some(None), "never listed: no reason yet");
        health.pods = Listed::Listed;
        assert_eq!(health.away(), Some(None));
        health.statefulsets = Listed::Listed;
        assert_eq!(health.away(), None);
        health.pods = Listed::NotYet(Some("connection refused".into()));
        assert_eq!(health.away(), Some(Some("connection refused".into())));
    }

    #[tokio::test]
    async fn a_member_without_a_client_is_away_naming_why() {
        let client_of: ClientOf = Arc::new(|cluster: &str| Err(format!("{cluster}: no Secret")));
        let (wanted_tx, wanted) = tokio::sync::watch::channel(true);
        let (members, fill) =
            MemberPods::start(client_of, &["cluster-c".to_owned()], "mimir", wanted);
        let running = tokio::spawn(fill);
        let away = loop {
            let now = members.now();
            assert!(now.readable.is_empty());
            if let [
                Away {
                    error: Some(error), ..
                },
            ] = now.away.as_slice()
            {
                break error.clone();
            }
            tokio::task::yield_now().await;
        };
        assert!(away.contains("cluster-c: no Secret"), "{away}");
        running.abort();
        drop(wanted_tx);
    }
}
