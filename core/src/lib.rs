//! baton's pure core: every decision baton makes, the concepts it reads and the words it tells
//! people with. Nothing else: no I/O, and no state kept between calls. Each decision is a
//! function from a snapshot of objects (and stored state, and `now`) to what to do and why it
//! waits; the binaries read the snapshot from their watch caches, keep what lasts between
//! passes (the controller's work queue, its deletions not seen yet, its status board) and
//! carry the answer out.
//!
//! Cargo keeps it pure: this crate cannot reach a kube client, tokio, HTTP or TLS, because it
//! does not depend on them, nor on the configuration loader (the settings it reads, like
//! [`pod_address::PodAddressing`] and [`lease::decide::LeaseTiming`], are its own plain types,
//! which `baton_config` converts into).
//!
//! # Module map
//!
//! | module | what |
//! |---|---|
//! | [`admission`] | admission decisions on domain types (a downscale, an eviction, a change to baton's state) to a typed verdict |
//! | [`annotations`] | the labels and annotations of the contract with the Go operator's users, and their parsing |
//! | [`duration`] | the two duration syntaxes users write (Go's and Prometheus') |
//! | [`explained`] | what baton tells people (waits, warnings, notices) in one shape: a stable kind, a StatefulSet, a message |
//! | [`commands`] | the commands baton prints for people to run, each pasteable as printed |
//! | [`clock`] | how far apart clocks may be before a recorded time is not believed |
//! | [`pods`] | a pod as decisions read it ([`pods::CachedPod`]), readiness, ownership |
//! | [`labels`] | a pod's labels as caches keep them (interned, sorted), and label selectors matched against them |
//! | [`statefulset`] | a StatefulSet's group, replicas and ordinals as decisions read them |
//! | [`pod_address`] | how baton addresses a pod it calls (DNS name or IP) and builds the URL |
//! | [`names`] | the shapes of Kubernetes names, for user-written values baton puts where a name belongs |
//! | [`namespaces`] | which namespaces one baton serves (one, a list, every one, narrowed by a selector over namespaces), the same for the controller and the webhook configurations |
//! | [`cluster_kubeconfig`] | a member cluster's kubeconfig, read against the allow-list of what the hub's controller accepts |
//! | [`clusters`] | groups across clusters: a member named `cluster/statefulset`, and a cluster's objects joining a group |
//! | [`rollout`] | the rollout snapshot, the planner's walk, and its answer and wording (`rollout::model`): which pods may go now |
//! | [`gates`] | soak, ramp, halt, health checks and hooks as gates on the plan: whether they may go now |
//! | [`pass`] | a group's whole rollout pass in one call: what was read to the ordered effects, the wait and when to look again |
//! | [`status`] | a group's status as people read it, from the snapshot, the plan and the gates |
//! | [`scaling`] | leader/follower zones, replica mirroring and delayed downscale: the snapshot and the plan |
//! | [`ledger`] | records replicas claim things in (the downscale ledger, the budgets' eviction records) as decisions read and change them |
//! | [`downscale_history`] | when each StatefulSet was last downscaled, from the ledger, the Go operator's zone tracker and the annotation |
//! | [`min_time`] | the min-time between zones' downscales: the one rule prepare-downscale and the scaling plan judge by |
//! | [`member_claims`] | the min-time across member clusters: a downscale's claim in a majority of the members' ledgers, what each ledger accepts, when a majority is reached, what to withdraw |
//! | [`zpdb`] | zone-aware pod disruption budgets: the CRD, its validation, the eviction decision, the record of allowed evictions |
//! | [`lease`] | leader election: what a candidate does next from what it has seen of the Lease, on its own clock |
//! | [`shards`] | a cluster's groups shared among replicas: a namespace's shard, each replica's share, which shard Leases to compete for and release |
//! | [`phased`] | the phased rollout operator's `PhasedRollout`, turned into a group baton rolls by partition, and its status |
//! | [`certificates`] | the webhook's serving certificate and CA: what to write next and when, rotation included |
//! | `testing` | builders of snapshots for every crate's tests (`testing` feature) |
//!
//! # The decisions, and who carries them out
//!
//! - A rollout pass: [`pass::decide()`] over a [`rollout::GroupSnapshot`] composes
//!   [`rollout::plan()`] (which pods may go), [`gates`] (whether they may go now), hooks,
//!   checks, rollbacks and what to tell, into ordered [`pass::Effect`]s; the controller's
//!   `rollout` module reads and runs them. [`status`] is what people see.
//! - A scaling pass: [`scaling::snapshot`] → [`scaling::plan()`]; the controller's `scaling`
//!   writes `/scale` and calls pods.
//! - A downscale admission: [`admission::downscale`] and [`admission::prepare`] (min-time by
//!   [`min_time`], the scaling plan's rule too, over [`downscale_history`] and the [`ledger`]);
//!   the webhook claims it.
//! - A change to baton's state: [`admission::state`].
//! - An eviction or a rollout deletion under a budget: [`zpdb::decide()`] (an eviction's
//!   review through [`admission::eviction`]); the webhook and the controller claim it in the
//!   budget's record.
//! - The Lease ([`lease`]) and the webhook's certificate ([`certificates`]): the controller.

/// `kube::Resource` for a namespaced custom resource of baton's own types (a struct with a
/// `metadata: ObjectMeta` field), from its API group, version, kind and plural: the core has no
/// kube-derive, and every such impl is the same. Defined before the modules that use it.
macro_rules! namespaced_resource {
    ($type:ty, $group:expr, $version:expr, $kind:expr, $plural:expr) => {
        impl ::kube_core::Resource for $type {
            type DynamicType = ();
            type Scope = ::k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($kind)
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($group)
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($version)
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($plural)
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub mod admission;
pub mod annotations;
pub mod certificates;
pub mod clock;
pub mod cluster_kubeconfig;
pub mod clusters;
pub mod commands;
pub mod downscale_history;
pub mod duration;
pub mod explained;
pub mod gates;
pub mod labels;
pub mod lease;
pub mod ledger;
pub mod member_claims;
pub mod min_time;
pub mod names;
pub mod namespaces;
pub mod pass;
pub mod phased;
pub mod pod_address;
pub mod pods;
pub mod rollout;
pub mod scaling;
pub mod shards;
pub mod statefulset;
pub mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod zpdb;
