//! Waiting on conditions with a deadline, never on fixed sleeps.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `condition` every 50 ms until it holds; panics naming `what` after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(timeout, what, || {
        let holds = condition();
        async move { holds.await.then_some(()) }
    })
    .await
}

/// Polls `found` every 50 ms until it gives something, and returns that; panics naming `what`
/// after `timeout`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut found: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = found().await {
            return value;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
