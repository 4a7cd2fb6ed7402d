//! The Go operator's zone tracker through the API server: reading it, and writing one
//! StatefulSet's entry without losing a concurrent writer's. What it says is judged in
//! `baton_core::downscale_history`.

use std::collections::BTreeMap;

use baton_core::downscale_history::{ZoneTracker, tracker_value};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Error};

/// Reads the zone tracker; a missing ConfigMap is an empty tracker.
pub async fn read_tracker(api: &Api<ConfigMap>, name: &str) -> Result<ZoneTracker, Error> {
    Ok(api
        .get_opt(name)
        .await?
        .map(ZoneTracker::from_config_map)
        .unwrap_or_default())
}

/// Writes `statefulset`'s entry into the tracker read as `tracker`: only that key, conditioned
/// on the version read (so a Go operator's concurrent write is never lost), or a create when
/// there is none. `Ok(false)`: someone wrote first; read again.
pub async fn record_in_tracker(
    api: &Api<ConfigMap>,
    name: &str,
    tracker: &ZoneTracker,
    statefulset: &str,
    at: Timestamp,
) -> Result<bool, Error> {
    let value = tracker_value(at);
    let result = match &tracker.resource_version {
        Some(version) => {
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": version},
                "data": {statefulset: value},
            });
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop)
        }
        None => {
            let config_map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([(statefulset.to_owned(), value)])),
                ..ConfigMap::default()
            };
            api.create(&PostParams::default(), &config_map)
                .await
                .map(drop)
        }
    };
    match result {
        Ok(()) => Ok(true),
        Err(Error::Api(status)) if status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}
