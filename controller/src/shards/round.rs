//! The thin I/O loop around `baton_core::shards` and the election's rule: list, decide, write
//! conditionally, sleep. A failed call ends no term early (each ends by the clock), a 409 or
//! 404 on a shard Lease ends that shard's at once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use baton_core::lease::decide::{LeaseDecision, Observation, decide, observe};
use baton_core::lease::record::{claimed, holder_of, record_of, released};
use baton_core::shards::{
    ShardId, ShardLease, ShardPlan, acting_until, alive, count_to_share_by, plan,
    shard_map_settled_at,
};
use baton_shared::kube_client::bounded;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{
    HeldShards, PRESENCE_PREFIX, PRUNE_AFTER_DURATIONS, SHARD_COUNT_ANNOTATION, SHARD_MAP,
    ShardLoop, ShardTerm, now, presence_lease_name, shard_of_lease_name,
};
use crate::error::Error;
use crate::leader::{Leases, Term};

pub(super) async fn run<L: Leases>(sharer: ShardLoop<L>, shutdown: CancellationToken) {
    info!(
        identity = %sharer.identity,
        namespace = sharer.leases.namespace(),
        configured = sharer.configured,
        "sharing the namespaces by shard Leases"
    );
    let presence = presence_lease_name(&sharer.identity);
    let mut replica = Replica {
        sharer,
        presence,
        observations: BTreeMap::new(),
        leases: BTreeMap::new(),
        terms: 0,
        warned: BTreeSet::new(),
        shutdown,
    };
    loop {
        let started = now();
        if replica.shutdown.is_cancelled() {
            break;
        }
        replica.round().await;
        replica
            .sleep_until(started + replica.sharer.timing.retry_period)
            .await;
    }
    replica.shut_down().await;
}

/// The shard map as read: the count it names, or why it names none.
enum MapCount {
    Absent,
    Count(u32),
    Invalid(String),
}

struct Replica<L: Leases> {
    sharer: ShardLoop<L>,
    presence: String,
    /// Every Lease of interest as observed on this replica's clock, by name.
    observations: BTreeMap<String, Observation>,
    /// Every Lease as last listed or written: the base (and resourceVersion) of the next write.
    leases: BTreeMap<String, Lease>,
    /// Terms started so far: the next one is numbered one more.
    terms: u64,
    /// Warnings logged and still true, so each is logged when it starts, not every round.
    warned: BTreeSet<String>,
    shutdown: CancellationToken,
}

impl<L: Leases> Replica<L> {
    fn me(&self) -> &str {
        &self.sharer.identity
    }

    async fn round(&mut self) {
        let mut warnings = BTreeSet::new();
        let read_at = now();
        let listed = match self.call("listing", self.sharer.leases.list()).await {
            Some(Ok(listed)) => listed,
            Some(Err(error)) => {
                // Nothing is extended: the terms run out by the clock, as published.
                self.call_failed(&error);
                return self.publish();
            }
            None => return,
        };
        self.fold(listed, now());
        self.renew_presence().await;

        let count = match self.map_count() {
            MapCount::Absent => {
                self.create_map().await;
                None
            }
            MapCount::Count(recorded) => {
                let (count, warning) = count_to_share_by(self.sharer.configured, Some(recorded));
                warnings.extend(warning);
                Some(count)
            }
            MapCount::Invalid(why) => {
                warnings.insert(why);
                None
            }
        };
        // Terms of another count end with the count they were shared by.
        self.end_terms(|id| Some(id.count) != count, "the shard count changed");
        let settled = count.is_some()
            && shard_map_settled_at(&self.observation(SHARD_MAP), &self.sharer.timing)
                .is_some_and(|settled| now() >= settled);
        let others = self.others(&mut warnings);
        self.sharer.status.send_modify(|status| {
            status.count = count;
            status.settled = settled;
            status.others.clone_from(&others);
        });
        if let (Some(count), true) = (count, settled) {
            self.share(count, &others, read_at, &mut warnings).await;
        }
        self.prune_presences().await;
        self.warn_new(warnings);
        self.publish();
    }

    /// Folds a list into the observations: a Lease listed before and missing now is observed
    /// gone; Leases of no interest are left out.
    fn fold(&mut self, listed: Vec<Lease>, at: Instant) {
        let mut fresh: BTreeMap<String, Lease> = listed
            .into_iter()
            .filter_map(|lease| Some((lease.metadata.name.clone()?, lease)))
            .filter(|(name, _)| of_interest(name))
            .collect();
        let names: BTreeSet<String> = fresh
            .keys()
            .chain(self.observations.keys())
            .cloned()
            .collect();
        for name in names {
            let lease = fresh.remove(&name);
            let previous = self.observation(&name);
            let observed = observe(&previous, lease.as_ref().map(record_of), at);
            // Only a shard Lease's absence matters (one seen held and then gone waits a lease
            // duration); others are forgotten once gone.
            if matches!(observed, Observation::Absent { .. })
                && shard_of_lease_name(&name).is_none()
            {
                self.observations.remove(&name);
            } else {
                self.observations.insert(name.clone(), observed);
            }
            match lease {
                Some(lease) => self.leases.insert(name, lease),
                None => self.leases.remove(&name),
            };
        }
    }

    fn observation(&self, name: &str) -> Observation {
        self.observations
            .get(name)
            .cloned()
            .unwrap_or(Observation::Unknown)
    }

    /// Records a Lease this replica wrote, observed now.
    fn wrote(&mut self, written: Lease) {
        let Some(name) = written.metadata.name.clone() else {
            return;
        };
        let observed = observe(&self.observation(&name), Some(record_of(&written)), now());
        self.observations.insert(name.clone(), observed);
        self.leases.insert(name, written);
    }

    /// Creates or renews this replica's presence Lease (its name is its own: one found held by
    /// someone else is taken back, with a warning).
    async fn renew_presence(&mut self) {
        let base = self.leases.get(&self.presence);
        if let Some(holder) = base
            .and_then(holder_of)
            .filter(|holder| *holder != self.me())
        {
            warn!(
                identity = %self.me(),
                lease = %self.presence,
                holder,
                "this replica's presence Lease was written by someone else; taking it back"
            );
        }
        let (_, result) = self.claim(&self.presence, base).await;
        self.after_write(result, "renewing the presence Lease");
    }

    /// Writes Lease `name` held by this replica, from `base` as read (a create without one):
    /// when the write was sent, and its answer.
    async fn claim(
        &self,
        name: &str,
        base: Option<&Lease>,
    ) -> (Instant, Option<Result<Lease, Error>>) {
        let desired = claimed(
            base,
            self.sharer.leases.namespace(),
            name,
            self.me(),
            Timestamp::now(),
            self.sharer.timing.duration_seconds(),
        );
        let sent = now();
        let leases = &self.sharer.leases;
        let result = match base {
            None => self.call("creating", leases.create(&desired)).await,
            Some(_) => self.call("replacing", leases.replace(&desired)).await,
        };
        (sent, result)
    }

    /// Handles the answer to a write that starts no term: the Lease as written is the next
    /// base; a conflict is read again at the next round.
    fn after_write(&mut self, result: Option<Result<Lease, Error>>, what: &str) -> bool {
        match result {
            Some(Ok(written)) => {
                self.wrote(written);
                true
            }
            Some(Err(error @ (Error::LeaseConflict { .. } | Error::LeaseNotFound { .. }))) => {
                debug!(identity = %self.me(), %error, what, "the Lease changed under us; reading it again next round");
                false
            }
            Some(Err(error)) => {
                self.call_failed(&error);
                false
            }
            None => false,
        }
    }

    /// The count the shard map names.
    fn map_count(&self) -> MapCount {
        let Some(map) = self.leases.get(SHARD_MAP) else {
            return MapCount::Absent;
        };
        let recorded = map
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(SHARD_COUNT_ANNOTATION));
        match recorded.map(|count| count.trim().parse::<u32>()) {
            Some(Ok(count)) if (1..=baton_config::MAX_SHARDS).contains(&count) => {
                MapCount::Count(count)
            }
            _ => MapCount::Invalid(format!(
                "the shard map {}/{SHARD_MAP} has {SHARD_COUNT_ANNOTATION}={} (expected a whole \
                 number from 1 to {}): acting on no shard until it names one, since replicas \
                 sharing by different counts could act twice on one namespace",
                self.sharer.leases.namespace(),
                recorded.map_or("<missing>", String::as_str),
                baton_config::MAX_SHARDS,
            )),
        }
    }

    /// Creates the shard map with this replica's count (the first replica's wins: the create
    /// is atomic).
    async fn create_map(&mut self) {
        let map = Lease {
            metadata: ObjectMeta {
                name: Some(SHARD_MAP.to_owned()),
                namespace: Some(self.sharer.leases.namespace().to_owned()),
                annotations: Some(
                    [(
                        SHARD_COUNT_ANNOTATION.to_owned(),
                        self.sharer.configured.to_string(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        let result = self.call("creating", self.sharer.leases.create(&map)).await;
        if self.after_write(result, "creating the shard map") {
            info!(
                identity = %self.me(),
                shards = self.sharer.configured,
                "created the shard map with this replica's count"
            );
        }
    }

    /// The other replicas alive by their presence Leases, on this replica's clock. A presence
    /// Lease held under another name than its own is ignored, with a warning.
    fn others(&self, warnings: &mut BTreeSet<String>) -> BTreeSet<String> {
        let at = now();
        self.observations
            .iter()
            .filter_map(|(name, observation)| {
                let identity = name.strip_prefix(PRESENCE_PREFIX)?;
                if identity == self.me() {
                    return None;
                }
                let holder = match observation {
                    Observation::Present { record, .. } => record.holder.as_deref(),
                    _ => None,
                };
                if holder.is_some_and(|holder| holder != identity) {
                    warnings.insert(format!(
                        "the presence Lease {name} is held by {}, not {identity}: written by \
                         someone else, so not counted as a replica",
                        holder.unwrap_or_default()
                    ));
                    return None;
                }
                alive(observation, at, &self.sharer.timing).then(|| identity.to_owned())
            })
            .collect()
    }

    /// Competes for, keeps and releases shard Leases as `plan` says, by the election's rule.
    async fn share(
        &mut self,
        count: u32,
        others: &BTreeSet<String>,
        read_at: Instant,
        warnings: &mut BTreeSet<String>,
    ) {
        let at = now();
        // A shard Lease of this count not there yet is observed absent.
        for shard in 0..count {
            let name = ShardId { count, shard }.lease_name();
            let previous = self.observation(&name);
            if matches!(previous, Observation::Unknown) {
                self.observations.insert(name, observe(&previous, None, at));
            }
        }
        let leases: Vec<ShardLease> = self
            .observations
            .iter()
            .filter_map(|(name, observation)| {
                let id = shard_of_lease_name(name)?;
                let Observation::Present { record, .. } = observation else {
                    return None;
                };
                Some(ShardLease {
                    shard: id.shard,
                    count: id.count,
                    holder: record.holder.clone(),
                    alive: alive(observation, at, &self.sharer.timing),
                })
            })
            .collect();
        for lease in &leases {
            if let Some(holder) = &lease.holder
                && lease.count == count
                && holder != self.me()
                && !others.contains(holder)
                && !self.observations.contains_key(&presence_lease_name(holder))
            {
                warnings.insert(format!(
                    "shard Lease {} is held by {holder}, which has no presence Lease: written by \
                     someone else or a replica long gone; taken over once it stops changing",
                    ShardId {
                        count,
                        shard: lease.shard
                    }
                    .lease_name()
                ));
            }
        }
        let ShardPlan {
            compete,
            keep,
            release,
        } = plan(self.me(), count, others, &leases);
        for id in release {
            self.release(id).await;
        }
        for shard in compete.into_iter().chain(keep) {
            self.lead(ShardId { count, shard }, read_at).await;
        }
    }

    /// Stops acting on `id`, then writes its release.
    async fn release(&mut self, id: ShardId) {
        self.end_terms(
            |term| term == id,
            "handed over to the replica it belongs to now",
        );
        let name = id.lease_name();
        let Some(lease) = self
            .leases
            .get(&name)
            .filter(|lease| holder_of(lease) == Some(self.me()))
            .cloned()
        else {
            return;
        };
        let result = self
            .call(
                "replacing",
                self.sharer
                    .leases
                    .replace(&released(&lease, Timestamp::now())),
            )
            .await;
        if self.after_write(result, "releasing a shard Lease") {
            info!(identity = %self.me(), lease = %name, "released the shard Lease");
        }
    }

    /// Creates, renews or takes over shard `id`'s Lease as the election's rule says; a success
    /// starts or extends its term.
    async fn lead(&mut self, id: ShardId, read_at: Instant) {
        let name = id.lease_name();
        let decision = decide(
            &self.observation(&name),
            self.me(),
            now(),
            &self.sharer.timing,
        );
        let base = match decision {
            LeaseDecision::Create => None,
            LeaseDecision::Renew | LeaseDecision::Acquire(_) => self.leases.get(&name),
            LeaseDecision::Read | LeaseDecision::Wait { .. } => {
                // Someone else holds it (or its last holder may still act): not ours now.
                self.end_terms(|term| term == id, "another replica holds its Lease");
                return;
            }
        };
        let (sent, result) = self.claim(&name, base).await;
        match result {
            Some(Ok(written)) => {
                self.wrote(written);
                let until = acting_until(sent, read_at, &self.sharer.timing);
                if now() < until {
                    self.extend_term(id, until, &decision);
                } else {
                    self.end_terms(|term| term == id, "its renewal succeeded too late");
                }
            }
            Some(Err(error @ (Error::LeaseConflict { .. } | Error::LeaseNotFound { .. }))) => {
                self.end_terms(|term| term == id, "its Lease changed since it was read");
                debug!(identity = %self.me(), %error, "shard Lease changed under us");
            }
            // Uncertain: the term (if any) runs out by the clock, unextended.
            Some(Err(error)) => self.call_failed(&error),
            None => {}
        }
    }

    /// Starts a term of `id` lasting until `until`, or moves the current one's end there.
    fn extend_term(&mut self, id: ShardId, until: Instant, how: &LeaseDecision) {
        let mut started = None;
        let next = Term(self.terms + 1);
        self.sharer
            .status
            .send_modify(|status| match status.terms.get_mut(&id) {
                Some(term) => term.until = until,
                None => {
                    // Taken under the channel's write lock: no reader sees the term before it starts.
                    let since = now();
                    status.terms.insert(
                        id,
                        ShardTerm {
                            term: next,
                            since,
                            until,
                        },
                    );
                    started = Some(next);
                }
            });
        if let Some(term) = started {
            self.terms = term.0;
            info!(identity = %self.me(), lease = %id.lease_name(), how = ?how, term = term.0, "leads the shard");
        }
    }

    /// Ends every term of a shard `which` selects: acting on it stops now.
    fn end_terms(&mut self, which: impl Fn(ShardId) -> bool, why: &str) {
        let mut ended = Vec::new();
        self.sharer.status.send_if_modified(|status| {
            status.terms.retain(|id, term| {
                let keep = !which(*id);
                if !keep {
                    ended.push((*id, *term));
                }
                keep
            });
            !ended.is_empty()
        });
        for (id, term) in ended {
            info!(identity = %self.me(), lease = %id.lease_name(), term = term.term.0, why, "stopped leading the shard");
        }
    }

    /// Deletes the presence Leases of replicas gone for long (each write conditional on the
    /// version seen unchanged all that time).
    async fn prune_presences(&mut self) {
        let at = now();
        let gone_for = self.sharer.timing.duration * PRUNE_AFTER_DURATIONS;
        let stale: Vec<(String, String)> = self
            .observations
            .iter()
            .filter(|(name, _)| name.starts_with(PRESENCE_PREFIX) && **name != self.presence)
            .filter_map(|(name, observation)| match observation {
                Observation::Present { record, since } if at >= *since + gone_for => {
                    Some((name.clone(), record.resource_version.clone()))
                }
                _ => None,
            })
            .collect();
        for (name, version) in stale {
            match self
                .call("deleting", self.sharer.leases.delete(&name, &version))
                .await
            {
                Some(Ok(())) => {
                    info!(identity = %self.me(), lease = %name, "deleted the presence Lease of a replica gone for long");
                    self.observations.remove(&name);
                    self.leases.remove(&name);
                }
                Some(Err(Error::LeaseConflict { .. } | Error::LeaseNotFound { .. })) | None => {}
                Some(Err(error)) => self.call_failed(&error),
            }
        }
    }

    /// Logs each warning when it starts being true.
    fn warn_new(&mut self, warnings: BTreeSet<String>) {
        for warning in warnings.difference(&self.warned) {
            warn!(identity = %self.me(), "{warning}");
        }
        self.warned = warnings;
    }

    /// Publishes the held shards (by the clock: terms that ran out are not held) and the
    /// metrics, from the status.
    fn publish(&self) {
        let (held, count, others) = {
            let status = self.sharer.status.borrow();
            (status.held_at(now()), status.count, status.others.len())
        };
        if let Some(metrics) = &self.sharer.metrics {
            metrics
                .held
                .set(i64::try_from(held.shards.len()).unwrap_or(i64::MAX));
            metrics.count.set(i64::from(count.unwrap_or(0)));
            metrics
                .replicas
                .set(i64::try_from(others + 1).unwrap_or(i64::MAX));
        }
        self.sharer.held.send_if_modified(|current| {
            let changed = *current != held;
            *current = held;
            changed
        });
    }

    /// Stops acting on every shard, then releases the shard Leases and the presence Lease.
    async fn shut_down(&mut self) {
        self.sharer.status.send_modify(|status| {
            status.ended = true;
            status.terms.clear();
        });
        self.sharer.held.send_replace(HeldShards::default());
        if let Some(metrics) = &self.sharer.metrics {
            metrics.held.set(0);
        }
        let at = Timestamp::now();
        let mine: Vec<Lease> = self
            .leases
            .values()
            .filter(|lease| holder_of(lease) == Some(self.me()))
            .map(|lease| released(lease, at))
            .collect();
        let leases = &self.sharer.leases;
        let releases = futures::future::join_all(mine.iter().map(|lease| leases.replace(lease)));
        match bounded(
            self.sharer.request_timeout,
            "releasing the shard Leases",
            releases,
        )
        .await
        {
            Ok(results) => {
                let failed = results.iter().filter(|result| result.is_err()).count();
                info!(identity = %self.me(), released = results.len() - failed, failed, "stopped sharing: released its Leases for the other replicas");
            }
            Err(error) => {
                warn!(identity = %self.me(), %error, "could not release the shard Leases; the other replicas take them over when they expire");
            }
        }
    }

    /// One Lease call, bounded by the request timeout; shutdown interrupts it (`None`: nothing
    /// is known of it).
    async fn call<T>(
        &self,
        action: &'static str,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Option<Result<T, Error>> {
        let what = format!(
            "{action} shard Leases in {}",
            self.sharer.leases.namespace()
        );
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => None,
            result = bounded(self.sharer.request_timeout, what, call) => Some(result.map_err(Error::from).and_then(|answer| answer)),
        }
    }

    /// The one place a failed Lease call is counted.
    fn call_failed(&self, error: &Error) {
        if let Some(metrics) = &self.sharer.metrics {
            metrics.call_errors.inc();
            if let Some(failures) = &metrics.failures {
                failures.count(error);
            }
        }
        warn!(identity = %self.me(), %error, "shard Lease call failed; trying again next round");
    }

    /// Sleeps until `at` or shutdown.
    async fn sleep_until(&self, at: Instant) {
        tokio::select! {
            () = self.shutdown.cancelled() => {}
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
        }
    }
}

/// Whether the loop reads Lease `name`: the map, presence and shard Leases (not the leader's).
fn of_interest(name: &str) -> bool {
    name == SHARD_MAP || name.starts_with(PRESENCE_PREFIX) || shard_of_lease_name(name).is_some()
}
