//! `GET /ui/status` and `GET /api/v1/status` (optional `?group=NAME`) on the ops server: the
//! thin I/O around [`baton_core::status::view`]. Each request reads this replica's caches and, on the
//! leader, its [`StatusBoard`]; a standby names the leader its elector last saw in the Lease
//! (no API call per request).

use std::sync::Arc;

use actix_web::{HttpResponse, web};
use baton_core::pods::CachedPod;
use baton_shared::ops_server::Readiness;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde::Deserialize;

use super::board::StatusBoard;
use super::html;
use crate::cache::Caches;
use crate::error::Error;
use crate::leader::Leadership;
use baton_core::namespaces;
use baton_core::statefulset::group_of;
use baton_core::status::model::{GroupStatus, Replica, Role, RolloutStatus};
use baton_core::status::view;

/// What the status routes read. Build one per process and mount it with [`StatusRoutes::mount`].
#[derive(Clone)]
pub struct StatusRoutes {
    pub namespace: String,
    /// This replica's identity in the Lease.
    pub identity: String,
    /// Where the groups are read.
    pub source: Source,
    /// The caches have synced (before that, a view would miss pods and zones).
    pub readiness: Readiness,
    pub board: StatusBoard,
    pub leadership: Leadership,
    /// This replica's shards, with `controller.shards > 1`: a namespace's history is its
    /// shard holder's, not the leader's.
    pub shards: Option<crate::shards::Shards>,
}

impl std::fmt::Debug for StatusRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusRoutes")
            .field("namespace", &self.namespace)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// Where the status page reads the groups: the caches of the one namespace served, or of each
/// namespace of several (each group then named with its namespace).
#[derive(Clone, Debug)]
pub enum Source {
    One(Caches),
    Many(crate::tenants::Tenants),
}

#[derive(Debug, Deserialize)]
struct Query {
    group: Option<String>,
}

impl StatusRoutes {
    /// Mounts the two routes (for [`baton_shared::ops_server::bind_with_routes`]).
    pub fn mount(self) -> impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static {
        let routes = web::Data::new(Arc::new(self));
        move |config: &mut web::ServiceConfig| {
            config
                .app_data(routes.clone())
                .route("/ui/status", web::get().to(page))
                .route("/api/v1/status", web::get().to(json));
        }
    }

    /// The document for every group, or for `group` only; else why a request has no status
    /// to show ([`Error::StatusNotSynced`], [`Error::NoSuchGroup`]).
    pub async fn document(&self, group: Option<&str>) -> Result<RolloutStatus, Error> {
        if !self.readiness.is_ready() {
            return Err(Error::StatusNotSynced);
        }
        let now = Timestamp::now();
        // Only the term's leader has a history worth showing: a former leader's is stale.
        let leading = self.leadership.is_leader();
        let groups = match &self.source {
            Source::One(caches) => {
                let groups = self.groups_of(caches, None, group, leading, now);
                if let (Some(group), true) = (group, groups.is_empty()) {
                    return Err(Error::NoSuchGroup {
                        group: group.to_owned(),
                        namespace: self.namespace.clone(),
                    });
                }
                groups
            }
            Source::Many(tenants) => {
                // `?group=namespace/group` asks for one group of one namespace.
                let (wanted_namespace, wanted_group) = match group.map(namespaces::split) {
                    Some((namespace, group)) => (namespace, Some(group)),
                    None => (None, None),
                };
                let mut groups = Vec::new();
                for (namespace, caches) in tenants.caches() {
                    if wanted_namespace.is_some_and(|wanted| wanted != namespace) {
                        continue;
                    }
                    groups.extend(self.groups_of(
                        &caches,
                        Some(&namespace),
                        wanted_group,
                        leading,
                        now,
                    ));
                }
                if let (Some(group), true) = (group, groups.is_empty()) {
                    return Err(Error::NoSuchGroup {
                        group: wanted_group.unwrap_or(group).to_owned(),
                        namespace: wanted_namespace
                            .unwrap_or("any served namespace")
                            .to_owned(),
                    });
                }
                groups
            }
        };
        let (role, leader) = if leading {
            (Role::Leader, Some(self.identity.clone()))
        } else {
            (Role::Standby, self.leadership.seen_holder())
        };
        let replica = Replica {
            identity: self.identity.clone(),
            role,
        };
        // Several namespaces: each group names its own, and the document names none.
        let namespace = match &self.source {
            Source::One(_) => self.namespace.clone(),
            Source::Many(_) => String::new(),
        };
        Ok(RolloutStatus::new(namespace, now, replica, leader, groups))
    }
}

impl StatusRoutes {
    /// The status of the groups one namespace's caches hold (or of `group` alone), each named
    /// with `namespace` where several are served; the history is the board's, by group key.
    fn groups_of(
        &self,
        caches: &Caches,
        namespace: Option<&str>,
        group: Option<&str>,
        leading: bool,
        now: Timestamp,
    ) -> Vec<GroupStatus> {
        let statefulsets = caches.statefulsets();
        let members: Vec<&StatefulSet> = statefulsets
            .iter()
            .map(Arc::as_ref)
            .filter(|statefulset| group.is_none() || group_of(statefulset) == group)
            .collect();
        if members.is_empty() {
            return Vec::new();
        }
        let pods = caches.pods();
        let pods: Vec<&CachedPod> = pods.iter().map(Arc::as_ref).collect();
        let history = |name: &str| {
            let key = match namespace {
                Some(namespace) => namespaces::qualify(namespace, name),
                None => name.to_owned(),
            };
            // Only who acts on the namespace has a history worth showing: the leader, or with
            // shards the namespace's shard holder.
            let acting = match &self.shards {
                Some(shards) => shards
                    .held()
                    .serves(namespace.unwrap_or(self.namespace.as_str())),
                None => leading,
            };
            acting.then(|| self.board.history(&key)).flatten()
        };
        let outages = caches.outages();
        // The page's readers reach the cluster their own way: commands name no context of theirs.
        let reader = baton_core::commands::Reader::default();
        let mut groups = view::groups(&members, &pods, &outages, history, &reader, now);
        for status in &mut groups {
            status.namespace = namespace.map(str::to_owned);
        }
        groups
    }
}

async fn page(routes: web::Data<Arc<StatusRoutes>>, query: web::Query<Query>) -> HttpResponse {
    match routes.document(query.group.as_deref()).await {
        Ok(document) => HttpResponse::Ok()
            .content_type("text/html; charset=utf-8")
            .insert_header(("Cache-Control", "no-store"))
            .body(html::page(&document)),
        Err(error) => failure(&error),
    }
}

async fn json(routes: web::Data<Arc<StatusRoutes>>, query: web::Query<Query>) -> HttpResponse {
    match routes.document(query.group.as_deref()).await {
        Ok(document) => HttpResponse::Ok()
            .insert_header(("Cache-Control", "no-store"))
            .json(document),
        Err(error) => failure(&error),
    }
}

fn failure(error: &Error) -> HttpResponse {
    let mut response = match error {
        Error::NoSuchGroup { .. } => HttpResponse::NotFound(),
        // Only the two above come from `document`; the caches are what it waits on.
        _ => HttpResponse::ServiceUnavailable(),
    };
    response
        .content_type("text/plain; charset=utf-8")
        .body(format!("{error}\n"))
}
