//! `rollback GROUP`: asks baton's controller to roll the group back, after checking that it
//! can, and prints what it will do. The decision is the controller's own
//! ([`baton_core::gates::rollback::start`], from the same members and ControllerRevisions); this
//! writes the request (`baton.dev/rollback`, saying who asked and why) and the controller carries
//! it out: it may be the leader of another moment, so the request is what survives.

use baton_core::gates::rollback::{self, ROLLBACK_ANNOTATION};
use baton_core::rollout::GroupSnapshot;
use kube::ResourceExt;

use crate::access::{Access, AccessError};
use crate::exit;

/// Who asks, for the Events and the status: the user the API server authenticated.
async fn asker(access: &Access) -> String {
    match access.identity().await {
        Some(user) => format!("kubectl baton rollback by {user}"),
        None => "kubectl baton rollback by a user the API server did not name".to_owned(),
    }
}

/// Requests the rollback of `group`; returns the exit code (what is printed says why).
pub async fn run(access: &Access, group: &str, reason: &str) -> Result<i32, AccessError> {
    let members = access.group_members(group).await?;
    let pods = access.pods().await?;
    let revisions = access.controller_revisions().await?;
    let snapshot = GroupSnapshot::from_kubernetes(group, &members, &pods);
    let plan = baton_core::rollout::plan(&snapshot, jiff::Timestamp::now());
    let status = rollback::status(&snapshot, |name| {
        plan.progress
            .iter()
            .any(|progress| progress.statefulset == name && progress.done)
    });
    if let Some(refused) = rollback::refuse_request(group, &status) {
        eprintln!("{refused}: nothing written");
        return Ok(exit::ERROR);
    }
    let read: Vec<&k8s_openapi::api::apps::v1::StatefulSet> = members.iter().collect();
    let history = rollback::history(&read, &revisions);
    let why = format!("{}: {reason}", asker(access).await);
    let records = match rollback::start(&snapshot, &history, &why, jiff::Timestamp::now()) {
        Ok(records) => records,
        Err(refused) => {
            eprintln!("{refused}: nothing written");
            return Ok(exit::ERROR);
        }
    };
    // On every member: one member's word alone asks for nothing.
    let carriers: Vec<String> = members.iter().map(ResourceExt::name_any).collect();
    for carrier in &carriers {
        access
            .patch_annotations(carrier, &[(ROLLBACK_ANNOTATION, Some(why.as_str()))])
            .await?;
    }
    println!(
        "rollback of rollout group {group} requested ({ROLLBACK_ANNOTATION} on {}): {}",
        carriers
            .iter()
            .map(|carrier| format!("statefulset/{carrier}"))
            .collect::<Vec<_>>()
            .join(", "),
        rollback::describe(&records)
    );
    println!("follow it with: kubectl baton wait {group} (exit 7 once rolled back)");
    Ok(exit::SUCCESS)
}
