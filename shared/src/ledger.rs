//! Claims in ledgers (`baton_core::ledger`) through the API server: reading a record, the
//! conditional write, and the one claim loop every racing writer uses.
//!
//! Why: webhook replicas share nothing in memory, so "no other zone was downscaled within its
//! min-time" must be judged and claimed atomically through the API server. Every claim is a
//! write conditioned on the resourceVersion the judgement was made on (create-if-absent for
//! the first one), so of two replicas judging the same ledger only one can write; the other
//! gets 409, re-reads and is judged again against the winner's claim.

use std::collections::BTreeMap;

use baton_core::annotations::ROLLOUT_GROUP_LABEL;
pub use baton_core::ledger::{CLAIM_ATTEMPTS, Written};
use baton_core::ledger::{Judged, Ledger, MANAGED_BY_LABEL};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Error};

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}", crate::pod_client::error_chain(.0))]
    Api(#[from] Error),
    /// A ConfigMap has the record's name but not baton's label: someone else made it (deleted
    /// baton's and created their own, say). Read as a record, its entries would be a forgery;
    /// ignored, the history it replaced would be lost. Neither: it is an error until removed.
    #[error(
        "ConfigMap {name} is not one of baton's records (it lacks the label \
         {MANAGED_BY_LABEL}=baton): someone else made it, and it is not read; delete it so baton \
         can keep its record there"
    )]
    NotBatons { name: String },
}

/// Reads the ledger; a missing ConfigMap is an empty ledger, one without baton's label an
/// error ([`ReadError::NotBatons`]).
pub async fn read(api: &Api<ConfigMap>, name: &str) -> Result<Ledger, ReadError> {
    let Some(config_map) = api.get_opt(name).await? else {
        return Ok(Ledger::default());
    };
    let batons = config_map
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(MANAGED_BY_LABEL))
        .is_some_and(|value| value == "baton");
    if !batons {
        return Err(ReadError::NotBatons {
            name: name.to_owned(),
        });
    }
    Ok(Ledger::from_config_map(config_map))
}

/// Writes `ledger` if nobody else wrote since it was read: a replace conditioned on its
/// resourceVersion, or a create when it did not exist.
pub async fn write(
    api: &Api<ConfigMap>,
    name: &str,
    group: &str,
    ledger: &Ledger,
) -> Result<Written, Error> {
    write_labelled(api, name, (ROLLOUT_GROUP_LABEL, group), ledger).await
}

/// [`write()`] for any ledger: labelled managed-by baton and with `label` (what it belongs to).
/// The zone-aware disruption budgets' eviction records use it too.
pub async fn write_labelled(
    api: &Api<ConfigMap>,
    name: &str,
    label: (&str, &str),
    ledger: &Ledger,
) -> Result<Written, Error> {
    let mut labels = BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), "baton".to_owned())]);
    labels.insert(label.0.to_owned(), label.1.to_owned());
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            resource_version: ledger.resource_version.clone(),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        data: Some(ledger.data.clone()),
        ..ConfigMap::default()
    };
    let result = match &ledger.resource_version {
        None => api.create(&PostParams::default(), &config_map).await,
        Some(_) => api.replace(name, &PostParams::default(), &config_map).await,
    };
    match result {
        Ok(written) => Ok(Written::Done(Ledger::from_config_map(written))),
        // 409 is both "AlreadyExists" (lost the create race) and "Conflict" (stale version).
        Err(Error::Api(status)) if status.code == 409 => Ok(Written::Conflict),
        Err(error) => Err(error),
    }
}

/// Why a claim ended without a decision.
#[derive(Debug)]
pub enum ClaimError<E> {
    /// A read or a write failed.
    Failed(E),
    /// Others wrote first [`CLAIM_ATTEMPTS`] times.
    Contended,
}

/// The one way baton claims something in a record that replicas race for (an eviction, a pod
/// deletion, a downscale): read the record, judge it, store the claim conditioned on the
/// version read; when another writer was first, read again and judge again, at most
/// [`CLAIM_ATTEMPTS`] times. `read` gives the record and whether it is fresh (a copy kept from
/// an earlier request is not); `judge` sees both; `store` writes a claimed record.
pub async fn claim<T, E, Read, ReadFuture, Store, StoreFuture>(
    mut read: Read,
    mut judge: impl FnMut(&Ledger, bool) -> Judged<T>,
    mut store: Store,
) -> Result<T, ClaimError<E>>
where
    Read: FnMut() -> ReadFuture,
    ReadFuture: std::future::Future<Output = Result<(Ledger, bool), E>>,
    Store: FnMut(Ledger) -> StoreFuture,
    StoreFuture: std::future::Future<Output = Result<Written, E>>,
{
    for _ in 0..CLAIM_ATTEMPTS {
        let (record, fresh) = read().await.map_err(ClaimError::Failed)?;
        match judge(&record, fresh) {
            Judged::Settled(decided) => return Ok(decided),
            Judged::ReadAgain => {}
            Judged::Claim(claimed, decided) => {
                match store(claimed).await.map_err(ClaimError::Failed)? {
                    Written::Done(_) => return Ok(decided),
                    Written::Conflict => {}
                }
            }
        }
    }
    Err(ClaimError::Contended)
}

#[cfg(test)]
mod tests {
    use super::*;

    mod claiming {
        use std::cell::Cell;

        use super::*;

        fn record(version: &str) -> Ledger {
            Ledger {
                resource_version: Some(version.to_owned()),
                data: BTreeMap::new(),
            }
        }

        /// `claim` against a record others write `conflicts` times before it is stored.
        async fn against(
            conflicts: usize,
            judged: impl Fn(bool) -> Judged<&'static str>,
        ) -> (Result<&'static str, ClaimError<()>>, usize, usize) {
            let (reads, stores) = (Cell::new(0), Cell::new(0));
            let result = claim(
                || {
                    reads.set(reads.get() + 1);
                    // The first copy is one kept from before; later ones are fresh reads.
                    std::future::ready(Ok::<_, ()>((record("1"), reads.get() > 1)))
                },
                |_, fresh| judged(fresh),
                |_| {
                    stores.set(stores.get() + 1);
                    let written = if stores.get() > conflicts {
                        Written::Done(record("2"))
                    } else {
                        Written::Conflict
                    };
                    std::future::ready(Ok(written))
                },
            )
            .await;
            (result, reads.get(), stores.get())
        }

        #[tokio::test]
        async fn a_lost_race_is_judged_again_on_a_new_read() {
            let claiming = |_| Judged::Claim(record("1"), "claimed");
            let (result, reads, stores) = against(2, claiming).await;
            assert_eq!(result.ok(), Some("claimed"));
            assert_eq!((reads, stores), (3, 3));
        }

        #[tokio::test]
        async fn a_record_that_keeps_changing_ends_the_claim_after_the_attempts() {
            let claiming = |_| Judged::Claim(record("1"), "claimed");
            let (result, reads, stores) = against(usize::MAX, claiming).await;
            assert!(matches!(result, Err(ClaimError::Contended)));
            assert_eq!((reads, stores), (CLAIM_ATTEMPTS, CLAIM_ATTEMPTS));
        }

        #[tokio::test]
        async fn a_stale_copy_is_read_again_and_a_settled_judgement_writes_nothing() {
            let refusing = |fresh| {
                if fresh {
                    Judged::Settled("refused")
                } else {
                    Judged::ReadAgain
                }
            };
            let (result, reads, stores) = against(0, refusing).await;
            assert_eq!(result.ok(), Some("refused"));
            assert_eq!((reads, stores), (2, 0));
        }

        #[tokio::test]
        async fn a_failed_read_ends_the_claim() {
            let result: Result<(), ClaimError<&str>> = claim(
                || std::future::ready(Err("unreachable API server")),
                |_, _| Judged::Settled(()),
                |_| std::future::ready(Ok(Written::Conflict)),
            )
            .await;
            assert!(matches!(
                result,
                Err(ClaimError::Failed("unreachable API server"))
            ));
        }
    }
}
