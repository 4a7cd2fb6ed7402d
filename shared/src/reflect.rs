//! A watch reflected into a kube-runtime store: how every cache that keeps whole objects is
//! filled (the controller's StatefulSets and records, the webhook's StatefulSets and parents,
//! the webhook configurations, `kubectl baton wait`), with the workspace's watch backoff. They
//! differ only in what they watch (the `Api`'s scope, the selector), what they drop from each
//! object before storing it and what they do once a change is applied (route it to a group,
//! count it, wake a writer), so those are the parameters. Caches of another form than the
//! object are [`crate::index`]es.

use std::fmt::Debug;
use std::future::Future;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// The store of what `api` and `config` select and the future that fills it. `slim` drops what
/// the readers never use before an object is stored; `changed` is given each watch event once it
/// has been applied to the store (the end of a relist included). The future runs until the process
/// stops (watch errors are logged and retried with [`crate::kube_client::watch_backoff`]) and
/// must be polled for the store to be filled: the caller runs it as a critical task.
pub fn reflect<'a, K>(
    api: Api<K>,
    config: watcher::Config,
    slim: fn(&mut K),
    changed: impl FnMut(&watcher::Event<K>) + Send + 'a,
) -> (Store<K>, impl Future<Output = ()> + Send + 'a)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let stream =
        crate::initial_list::watcher(api, config).backoff(crate::kube_client::watch_backoff());
    reflect_stream(stream, slim, changed)
}

/// As [`reflect`], from a stream of watch events of one's own (a watcher that lists again after
/// each failure, for a member cluster); the stream retries by itself.
pub fn reflect_stream<'a, K>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'a,
    slim: fn(&mut K),
    mut changed: impl FnMut(&watcher::Event<K>) + Send + 'a,
) -> (Store<K>, impl Future<Output = ()> + Send + 'a)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, mut writer) = reflector::store::<K>();
    // Each event applied as it comes, not through `reflector::reflector`: its generator keeps
    // an event (2 KiB for a pod, more for a StatefulSet) in each of its states, ~10 KiB per
    // store held for the whole run, and a baton serving many namespaces has several per
    // namespace. Here an event lives only while it is applied. (The stream is boxed: a watcher
    // inline would be as large.)
    let mut stream = Box::pin(stream);
    let fill = async move {
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    let event = event.modify(slim);
                    writer.apply_watcher_event(&event);
                    changed(&event);
                }
                Err(error) => {
                    tracing::warn!(kind = %K::kind(&()), %error, "watch failed; retrying");
                }
            }
        }
    };
    (reader, fill)
}
