//! The bytes of request bodies held at once (`webhook.max_inflight_request_bytes`), so that
//! many large requests arriving together cannot take more memory than that.
//!
//! A body's share is taken before it is read (its declared length), so a client that announces
//! a large body and sends it slowly holds that share until its deadline (the server's
//! `webhook.read_timeout`). A deadline alone does not keep a determined client out: it opens
//! the next stalled request as soon as one is cut off. So one client address holds at most a
//! quarter of the budget ([`client_share`]): a client stalling its bodies leaves three quarters
//! to the others, the API server among them. The API server's own reviews, sent at once and
//! small, are slowed by its share only when it has that many bytes in flight itself.
//!
//! Connections authenticated by the API server's client CA (`webhook.client_ca_file`) are all
//! the API server's (the handshake refused every other): then there is one client, and it has
//! the whole budget.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget, in KiB permits, and what each client address holds of it.
#[derive(Debug)]
pub struct BodyBudget {
    total: Arc<Semaphore>,
    /// KiB one client address may hold; `None`: no share per client.
    client_share: Option<u32>,
    /// Each client address's share, while one of its requests holds or waits for it.
    clients: Mutex<HashMap<IpAddr, Arc<Semaphore>>>,
}

/// A request's part of the budget; given back when dropped, whatever ended the request.
#[derive(Debug)]
pub struct BodyPermit {
    _total: OwnedSemaphorePermit,
    _client: Option<OwnedSemaphorePermit>,
}

/// What one client address may hold of `total` KiB when bodies are at most `largest` KiB: a
/// quarter, but never less than one largest body.
pub fn client_share(total: u32, largest: u32) -> u32 {
    (total / 4).max(largest).min(total)
}

impl BodyBudget {
    /// `total` KiB, shared by client address (a quarter each) unless `clients_authenticated`.
    pub fn new(total: u32, largest: u32, clients_authenticated: bool) -> Self {
        let total = total.clamp(1, u32::try_from(Semaphore::MAX_PERMITS).unwrap_or(u32::MAX));
        Self {
            total: Arc::new(Semaphore::new(total as usize)),
            client_share: (!clients_authenticated).then(|| client_share(total, largest)),
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// Waits until `kib` fit in `client`'s share (when shared by client) and in the budget.
    /// The caller bounds the wait: dropping the future gives back whatever it took.
    pub async fn acquire(&self, client: Option<IpAddr>, kib: u32) -> BodyPermit {
        let client_permit = match (self.client_share, client) {
            (Some(share), Some(address)) => {
                let semaphore = self.share_of(address, share);
                Some(acquire(semaphore, kib.min(share)).await)
            }
            _ => None,
        };
        BodyPermit {
            _total: acquire(self.total.clone(), kib).await,
            _client: client_permit,
        }
    }

    /// `address`'s share, made when it has none; shares nobody holds or waits for are dropped
    /// here (under the lock that hands them out, so none is dropped while being handed out).
    fn share_of(&self, address: IpAddr, share: u32) -> Arc<Semaphore> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        clients.retain(|_, semaphore| Arc::strong_count(semaphore) > 1);
        clients
            .entry(address)
            .or_insert_with(|| Arc::new(Semaphore::new(share as usize)))
            .clone()
    }

    /// How many client addresses hold or wait for a share now.
    pub fn clients(&self) -> usize {
        self.clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|semaphore| Arc::strong_count(semaphore) > 1)
            .count()
    }

    /// KiB of the budget not held by any request.
    pub fn available(&self) -> usize {
        self.total.available_permits()
    }
}

async fn acquire(semaphore: Arc<Semaphore>, kib: u32) -> OwnedSemaphorePermit {
    semaphore
        .acquire_many_owned(kib)
        .await
        .expect("the budget's semaphores are never closed")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn address(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    async fn within(
        time: Duration,
        permit: impl std::future::Future<Output = BodyPermit>,
    ) -> Option<BodyPermit> {
        tokio::time::timeout(time, permit).await.ok()
    }

    #[test]
    fn a_share_is_a_quarter_never_less_than_one_largest_body_nor_more_than_all() {
        assert_eq!(client_share(24 * 1024, 3 * 1024), 6 * 1024);
        assert_eq!(client_share(8 * 1024, 3 * 1024), 3 * 1024);
        assert_eq!(client_share(3 * 1024, 3 * 1024), 3 * 1024);
        assert_eq!(client_share(4, 8), 4);
    }

    #[tokio::test]
    async fn a_client_holding_its_share_leaves_the_rest_to_others_and_everything_comes_back() {
        // Given a budget of 16 KiB, bodies of at most 4 KiB: a share of 4 KiB per client
        let budget = BodyBudget::new(16, 4, false);
        let short = Duration::from_millis(50);
        // When one client holds its share with stalled bodies
        let stalled = within(short, budget.acquire(address(1), 4)).await.unwrap();
        // Then its next body waits, however small
        assert!(within(short, budget.acquire(address(1), 1)).await.is_none());
        // And the others have the rest: three clients, 4 KiB each
        let mut others = Vec::new();
        for client in 2..=4 {
            others.push(
                within(short, budget.acquire(address(client), 4))
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(budget.available(), 0);
        assert_eq!(budget.clients(), 4);
        // And when the stalled body is cut off, its client may send again
        drop(stalled);
        let again = within(short, budget.acquire(address(1), 4)).await.unwrap();
        // And once every request is done the whole budget is back, and no share is kept
        drop((again, others));
        assert_eq!(budget.available(), 16);
        assert_eq!(budget.clients(), 0);
    }

    #[tokio::test]
    async fn a_wait_given_up_holds_nothing() {
        let budget = BodyBudget::new(8, 4, false);
        let held = budget.acquire(address(1), 4).await;
        let other = budget.acquire(address(2), 4).await;
        // A third client waits for the budget (its share is free) and gives up
        assert!(
            within(Duration::from_millis(50), budget.acquire(address(3), 4))
                .await
                .is_none()
        );
        assert_eq!(
            budget.clients(),
            2,
            "the client that gave up holds no share"
        );
        drop((held, other));
        assert_eq!(budget.available(), 8);
        assert_eq!(budget.clients(), 0);
    }

    #[tokio::test]
    async fn authenticated_clients_share_the_whole_budget() {
        let budget = BodyBudget::new(16, 4, true);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(
                within(Duration::from_millis(50), budget.acquire(address(1), 4))
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(budget.available(), 0);
        assert_eq!(budget.clients(), 0);
    }
}
