//! One way from a watch to an index of one's own, when a kube-runtime store is not what the
//! reader needs (a smaller or parsed form, a channel, a "not installed" state): the watch's
//! relists, changes and errors become calls on an [`Index`], so each reader writes only what it
//! keeps. (Readers content with a store use [`crate::reflect`].)
//!
//! Each object is first turned into what the index keeps ([`Index::keep`]), as it arrives, so a
//! relist of thousands of pods buffers thousands of small records, never the whole objects. A
//! relist is given whole ([`Index::reset`], once its last object arrived): an index never sees
//! half a listing, so it never forgets objects that a relist is still to repeat.

use std::fmt::Debug;

use futures::{Stream, StreamExt};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// What a watch's events do to a reader's index.
pub trait Index<K> {
    /// What the index keeps of one object (the object itself, when that is all it needs).
    type Kept;
    /// Makes what is kept of `object`, once per event.
    fn keep(&self, object: K) -> Self::Kept;
    /// A (re)list: these are all the objects there are now.
    fn reset(&mut self, objects: Vec<Self::Kept>);
    /// `object` was created or changed.
    fn apply(&mut self, object: Self::Kept);
    /// `object` was deleted.
    fn delete(&mut self, object: Self::Kept);
    /// The watch failed; it is retried with [`crate::kube_client::watch_backoff`].
    fn failed(&mut self, error: &watcher::Error) {
        tracing::warn!(%error, "watch failed; retrying");
    }
}

/// Watches what `api` and `config` select into `index` until the process stops. `slim` drops
/// what the index never reads before it sees an object. Run it as a critical task.
pub async fn run<K, I>(api: Api<K>, config: watcher::Config, slim: fn(&mut K), index: &mut I)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    I: Index<K>,
{
    let events = crate::initial_list::watcher(api, config)
        .backoff(crate::kube_client::watch_backoff())
        .modify(slim);
    drive(events, index).await;
}

/// The API's answer that the watched resource does not exist: its CRD is not installed. A
/// state for optional CRDs (no such objects), not a failure to warn about on every retry.
pub fn crd_missing(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 404,
        watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

/// Applies `events` to `index` (see the module header).
pub async fn drive<K, I>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    index: &mut I,
) where
    I: Index<K>,
{
    futures::pin_mut!(events);
    let mut listing = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(object)) => listing.push(index.keep(object)),
            Ok(watcher::Event::InitDone) => index.reset(std::mem::take(&mut listing)),
            Ok(watcher::Event::Apply(object)) => index.apply(index.keep(object)),
            Ok(watcher::Event::Delete(object)) => index.delete(index.keep(object)),
            Err(error) => index.failed(&error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Calls(Vec<String>);

    impl Index<&'static str> for Calls {
        type Kept = String;
        fn keep(&self, object: &'static str) -> String {
            object.to_uppercase()
        }
        fn reset(&mut self, objects: Vec<String>) {
            self.0.push(format!("reset {objects:?}"));
        }
        fn apply(&mut self, object: String) {
            self.0.push(format!("apply {object}"));
        }
        fn delete(&mut self, object: String) {
            self.0.push(format!("delete {object}"));
        }
        fn failed(&mut self, _: &watcher::Error) {
            self.0.push("failed".to_owned());
        }
    }

    #[tokio::test]
    async fn a_relist_is_given_whole_and_changes_one_by_one() {
        let events = futures::stream::iter([
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply("a")),
            Ok(watcher::Event::InitApply("b")),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply("c")),
            Ok(watcher::Event::Delete("a")),
            Err(watcher::Error::NoResourceVersion),
            // A relist interrupted by a new one gives only the new one's objects.
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply("stale")),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply("c")),
            Ok(watcher::Event::InitDone),
        ]);
        let mut calls = Calls::default();
        drive(events, &mut calls).await;
        assert_eq!(
            calls.0,
            [
                r#"reset ["A", "B"]"#,
                "apply C",
                "delete A",
                "failed",
                r#"reset ["C"]"#,
            ]
        );
    }
}
