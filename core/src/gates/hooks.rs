//! Rollout hooks (after the OAM rollout design's webhooks): an HTTP POST before each
//! zone starts and after it completes. A 2xx answer lets the rollout proceed; anything else is
//! retried with exponential backoff and, after [`ATTEMPTS`] failures, halts the group (or, with
//! `baton.dev/rollback-on-failure: "true"`, asks for its rollback).
//!
//! Pure and composed after the zone gate like the health check: [`apply`] holds what waits for
//! a hook and says which call is due; the I/O layer makes it
//! (the controller's `GateCalls::post_hook`) and [`record`] turns the answer into the state to
//! store. The state of each zone's two hooks lives in
//! `baton.dev/hook-state` on that zone, for its update revision, so a new leader neither calls
//! a hook twice after a success nor forgets the attempts.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::decision::{AnnotationWrite, GateDecision, GateVerdict, GateWait};
use super::keys::{HALTED_ANNOTATION, HOOK_STATE_ANNOTATION, STATE_ANNOTATION};
use super::state::GateState;
use crate::rollout::{GroupSnapshot, Plan};

/// Failed attempts after which the group halts.
pub const ATTEMPTS: u32 = 5;

pub use super::decision::{HookCall, HookPhase};

/// One hook's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookState {
    #[serde(default)]
    pub done: bool,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
}

/// A zone's hooks for one update revision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneHooks {
    pub revision: String,
    #[serde(default)]
    pub before: HookState,
    #[serde(default)]
    pub after: HookState,
}

impl ZoneHooks {
    fn read(group: &GroupSnapshot, zone: &str) -> Self {
        let member = group.statefulsets.iter().find(|member| member.name == zone);
        let revision = member
            .and_then(|member| member.update_revision.clone())
            .unwrap_or_default();
        member
            .and_then(|member| member.annotations.get(HOOK_STATE_ANNOTATION))
            .and_then(|raw| serde_json::from_str::<Self>(raw).ok())
            .filter(|hooks| hooks.revision == revision)
            .unwrap_or(Self {
                revision,
                ..Self::default()
            })
    }

    fn phase(&self, phase: HookPhase) -> &HookState {
        match phase {
            HookPhase::BeforeZone => &self.before,
            HookPhase::AfterZone => &self.after,
        }
    }

    fn phase_mut(&mut self, phase: HookPhase) -> &mut HookState {
        match phase {
            HookPhase::BeforeZone => &mut self.before,
            HookPhase::AfterZone => &mut self.after,
        }
    }
}

impl HookState {
    fn retry_at(&self) -> Option<Timestamp> {
        self.retry_at.as_deref().and_then(|at| at.parse().ok())
    }
}

/// Holds what waits for a hook and names the call due now (see the module header).
pub fn apply(
    group: &GroupSnapshot,
    url: &str,
    gated: (Plan, GateDecision),
    now: Timestamp,
) -> (Plan, GateDecision, Option<HookCall>) {
    let (state, _) = GateState::read(group);
    apply_with(group, &state, url, gated, now)
}

/// [`apply`] on the gate state already read: a pass reads the group's stored state once.
pub fn apply_with(
    group: &GroupSnapshot,
    state: &GateState,
    url: &str,
    (mut plan, mut decision): (Plan, GateDecision),
    now: Timestamp,
) -> (Plan, GateDecision, Option<HookCall>) {
    if decision.rolling_back
        || matches!(
            decision.wait(),
            Some(GateWait::Halted { .. } | GateWait::InvalidGate { .. })
        )
    {
        return (plan, decision, None);
    }
    let done = |name: &str| {
        plan.progress
            .iter()
            .any(|progress| progress.statefulset == name && progress.done)
    };
    // After a zone completes: its after-hook, before anything else happens.
    let after = state
        .zones
        .iter()
        .filter(|(name, zone)| zone.cleared_at.is_some() && done(name))
        .map(|(name, _)| name.clone())
        .find(|name| !ZoneHooks::read(group, name).after.done);
    // Before a zone starts: its before-hook, instead of clearing it.
    let starting = plan.deletions().find_map(|action| {
        action
            .rolls()
            .filter(|statefulset| !state.cleared(statefulset))
            .map(str::to_owned)
    });
    let (zone, phase) = match (after, starting) {
        (Some(zone), _) => (zone, HookPhase::AfterZone),
        (None, Some(zone)) if !ZoneHooks::read(group, &zone).before.done => {
            (zone, HookPhase::BeforeZone)
        }
        _ => {
            // Nothing pending: once the rollout's state is forgotten, so are the hooks'.
            let forgetting = decision
                .writes
                .iter()
                .any(|write| write.key == STATE_ANNOTATION && write.value.is_none());
            if forgetting {
                let carriers = group
                    .statefulsets
                    .iter()
                    .filter(|member| member.annotations.contains_key(HOOK_STATE_ANNOTATION));
                let removals: Vec<AnnotationWrite> = carriers
                    .map(|member| AnnotationWrite {
                        statefulset: member.name.clone(),
                        key: HOOK_STATE_ANNOTATION,
                        value: None,
                    })
                    .collect();
                decision.writes.extend(removals);
            }
            return (plan, decision, None);
        }
    };
    let hooks = ZoneHooks::read(group, &zone);
    let hook = hooks.phase(phase);
    plan.actions.retain(|action| action.rolls().is_none());
    // Nothing is cleared, soaked nor forgotten while a hook is pending: a zone cleared now
    // would start later without its own before-hook.
    decision
        .writes
        .retain(|write| write.key != STATE_ANNOTATION);
    decision.verdict = GateVerdict::Hold {
        wait: GateWait::Hook {
            zone: zone.clone(),
            phase: format!("{phase:?}"),
            attempts: hook.attempts,
            last: hook.last.clone(),
        },
        pass: Default::default(),
    };
    decision.settle(&plan);
    let retry_at = hook.retry_at();
    if let Some(at) = retry_at.filter(|at| *at > now) {
        decision.recheck_after = Some(decision.recheck_after.map_or(at, |other| other.min(at)));
        plan.recheck_after = Some(plan.recheck_after.map_or(at, |other| other.min(at)));
        return (plan, decision, None);
    }
    let member = group.statefulsets.iter().find(|member| member.name == zone);
    let call = HookCall {
        url: url.to_owned(),
        statefulset: zone,
        phase,
        from_revision: member.and_then(|member| member.current_revision.clone()),
        to_revision: hooks.revision.clone(),
    };
    (plan, decision, Some(call))
}

/// The decision when the group's hook may not be called (the operator's bounds on the
/// leader's calls): a wait for the hook becomes a wait for the annotation to be fixed, which
/// says why; nothing is called.
pub fn refuse(mut decision: GateDecision, why: String) -> GateDecision {
    if let Some(GateWait::Hook { zone, .. }) = decision.wait() {
        decision.verdict = GateVerdict::Hold {
            wait: GateWait::RefusedHook {
                zone: zone.clone(),
                why,
            },
            pass: Default::default(),
        };
    }
    decision
}

/// The state to store after `call` was answered with `answer` (an HTTP status, or why there
/// was none): done on 2xx; otherwise one more attempt, retried after 1 s, 2 s, 4 s, … (at most
/// a minute), and past [`ATTEMPTS`] a halt naming the hook, the zone and the last answer.
pub fn record(
    group: &GroupSnapshot,
    call: &HookCall,
    answer: Result<u16, String>,
    now: Timestamp,
) -> Vec<AnnotationWrite> {
    let rollback_on_failure = super::keys::read(group).0.rollback_on_failure;
    record_with(group, rollback_on_failure, call, answer, now)
}

/// [`record`] with the group's `baton.dev/rollback-on-failure` already read.
pub fn record_with(
    group: &GroupSnapshot,
    rollback_on_failure: bool,
    call: &HookCall,
    answer: Result<u16, String>,
    now: Timestamp,
) -> Vec<AnnotationWrite> {
    let mut hooks = ZoneHooks::read(group, &call.statefulset);
    let hook = hooks.phase_mut(call.phase);
    let mut writes = Vec::new();
    match answer {
        Ok(status) if (200..300).contains(&status) => {
            hook.done = true;
            hook.retry_at = None;
            hook.last = Some(format!("HTTP {status}"));
        }
        answer => {
            hook.attempts += 1;
            let last = match answer {
                Ok(status) => format!("HTTP {status}"),
                Err(why) => why,
            };
            let backoff = SignedDuration::from_secs(1 << (hook.attempts - 1).min(6))
                .min(SignedDuration::from_secs(60));
            hook.retry_at = Some(now.saturating_add(backoff).unwrap_or(now).to_string());
            hook.last = Some(last.clone());
            if hook.attempts >= ATTEMPTS {
                let why = format!(
                    "hook {:?} of {} ({}) failed {} times: {last}",
                    call.phase,
                    call.statefulset,
                    super::redact::redact(&call.url),
                    hook.attempts
                );
                hook.attempts = 0;
                hook.retry_at = None;
                // Rolled back instead of halted when the group asks for it.
                if rollback_on_failure {
                    writes.extend(super::rollback::ask(group, &why));
                } else {
                    writes.push(AnnotationWrite {
                        statefulset: call.statefulset.clone(),
                        key: HALTED_ANNOTATION,
                        value: Some(why),
                    });
                }
            }
        }
    }
    writes.push(AnnotationWrite {
        statefulset: call.statefulset.clone(),
        key: HOOK_STATE_ANNOTATION,
        value: Some(serde_json::to_string(&hooks).expect("plain data serialises")),
    });
    writes
}

/// Whether `call` is still due on `fresh`, the zone's StatefulSet as just read: the cache the
/// decision came from may not show a call another pass has just made and recorded.
pub fn still_due(
    fresh: &k8s_openapi::api::apps::v1::StatefulSet,
    call: &HookCall,
    now: Timestamp,
) -> bool {
    let stored = fresh
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(HOOK_STATE_ANNOTATION))
        .and_then(|raw| serde_json::from_str::<ZoneHooks>(raw).ok())
        .filter(|hooks| hooks.revision == call.to_revision);
    let Some(hooks) = stored else {
        return true;
    };
    let hook = hooks.phase(call.phase);
    !hook.done && hook.retry_at().is_none_or(|at| at <= now)
}

/// What a hook answered (an HTTP status, or why there was none), and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookAnswer {
    pub at: Timestamp,
    pub answer: Result<u16, String>,
}

/// What a hook call is about, as the key its answer is kept under: a call for another zone,
/// phase, revision or URL is another call, and an answer is recorded only for its own.
pub fn key(call: &HookCall) -> String {
    format!(
        "{}/{:?}/{}/{}",
        call.statefulset, call.phase, call.to_revision, call.url
    )
}

/// The JSON body of a call (documented in docs/gates.md).
pub fn body(call: &HookCall, group: &str, namespace: &str) -> serde_json::Value {
    serde_json::json!({
        "group": group,
        "namespace": namespace,
        "zone": call.statefulset,
        "phase": call.phase,
        "fromRevision": call.from_revision,
        "toRevision": call.to_revision,
    })
}

#[cfg(test)]
mod tests;
