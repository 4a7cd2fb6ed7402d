//! The one rule by which a rollout group reads a key from its members.
//!
//! Why a rule at all: a group is every StatefulSet carrying its `rollout-group` label, so
//! whoever may create one StatefulSet in the namespace adds a member, with any annotations,
//! without any right on the others (and with 0 replicas it costs nothing to run). A key read for
//! the whole group must therefore never let one member loosen what the others said: one
//! StatefulSet saying `baton.dev/max-rolling-members: "3"` must not roll a group's three zones at
//! once.
//!
//! The rule, once for every group-level key: **the group takes the safest of its members'
//! readings**, a member without the key reading as the key's [`GroupKey::absent`]. Each key says
//! which of two readings is the safer ([`GroupKey::safer`]), and what absence means, so that:
//! - a value that **loosens** the group holds only when every member carries it (absence is the
//!   safest reading), and then the safest carried value;
//! - a value that **tightens** the group counts from any member (absence is the least safe);
//! - two readings neither of which is safer (two different health checks) **hold** the group
//!   until the members agree ([`Combined::disagreeing`]), so no member can choose for the others
//!   by sorting first.
//!
//! A member whose written value was not taken is told ([`Combined::overruled`]; the caller words
//! the Warning, naming the member and the members that do not carry it).
//!
//! Each key's reading, and why (the docs: docs/rollout-guarantees.md, docs/gates.md,
//! docs/security.md):
//!
//! | key | absent reads as | safer | so |
//! |-----|-----------------|-------|----|
//! | `baton.dev/max-rolling-members` | 1 (the zone rule) | the smaller | more than 1 only when every member says so, then the smallest |
//! | `baton.dev/soak` | no soak | the longer | any member lengthens; none shortens |
//! | `baton.dev/ramp` | none | `exponential` | any member ramps |
//! | `baton.dev/batches`, `baton.dev/health-check`, `baton.dev/hook`, `baton.dev/approval` | none | one named over none; two different names: neither | any member adds one; members naming different ones hold the group |
//! | `baton.dev/bypass-gates-until` | no bypass | no bypass, then the earlier | only when every member carries one, until the earliest |
//! | `baton.dev/rollback-on-failure` | `false` (halt) | `false` | only when every member says `true` |
//! | `baton.dev/rollback` (a request) | none | none | only when every member carries one |
//! | `baton.dev/approved` (each step named) | not approved | not approved | a step only when every member names it (`gates::keys::approved`) |
//! | `baton.dev/halted` | not halted | halted | any member halts (`gates::state`) |
//!
//! Per-member keys (`rollout-max-unavailable`, `grafana.com/rollout-paused`,
//! `baton.dev/update-by`) steer only the member that carries them, so a newcomer's own values
//! cost the others nothing; they are not read for the group.

use std::cmp::Ordering;

use crate::rollout::GroupSnapshot;

use super::MAX_ROLLING_MEMBERS_ANNOTATION;

/// `baton.dev/max-rolling-members`: absent is 1, the zone rule and the safest; a larger value
/// holds only when every member carries one, and then the smallest.
pub const MAX_ROLLING_MEMBERS: GroupKey<u32> = GroupKey {
    key: MAX_ROLLING_MEMBERS_ANNOTATION,
    absent: 1,
    safer: smaller_is_safer,
};

/// What a member must do for a value that loosens the group to count: carry it like every other
/// member. One member alone (a StatefulSet someone may create with the group's label, without
/// any right on the others) speaks for nobody.
pub const EVERY_MEMBER_ACCEPTED: &str =
    "the same on every member of the group: one member alone speaks for nobody";
/// What a member naming a check, hook, batches or approvals must do when another member names
/// one: name the same. Members disagreeing would let whichever sorts first (a new member, say)
/// choose for the group.
pub const AGREEING_ACCEPTED: &str =
    "the same value as the other members that set it (the group holds until they agree)";

/// A key read for the whole group: what a member without it reads as, and which of two
/// readings is the safer (module header).
#[derive(Debug, Clone, Copy)]
pub struct GroupKey<T> {
    pub key: &'static str,
    /// What a member without the key reads as.
    pub absent: T,
    /// `Less`: the first reading is the safer; `Equal`: as safe (the same); `None`: neither is
    /// (two different names), and the group holds until the members agree.
    pub safer: fn(&T, &T) -> Option<Ordering>,
}

/// One member's reading of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading<'a, T> {
    pub statefulset: &'a str,
    /// The value as written; `None` when the member does not carry the key.
    pub raw: Option<&'a str>,
    pub value: T,
}

/// The group's reading of a key ([`GroupKey::combine`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combined<'a, T> {
    /// The safest reading (of the first members, where some disagree).
    pub value: T,
    /// Members that wrote a value the group did not take because another reading is safer
    /// (absence included), in member order: each is told.
    pub overruled: Vec<Reading<'a, T>>,
    /// Members whose reading is neither safer nor less safe than the group's (another name):
    /// the group holds until they agree.
    pub disagreeing: Vec<Reading<'a, T>>,
    /// Members whose reading is the group's (absence included), in member order: what holds
    /// the group there, named when a member is told (empty when none carries the key).
    pub holding: Vec<&'a str>,
}

impl<'a, T> Combined<'a, T> {
    /// What a member whose value was not taken is told the group does: `instead`, and which
    /// members hold it there.
    pub fn instead(&self, instead: impl std::fmt::Display) -> String {
        format!("{instead}, held there by {}", self.holding.join(", "))
    }
}

impl<T: Clone> GroupKey<T> {
    /// The group's reading from every member's, in member order (module header): the safest;
    /// the members whose written value lost to a safer reading; those that name something else.
    /// A member's reading is `None` when it does not carry the key, else the value as written
    /// and as read (a value that cannot be read is read as the caller's safe fallback).
    pub fn combine<'a, I>(&self, readings: I) -> Combined<'a, T>
    where
        I: IntoIterator<Item = (&'a str, Option<(&'a str, T)>)>,
    {
        let mut readings = readings.into_iter().peekable();
        if readings.peek().is_none() {
            // No member: what absence means (the common case of a key no member carries,
            // which callers pass as no readings at all; read without allocating).
            return Combined {
                value: self.absent.clone(),
                overruled: Vec::new(),
                disagreeing: Vec::new(),
                holding: Vec::new(),
            };
        }
        let readings: Vec<Reading<'a, T>> = readings
            .map(|(statefulset, carried)| match carried {
                Some((raw, value)) => Reading {
                    statefulset,
                    raw: Some(raw),
                    value,
                },
                None => Reading {
                    statefulset,
                    raw: None,
                    value: self.absent.clone(),
                },
            })
            .collect();
        // The safest reading, the first one met among equals; a reading neither safer nor less
        // safe than it disagrees.
        let mut value: Option<&T> = None;
        let mut disagreeing = Vec::new();
        for reading in &readings {
            match value.map(|value| (self.safer)(&reading.value, value)) {
                None | Some(Some(Ordering::Less)) => value = Some(&reading.value),
                Some(Some(_)) => {}
                Some(None) => disagreeing.push(reading.clone()),
            }
        }
        let value = value.cloned().unwrap_or_else(|| self.absent.clone());
        // Told: each member whose written value is less safe than the group's.
        let overruled = readings
            .iter()
            .filter(|reading| {
                reading.raw.is_some()
                    && (self.safer)(&value, &reading.value) == Some(Ordering::Less)
            })
            .cloned()
            .collect();
        let holding = readings
            .iter()
            .filter(|reading| (self.safer)(&reading.value, &value) == Some(Ordering::Equal))
            .map(|reading| reading.statefulset)
            .collect();
        Combined {
            value,
            overruled,
            disagreeing,
            holding,
        }
    }

    /// [`Self::combine`] over `group`'s members, the value each carries read by `read` (which
    /// reads a value it cannot take as a safe fallback, and the caller tells).
    pub fn of_group<'a>(
        &self,
        group: &'a GroupSnapshot,
        read: impl Fn(&'a str) -> T,
    ) -> Combined<'a, T> {
        if !self.carried_in(group) {
            return self.combine([]);
        }
        self.combine(group.statefulsets.iter().map(|member| {
            let carried = member
                .annotations
                .get(self.key)
                .map(|raw| (raw.as_str(), read(raw.as_str())));
            (member.name.as_str(), carried)
        }))
    }
}

impl<T> GroupKey<T> {
    /// Whether some member of `group` carries the key: without, every reading is
    /// [`GroupKey::absent`], and the group's too (the common case, read without allocating).
    pub fn carried_in(&self, group: &GroupSnapshot) -> bool {
        group
            .statefulsets
            .iter()
            .any(|member| member.annotations.contains_key(self.key))
    }
}

/// The safer of two ordered readings is the smaller (max-rolling-members, a bypass's end).
pub fn smaller_is_safer<T: Ord>(first: &T, second: &T) -> Option<Ordering> {
    Some(first.cmp(second))
}

/// The safer of two ordered readings is the larger (a soak, a ramp).
pub fn larger_is_safer<T: Ord>(first: &T, second: &T) -> Option<Ordering> {
    Some(second.cmp(first))
}

/// A name (a check, a hook, batches, approvals): one named is safer than none, the same name is
/// as safe, two different names are neither (the group holds).
pub fn named_is_safer<T: PartialEq>(first: &Option<T>, second: &Option<T>) -> Option<Ordering> {
    match (first, second) {
        (None, None) => Some(Ordering::Equal),
        (Some(_), None) => Some(Ordering::Less),
        (None, Some(_)) => Some(Ordering::Greater),
        (Some(first), Some(second)) => (first == second).then_some(Ordering::Equal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLLING: GroupKey<u32> = MAX_ROLLING_MEMBERS;

    const NAMED: GroupKey<Option<&'static str>> = GroupKey {
        key: "baton.dev/health-check",
        absent: None,
        safer: named_is_safer,
    };

    #[test]
    fn a_loosening_value_counts_only_when_every_member_carries_it() {
        // One newcomer says 3, the others nothing: the zone rule, and the newcomer is told
        let combined = ROLLING.combine([
            ("zone-a", None),
            ("zone-b", None),
            ("newcomer", Some(("3", 3))),
        ]);
        assert_eq!(combined.value, 1);
        let told: Vec<&str> = combined.overruled.iter().map(|r| r.statefulset).collect();
        assert_eq!(told, ["newcomer"]);
        assert_eq!(combined.instead(1), "1, held there by zone-a, zone-b");
        // Everyone says a value: the smallest, and the member that said more is told
        let combined = ROLLING.combine([("a", Some(("3", 3))), ("b", Some(("2", 2)))]);
        assert_eq!(combined.value, 2);
        assert_eq!(combined.overruled.len(), 1);
        assert_eq!(combined.overruled[0].statefulset, "a");
        // Everyone agrees: nobody is told
        let combined = ROLLING.combine([("a", Some(("2", 2))), ("b", Some(("+2", 2)))]);
        assert_eq!((combined.value, combined.overruled.len()), (2, 0));
        // No member: what absence means
        assert_eq!(ROLLING.combine([]).value, 1);
    }

    #[test]
    fn a_tightening_value_counts_from_any_member_and_names_must_agree() {
        let soak = GroupKey {
            key: "baton.dev/soak",
            absent: 0u32,
            safer: larger_is_safer,
        };
        let combined = soak.combine([("a", None), ("b", Some(("1m", 60))), ("c", None)]);
        assert_eq!((combined.value, combined.overruled.len()), (60, 0));
        let combined = soak.combine([("a", Some(("30s", 30))), ("b", Some(("1m", 60)))]);
        assert_eq!(combined.value, 60);
        assert_eq!(combined.overruled[0].statefulset, "a");

        let combined = NAMED.combine([
            ("a-new", Some(("always-passes", Some("always-passes")))),
            ("b", Some(("errors", Some("errors")))),
            ("c", None),
        ]);
        // The first named stays, the other disagrees: the caller holds the group
        assert_eq!(combined.value, Some("always-passes"));
        let disagreeing: Vec<&str> = combined.disagreeing.iter().map(|r| r.statefulset).collect();
        assert_eq!(disagreeing, ["b"]);
        assert!(combined.overruled.is_empty());
    }
}
