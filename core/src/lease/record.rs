//! Reading and writing the Lease object itself: pure functions from one `Lease` to the next.
//!
//! Every written Lease starts from the one last read or written, so it keeps its
//! `metadata.resourceVersion` and the write is conditional on it.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use super::decide::LeaseRecord;

/// The fields of `lease` the decision reads.
pub fn record_of(lease: &Lease) -> LeaseRecord {
    let spec = lease.spec.as_ref();
    LeaseRecord {
        resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
        holder: spec
            .and_then(|spec| spec.holder_identity.clone())
            .filter(|holder| !holder.is_empty()),
        duration: spec
            .and_then(|spec| spec.lease_duration_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .filter(|seconds| *seconds > 0)
            .map(Duration::from_secs),
    }
}

/// Who holds `lease`, if anyone.
pub fn holder_of(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.as_deref())
        .filter(|holder| !holder.is_empty())
}

/// The Lease held by `me`, renewed at `now`.
///
/// From `base` (the Lease as last seen, keeping its resourceVersion and everything we do not
/// own); a new Lease named `namespace/name` when there is none. Taking it from someone else (or
/// from nobody) sets `acquireTime` and counts a transition; renewing our own keeps both.
pub fn claimed(
    base: Option<&Lease>,
    namespace: &str,
    name: &str,
    me: &str,
    now: Timestamp,
    duration_seconds: i32,
) -> Lease {
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let ours = holder_of(&lease) == Some(me);
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if !ours {
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(match base {
            Some(_) => spec.lease_transitions.unwrap_or(0).saturating_add(1),
            None => 0,
        });
    } else if spec.acquire_time.is_none() {
        spec.acquire_time = Some(MicroTime(now));
    }
    spec.holder_identity = Some(me.to_owned());
    spec.lease_duration_seconds = Some(duration_seconds);
    spec.renew_time = Some(MicroTime(now));
    lease
}

/// `lease` released at `now`: no holder, so a standby takes it at its next look, and a one
/// second duration for anything that still reads durations.
pub fn released(lease: &Lease, now: Timestamp) -> Lease {
    let mut lease = lease.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(now));
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(resource_version: &str, holder: Option<&str>, transitions: i32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("baton".to_owned()),
                namespace: Some("ns".to_owned()),
                resource_version: Some(resource_version.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(15),
                lease_transitions: Some(transitions),
                acquire_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
                renew_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
                ..LeaseSpec::default()
            }),
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    #[test]
    fn record_reads_holder_duration_and_version() {
        assert_eq!(
            record_of(&lease("7", Some("a"), 0)),
            LeaseRecord {
                resource_version: "7".to_owned(),
                holder: Some("a".to_owned()),
                duration: Some(Duration::from_secs(15)),
            }
        );
        let mut empty = lease("8", Some(""), 0);
        empty.spec.as_mut().unwrap().lease_duration_seconds = Some(0);
        assert_eq!(
            record_of(&empty),
            LeaseRecord {
                resource_version: "8".to_owned(),
                holder: None,
                duration: None,
            }
        );
        let no_spec = Lease {
            spec: None,
            ..lease("9", None, 0)
        };
        assert_eq!(record_of(&no_spec).holder, None);
    }

    #[test]
    fn a_new_lease_is_held_by_me_with_no_transition_and_no_version() {
        let new = claimed(None, "ns", "baton", "me", now(), 2);
        assert_eq!(new.metadata.name.as_deref(), Some("baton"));
        assert_eq!(new.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(new.metadata.resource_version, None);
        let spec = new.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_duration_seconds, Some(2));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, Some(MicroTime(now())));
        assert_eq!(spec.renew_time, Some(MicroTime(now())));
    }

    #[test]
    fn taking_over_keeps_the_version_and_counts_a_transition() {
        for previous in [Some("other"), None] {
            let taken = claimed(
                Some(&lease("41", previous, 3)),
                "ns",
                "baton",
                "me",
                now(),
                2,
            );
            assert_eq!(taken.metadata.resource_version.as_deref(), Some("41"));
            let spec = taken.spec.unwrap();
            assert_eq!(spec.holder_identity.as_deref(), Some("me"));
            assert_eq!(spec.lease_transitions, Some(4));
            assert_eq!(spec.acquire_time, Some(MicroTime(now())));
            assert_eq!(spec.renew_time, Some(MicroTime(now())));
        }
    }

    #[test]
    fn renewing_keeps_acquire_time_and_transitions() {
        let renewed = claimed(Some(&lease("5", Some("me"), 3)), "ns", "x", "me", now(), 2);
        assert_eq!(renewed.metadata.resource_version.as_deref(), Some("5"));
        assert_eq!(renewed.metadata.name.as_deref(), Some("baton"));
        let spec = renewed.spec.unwrap();
        assert_eq!(spec.lease_transitions, Some(3));
        assert_eq!(spec.acquire_time, Some(MicroTime(Timestamp::UNIX_EPOCH)));
        assert_eq!(spec.renew_time, Some(MicroTime(now())));
        assert_eq!(spec.lease_duration_seconds, Some(2));
    }

    #[test]
    fn releasing_clears_the_holder_and_keeps_the_version() {
        let release = released(&lease("5", Some("me"), 3), now());
        assert_eq!(release.metadata.resource_version.as_deref(), Some("5"));
        let spec = release.spec.unwrap();
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.lease_transitions, Some(3));
        assert_eq!(
            record_of(&released(&lease("5", Some("me"), 3), now())).holder,
            None
        );
    }
}
