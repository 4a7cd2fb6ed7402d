//! Checks the rollout guarantees of docs/compatibility.md against the pod timeline the simulator
//! recorded: a replay of every pod transition, as the API server's watch delivered them.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use crate::pod_simulator::{PodEvent, PodTransition};

/// How far apart two watchers of the same API server may see one change under load: the
/// timeline is the pod simulator's own watch, and baton acts on its own. A gap between what
/// baton saw (a pod turning Ready) and what it did about it (the next deletion), measured on
/// the timeline, may look this much shorter than baton's own: assertions about such gaps (a
/// soak, a check's interval) allow it, and stay far below what they check.
pub const WATCH_SKEW: std::time::Duration = std::time::Duration::from_millis(250);

/// One StatefulSet of the group under test.
#[derive(Debug, Clone)]
pub struct Zone {
    pub statefulset: String,
    pub replicas: u32,
    pub max_unavailable: u32,
}

impl Zone {
    pub fn new(statefulset: &str, replicas: u32, max_unavailable: u32) -> Self {
        Self {
            statefulset: statefulset.to_owned(),
            replicas,
            max_unavailable,
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct PodState {
    ready: bool,
    terminating: bool,
}

/// What `event` makes of pod `uid` among one zone's `pods`, by uid.
fn replay<'a>(pods: &mut HashMap<&'a str, PodState>, uid: &'a str, event: PodEvent) {
    match event {
        PodEvent::Created => {
            pods.insert(uid, PodState::default());
        }
        PodEvent::Ready => pods.entry(uid).or_default().ready = true,
        PodEvent::NotReady => pods.entry(uid).or_default().ready = false,
        PodEvent::Terminating => pods.entry(uid).or_default().terminating = true,
        PodEvent::Deleted => {
            pods.remove(uid);
        }
    }
}

/// Replays `timeline` and checks, at every transition at or after `from` (when every zone was
/// Ready and baton alone could make pods unavailable):
/// - at most one zone has unavailable pods at a time;
/// - a zone never has more than its max-unavailable pods unavailable;
/// - a pod is deleted only while every other zone is fully available.
///
/// Unavailable = missing against replicas, not ready, or terminating.
pub fn check_rollout_guarantees(
    timeline: &[PodTransition],
    zones: &[Zone],
    from: Instant,
) -> Result<(), String> {
    check_rolling_at_most(timeline, zones, from, 1).map(|_| ())
}

/// As [`check_rollout_guarantees`] for a group with `baton.dev/max-rolling-members:
/// max_rolling`: at most that many zones have unavailable pods at a time, and a pod is deleted
/// only while fewer than that many other zones have. Returns the most zones seen unavailable at
/// once, so a test can show they overlapped.
pub fn check_rolling_at_most(
    timeline: &[PodTransition],
    zones: &[Zone],
    from: Instant,
    max_rolling: usize,
) -> Result<usize, String> {
    let mut most = 0;
    let mut pods: HashMap<String, (String, PodState)> = HashMap::new();
    let unavailable = |pods: &HashMap<String, (String, PodState)>| -> BTreeMap<String, u32> {
        zones
            .iter()
            .map(|zone| {
                let available = pods
                    .values()
                    .filter(|(owner, state)| {
                        *owner == zone.statefulset && state.ready && !state.terminating
                    })
                    .count() as u32;
                (
                    zone.statefulset.clone(),
                    zone.replicas.saturating_sub(available),
                )
            })
            .collect()
    };
    for (index, transition) in timeline.iter().enumerate() {
        let Some(owner) = transition.statefulset.clone() else {
            continue;
        };
        if !zones.iter().any(|zone| zone.statefulset == owner) {
            continue;
        }
        let checking = transition.at >= from;
        let leaving = match transition.event {
            PodEvent::Terminating => true,
            PodEvent::Deleted => !pods
                .get(&transition.uid)
                .is_some_and(|(_, state)| state.terminating),
            _ => false,
        };
        if checking && leaving {
            let before = unavailable(&pods);
            let others: Vec<_> = before
                .iter()
                .filter(|(zone, count)| **zone != owner && **count > 0)
                .collect();
            if others.len() >= max_rolling {
                return Err(format!(
                    "transition {index}: pod {} of {owner} was deleted while other zones had unavailable pods: {others:?}",
                    transition.pod
                ));
            }
        }
        match transition.event {
            PodEvent::Created => {
                pods.insert(transition.uid.clone(), (owner.clone(), PodState::default()));
            }
            PodEvent::Ready | PodEvent::NotReady | PodEvent::Terminating => {
                if let Some((_, state)) = pods.get_mut(&transition.uid) {
                    match transition.event {
                        PodEvent::Ready => state.ready = true,
                        PodEvent::NotReady => state.ready = false,
                        _ => state.terminating = true,
                    }
                }
            }
            PodEvent::Deleted => {
                pods.remove(&transition.uid);
            }
        }
        if !checking {
            continue;
        }
        let after = unavailable(&pods);
        let degraded: Vec<_> = after.iter().filter(|(_, count)| **count > 0).collect();
        most = most.max(degraded.len());
        if degraded.len() > max_rolling {
            return Err(format!(
                "transition {index} ({:?} {}): several zones unavailable at once: {degraded:?}",
                transition.event, transition.pod
            ));
        }
        for zone in zones {
            let count = after[&zone.statefulset];
            if count > zone.max_unavailable {
                return Err(format!(
                    "transition {index} ({:?} {}): {} has {count} unavailable pods, max-unavailable is {}",
                    transition.event, transition.pod, zone.statefulset, zone.max_unavailable
                ));
            }
        }
    }
    Ok(most)
}

/// When one zone's rollout started and completed, as the timeline shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneWindow {
    /// Its first pod leaving (terminating, or deleted) at or after `from`.
    pub started: Option<Instant>,
    /// The first moment at or after `from` when `replicas` of its pods created after `from`
    /// are Ready and none is terminating: every pod replaced and available.
    pub completed: Option<Instant>,
}

/// Each zone's [`ZoneWindow`] from `from` on (the zones' template changes): to check what
/// happens *between* zones, e.g. a soak.
pub fn zone_windows(
    timeline: &[PodTransition],
    zones: &[Zone],
    from: Instant,
) -> BTreeMap<String, ZoneWindow> {
    let mut windows: BTreeMap<String, ZoneWindow> = zones
        .iter()
        .map(|zone| {
            let window = ZoneWindow {
                started: None,
                completed: None,
            };
            (zone.statefulset.clone(), window)
        })
        .collect();
    // uid → (zone, created after `from`, state)
    let mut pods: HashMap<String, (String, bool, PodState)> = HashMap::new();
    for transition in timeline {
        let Some(owner) = transition.statefulset.clone() else {
            continue;
        };
        let Some(zone) = zones.iter().find(|zone| zone.statefulset == owner) else {
            continue;
        };
        let after = transition.at >= from;
        match transition.event {
            PodEvent::Created => {
                pods.insert(
                    transition.uid.clone(),
                    (owner.clone(), after, PodState::default()),
                );
            }
            PodEvent::Ready => set(&mut pods, &transition.uid, |state| state.ready = true),
            PodEvent::NotReady => set(&mut pods, &transition.uid, |state| state.ready = false),
            PodEvent::Terminating => {
                set(&mut pods, &transition.uid, |state| state.terminating = true);
            }
            PodEvent::Deleted => {
                pods.remove(&transition.uid);
            }
        }
        let window = windows.get_mut(&owner).expect("one window per zone");
        let leaving = matches!(transition.event, PodEvent::Terminating | PodEvent::Deleted);
        if after && leaving && window.started.is_none() {
            window.started = Some(transition.at);
        }
        let replaced = pods
            .values()
            .filter(|(pod_zone, new, state)| {
                *pod_zone == owner && *new && state.ready && !state.terminating
            })
            .count();
        if after && window.completed.is_none() && replaced as u32 >= zone.replicas {
            window.completed = Some(transition.at);
        }
    }
    windows
}

/// The sizes of `zone`'s deletion batches from `from` on: a batch starts with a pod leaving
/// (terminating, or deleted) while every one of the zone's replicas is Ready, and takes every
/// pod leaving until that is true again. A ramp of 1, 2, 4 reads `[1, 2, 4]`. (The watch
/// delivers a pod's Ready before a later deletion baton decided on seeing it.)
pub fn deletion_batches(timeline: &[PodTransition], zone: &Zone, from: Instant) -> Vec<usize> {
    let mut batches: Vec<usize> = Vec::new();
    // uid → state, for the zone's pods
    let mut pods: HashMap<&str, PodState> = HashMap::new();
    let mut leaving: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for transition in timeline {
        if transition.statefulset.as_deref() != Some(zone.statefulset.as_str()) {
            continue;
        }
        let uid = transition.uid.as_str();
        let available = pods
            .values()
            .filter(|state| state.ready && !state.terminating)
            .count() as u32;
        let leaves = matches!(transition.event, PodEvent::Terminating | PodEvent::Deleted);
        if transition.at >= from && leaves && leaving.insert(uid) {
            if available >= zone.replicas || batches.is_empty() {
                batches.push(0);
            }
            *batches.last_mut().expect("a batch is open") += 1;
        }
        replay(&mut pods, uid, transition.event);
    }
    batches
}

/// The most pods of `zone` unavailable (missing, not ready or terminating) at once from `from`
/// on: with [`deletion_batches`], a lower bound on how much of its max-unavailable a rollout used.
pub fn most_unavailable(timeline: &[PodTransition], zone: &Zone, from: Instant) -> u32 {
    let mut pods: HashMap<&str, PodState> = HashMap::new();
    let mut most = 0;
    for transition in timeline {
        if transition.statefulset.as_deref() != Some(zone.statefulset.as_str()) {
            continue;
        }
        let uid = transition.uid.as_str();
        replay(&mut pods, uid, transition.event);
        if transition.at >= from {
            let available = pods
                .values()
                .filter(|state| state.ready && !state.terminating)
                .count() as u32;
            most = most.max(zone.replicas.saturating_sub(available));
        }
    }
    most
}

fn set(
    pods: &mut HashMap<String, (String, bool, PodState)>,
    uid: &str,
    change: impl FnOnce(&mut PodState),
) {
    if let Some((_, _, state)) = pods.get_mut(uid) {
        change(state);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    struct Recorder {
        start: Instant,
        timeline: Vec<PodTransition>,
    }

    impl Recorder {
        fn new() -> Self {
            Self {
                start: Instant::now(),
                timeline: Vec::new(),
            }
        }
        fn push(&mut self, statefulset: &str, pod: &str, uid: &str, event: PodEvent) {
            let at = self.start + Duration::from_millis(self.timeline.len() as u64 + 1);
            self.timeline.push(PodTransition {
                at,
                pod: pod.to_owned(),
                uid: uid.to_owned(),
                statefulset: Some(statefulset.to_owned()),
                revision: None,
                event,
            });
        }
        fn ready_pod(&mut self, statefulset: &str, ordinal: u32, uid: &str) {
            let pod = format!("{statefulset}-{ordinal}");
            self.push(statefulset, &pod, uid, PodEvent::Created);
            self.push(statefulset, &pod, uid, PodEvent::Ready);
        }
    }

    fn two_zones() -> (Recorder, Vec<Zone>) {
        let mut recorder = Recorder::new();
        for zone in ["a", "b"] {
            for ordinal in 0..2 {
                recorder.ready_pod(&format!("z-{zone}"), ordinal, &format!("{zone}{ordinal}"));
            }
        }
        (
            recorder,
            vec![Zone::new("z-a", 2, 1), Zone::new("z-b", 2, 1)],
        )
    }

    #[test]
    fn a_zone_by_zone_rollout_passes() {
        let (mut r, zones) = two_zones();
        let from = r.timeline.last().unwrap().at + Duration::from_micros(1);
        for zone in ["a", "b"] {
            for ordinal in 0..2 {
                let sts = format!("z-{zone}");
                r.push(
                    &sts,
                    &format!("{sts}-{ordinal}"),
                    &format!("{zone}{ordinal}"),
                    PodEvent::Deleted,
                );
                r.ready_pod(&sts, ordinal, &format!("{zone}{ordinal}-new"));
            }
        }
        check_rollout_guarantees(&r.timeline, &zones, from).unwrap();
    }

    #[test]
    fn two_zones_down_at_once_is_caught() {
        let (mut r, zones) = two_zones();
        let from = r.timeline.last().unwrap().at + Duration::from_micros(1);
        r.push("z-a", "z-a-0", "a0", PodEvent::Deleted);
        r.push("z-b", "z-b-0", "b0", PodEvent::Deleted);
        let error = check_rollout_guarantees(&r.timeline, &zones, from).unwrap_err();
        assert!(
            error.contains("while other zones had unavailable pods: [(\"z-a\", 1)]"),
            "{error}"
        );
        // With two rolling members, the same two zones down at once are allowed
        let most = check_rolling_at_most(&r.timeline, &zones, from, 2).unwrap();
        assert_eq!(most, 2);
    }

    #[test]
    fn exceeding_max_unavailable_is_caught() {
        let (mut r, zones) = two_zones();
        let from = r.timeline.last().unwrap().at + Duration::from_micros(1);
        r.push("z-a", "z-a-0", "a0", PodEvent::Deleted);
        r.push("z-a", "z-a-1", "a1", PodEvent::Deleted);
        let error = check_rollout_guarantees(&r.timeline, &zones, from).unwrap_err();
        assert!(error.contains("max-unavailable is 1"), "{error}");
    }

    #[test]
    fn transitions_before_the_check_starts_only_build_state() {
        let mut r = Recorder::new();
        r.push("z-a", "z-a-0", "a0", PodEvent::Created);
        r.push("z-b", "z-b-0", "b0", PodEvent::Created);
        r.push("z-a", "z-a-0", "a0", PodEvent::Ready);
        r.push("z-b", "z-b-0", "b0", PodEvent::Ready);
        let from = r.timeline.last().unwrap().at + Duration::from_millis(1);
        let zones = [Zone::new("z-a", 1, 1), Zone::new("z-b", 1, 1)];
        check_rollout_guarantees(&r.timeline, &zones, from).unwrap();
    }

    #[test]
    fn zone_windows_show_when_each_zone_started_and_completed() {
        let (mut r, zones) = two_zones();
        let from = r.timeline.last().unwrap().at + Duration::from_micros(1);
        for zone in ["a", "b"] {
            for ordinal in 0..2 {
                let sts = format!("z-{zone}");
                let pod = format!("{sts}-{ordinal}");
                r.push(
                    &sts,
                    &pod,
                    &format!("{zone}{ordinal}"),
                    PodEvent::Terminating,
                );
                r.push(&sts, &pod, &format!("{zone}{ordinal}"), PodEvent::Deleted);
                r.ready_pod(&sts, ordinal, &format!("{zone}{ordinal}-new"));
            }
        }
        let at = |index: usize| r.timeline[index].at;
        let windows = zone_windows(&r.timeline, &zones, from);
        // 8 transitions of set-up, then 4 per pod: terminating, deleted, created, ready.
        assert_eq!(
            windows["z-a"],
            ZoneWindow {
                started: Some(at(8)),
                completed: Some(at(15)),
            }
        );
        assert_eq!(
            windows["z-b"],
            ZoneWindow {
                started: Some(at(16)),
                completed: Some(at(23)),
            }
        );
    }

    #[test]
    fn deletion_batches_start_when_the_zone_is_fully_ready() {
        let mut r = Recorder::new();
        for ordinal in 0..4 {
            r.ready_pod("z-a", ordinal, &format!("a{ordinal}"));
        }
        let from = r.timeline.last().unwrap().at + Duration::from_micros(1);
        r.push("z-a", "z-a-0", "a0", PodEvent::Terminating);
        r.push("z-a", "z-a-0", "a0", PodEvent::Deleted);
        r.ready_pod("z-a", 0, "a0-new");
        r.push("z-a", "z-a-1", "a1", PodEvent::Terminating);
        r.push("z-a", "z-a-2", "a2", PodEvent::Terminating);
        r.push("z-a", "z-a-1", "a1", PodEvent::Deleted);
        // a replacement is ready before the batch's last pod goes: still one batch
        r.ready_pod("z-a", 1, "a1-new");
        r.push("z-a", "z-a-3", "a3", PodEvent::Terminating);
        for ordinal in [2, 3] {
            let pod = format!("z-a-{ordinal}");
            r.push("z-a", &pod, &format!("a{ordinal}"), PodEvent::Deleted);
            r.ready_pod("z-a", ordinal, &format!("a{ordinal}-new"));
        }
        let zone = Zone::new("z-a", 4, 3);
        assert_eq!(deletion_batches(&r.timeline, &zone, from), vec![1, 3]);
        let other = Zone::new("z-b", 4, 3);
        assert_eq!(
            deletion_batches(&r.timeline, &other, from),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn most_unavailable_counts_missing_not_ready_and_terminating_pods_from_the_start_on() {
        let mut r = Recorder::new();
        for ordinal in 0..3 {
            r.ready_pod("z-a", ordinal, &format!("a{ordinal}"));
        }
        // a pod down before the check starts counts only while still down after it
        r.push("z-a", "z-a-0", "a0", PodEvent::NotReady);
        r.push("z-a", "z-a-0", "a0", PodEvent::Ready);
        let from = r.timeline.last().unwrap().at + Duration::from_micros(1);
        let zone = Zone::new("z-a", 3, 2);
        assert_eq!(most_unavailable(&r.timeline, &zone, from), 0);
        r.push("z-a", "z-a-1", "a1", PodEvent::Terminating);
        r.push("z-a", "z-a-2", "a2", PodEvent::NotReady);
        r.push("z-a", "z-a-1", "a1", PodEvent::Deleted);
        r.ready_pod("z-a", 1, "a1-new");
        r.push("z-a", "z-a-2", "a2", PodEvent::Ready);
        assert_eq!(most_unavailable(&r.timeline, &zone, from), 2);
        let other = Zone::new("z-b", 3, 2);
        assert_eq!(most_unavailable(&r.timeline, &other, from), 0);
    }
}
