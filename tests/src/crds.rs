//! The CustomResourceDefinitions baton ships in deploy/crds/, installed as shipped (created,
//! or left as they are when a test process or a bench installed them before) and served
//! before the caller goes on.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

use crate::wait_until;

const TIMEOUT: Duration = Duration::from_secs(60);

/// The ZoneAwarePodDisruptionBudget CRD (`deploy/crds/zone-aware-pod-disruption-budget.yaml`).
pub const ZONE_AWARE_POD_DISRUPTION_BUDGET: &str = "zone-aware-pod-disruption-budget.yaml";
/// The RolloutHealthCheck CRD (`deploy/crds/rollout-health-check.yaml`).
pub const ROLLOUT_HEALTH_CHECK: &str = "rollout-health-check.yaml";
/// The PhasedRollout CRD (`deploy/crds/phased-rollout.yaml`).
pub const PHASED_ROLLOUT: &str = "phased-rollout.yaml";

/// Creates the CRD of `deploy/crds/<manifest>` unless it exists, and waits until it is
/// Established.
pub async fn install(client: &kube::Client, manifest: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/crds")
        .join(manifest);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
        .unwrap_or_else(|error| panic!("{} is not a CRD: {error}", path.display()));
    let name = crd.metadata.name.clone().unwrap_or_default();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    match api.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("creating the CRD {name}: {error}"),
    }
    wait_until(
        TIMEOUT,
        &format!("the CRD {name} is established"),
        || async {
            api.get(&name).await.is_ok_and(|crd| {
                crd.status
                    .and_then(|status| status.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|condition| condition.type_ == "Established" && condition.status == "True")
            })
        },
    )
    .await;
}
