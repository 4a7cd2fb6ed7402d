//! The leader's memory for the status page: per group, since when it has waited for the same
//! kind of reason, the last actions it took, and its rollout over time (the core's
//! [`Timelines`], bounded). The caches say where a group stands, not since when nor what was
//! done; this is the small rest, kept in memory (a new leader starts afresh:
//! its first reconcile of each group records the wait from then on). It lives with the
//! controller, the one that writes it (its reconciles) and reads it (its status page); the
//! core's `baton_core::status::view` turns what it holds into a group's status.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

use baton_core::rollout::GroupSnapshot;
use baton_core::status::{ActionRecord, History, ObservedWait, Timelines, WaitSeen};

/// Actions kept per group.
pub const ACTIONS_KEPT: usize = 10;

/// Per-group history shared by the reconciler (writes) and the ops server (reads). Cheap to
/// clone: clones share one board.
#[derive(Debug, Clone, Default)]
pub struct StatusBoard {
    groups: Arc<Mutex<HashMap<String, Entry>>>,
    /// Apart from `groups`: bounded on its own, and recorded at other moments of a pass.
    timelines: Arc<Mutex<Timelines>>,
}

#[derive(Debug, Default)]
struct Entry {
    waiting: Option<ObservedWait>,
    /// Newest first.
    actions: VecDeque<ActionRecord>,
}

impl StatusBoard {
    /// Records why `group` waits after a reconcile, or that it does not (`None`). Call it once
    /// per reconcile pass of the leader, after planning and gating, with the wait the pass
    /// reports — the gate's `GateWait` if it holds the group, else the planner's `WaitReason` — as `(wait.kind(),
    /// wait.to_string())`.
    ///
    /// The wait's `since` follows [`ObservedWait::after`]: a new message of the same kind keeps
    /// it, another kind or `None` starts afresh.
    pub fn observe(&self, group: &str, waiting: Option<(&'static str, String)>, now: Timestamp) {
        let mut groups = self.lock();
        let entry = groups.entry(group.to_owned()).or_default();
        entry.waiting = ObservedWait::after(entry.waiting.as_ref(), waiting, now);
    }

    /// Records an action the leader took for `group` (a pod deleted, a revision set), right
    /// after the call succeeded; the last [`ACTIONS_KEPT`] are kept.
    pub fn record_action(&self, group: &str, action: ActionRecord) {
        let mut groups = self.lock();
        let actions = &mut groups.entry(group.to_owned()).or_default().actions;
        actions.push_front(action);
        actions.truncate(ACTIONS_KEPT);
    }

    /// Records that the leader deleted `pod` (uid `uid`) of `statefulset` to replace it, right
    /// after the call succeeded: the replacement's span starts.
    pub fn deleted(&self, group: &str, statefulset: &str, pod: &str, uid: &str, at: Timestamp) {
        self.lock_timelines()
            .deleted(group, statefulset, pod, uid, at);
    }

    /// Records what one pass of the leader saw of a group for its timeline: the snapshot it
    /// decided on and the wait it reports (see [`Timelines::observe`]).
    pub fn trace(&self, snapshot: &GroupSnapshot, waiting: Option<WaitSeen>, now: Timestamp) {
        self.lock_timelines().observe(snapshot, waiting, now);
    }

    /// Records that a rollback of `group` started, with `statefulset` first, because `why`.
    pub fn rollback_started(&self, group: &str, statefulset: &str, why: &str, at: Timestamp) {
        self.lock_timelines()
            .rollback(group, Some(statefulset), why, at);
    }

    /// Forgets `group` (its last StatefulSet is gone).
    pub fn forget(&self, group: &str) {
        self.lock().remove(group);
        self.lock_timelines().forget(group);
    }

    /// What was recorded about `group`, if anything.
    pub fn history(&self, group: &str) -> Option<History> {
        let groups = self.lock();
        let entry = groups.get(group)?;
        Some(History {
            waiting: entry.waiting.clone(),
            actions: entry.actions.iter().cloned().collect(),
            timeline: self.lock_timelines().timeline(group),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock leaves plain data behind: still fine to read.
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Taken alone, or after [`Self::lock`] (never the other way round).
    fn lock_timelines(&self) -> std::sync::MutexGuard<'_, Timelines> {
        self.timelines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;

    use super::*;

    fn at(minutes: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000).expect("valid time")
            + SignedDuration::from_mins(minutes)
    }

    fn deleted(pod: &str, minutes: i64) -> ActionRecord {
        ActionRecord {
            at: at(minutes),
            action: "DeletePod".to_owned(),
            statefulset: "b".to_owned(),
            pod: Some(pod.to_owned()),
            note: format!("deleted pod {pod}"),
        }
    }

    #[test]
    fn a_wait_of_the_same_kind_keeps_its_start_another_kind_restarts_it() {
        let board = StatusBoard::default();
        board.observe("g", Some(("NotReady", "b-0 not ready".to_owned())), at(0));
        board.observe("g", Some(("NotReady", "b-1 not ready".to_owned())), at(3));
        let waiting = board.history("g").and_then(|h| h.waiting).expect("waits");
        assert_eq!((waiting.kind, waiting.since), ("NotReady", at(0)));
        assert_eq!(waiting.message, "b-1 not ready", "the latest message");

        board.observe("g", Some(("Soak", "soaking".to_owned())), at(5));
        let waiting = board.history("g").and_then(|h| h.waiting).expect("waits");
        assert_eq!((waiting.kind, waiting.since), ("Soak", at(5)));

        board.observe("g", None, at(6));
        board.observe("g", Some(("Soak", "soaking".to_owned())), at(7));
        let waiting = board.history("g").and_then(|h| h.waiting).expect("waits");
        assert_eq!(waiting.since, at(7), "an interruption starts afresh");
    }

    #[test]
    fn keeps_the_last_ten_actions_newest_first_per_group_until_forgotten() {
        let board = StatusBoard::default();
        for minute in 0..12 {
            board.record_action("g", deleted(&format!("b-{minute}"), minute));
        }
        board.record_action("other", deleted("x-0", 0));
        let actions = board.history("g").expect("recorded").actions;
        assert_eq!(actions.len(), ACTIONS_KEPT);
        assert_eq!(actions[0].pod.as_deref(), Some("b-11"));
        assert_eq!(actions[9].pod.as_deref(), Some("b-2"));

        board.forget("g");
        assert_eq!(board.history("g"), None);
        assert!(board.history("other").is_some(), "other groups stay");
    }

    #[test]
    fn the_timeline_is_part_of_the_history_until_the_group_is_forgotten() {
        let board = StatusBoard::default();
        let snapshot = baton_core::rollout::GroupSnapshot {
            name: "g".to_owned(),
            statefulsets: Vec::new(),
            reach: Default::default(),
        };
        board.observe("g", Some(("Paused", "paused".to_owned())), at(0));
        board.deleted("g", "b", "b-0", "uid-b-0", at(1));
        let halted = WaitSeen {
            kind: "Halted",
            statefulset: Some("b".to_owned()),
            message: "halted at b".to_owned(),
            halts: true,
        };
        board.trace(&snapshot, Some(halted), at(2));
        board.rollback_started("g", "b", "errors", at(3));
        let timeline = board
            .history("g")
            .and_then(|history| history.timeline)
            .expect("recorded");
        let kinds: Vec<&str> = timeline
            .spans
            .iter()
            .map(|span| span.kind.as_str())
            .collect();
        assert_eq!(kinds, ["replacement", "wait"]);
        let marks: Vec<&str> = timeline
            .marks
            .iter()
            .map(|mark| mark.kind.as_str())
            .collect();
        assert_eq!(marks, ["halt", "rollback"]);

        board.forget("g");
        board.observe("g", Some(("Paused", "paused".to_owned())), at(4));
        let history = board.history("g").expect("observed again");
        assert_eq!(history.timeline, None, "forgotten with the rest");
    }

    #[test]
    fn clones_share_one_board() {
        let board = StatusBoard::default();
        board
            .clone()
            .observe("g", Some(("Paused", "paused".to_owned())), at(0));
        assert!(board.history("g").and_then(|h| h.waiting).is_some());
    }
}
