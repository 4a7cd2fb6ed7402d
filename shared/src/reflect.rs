//! A watch reflected into a kube-runtime store: how the webhook's caches and the controller's
//! webhook-configuration caches are filled, with the workspace's watch backoff. They differ
//! only in what they watch (the `Api`'s scope, the selector), what they drop from each object
//! before storing it and what they do once a change is applied (count it, start another
//! watch, wake a writer), so those are the parameters.

use std::fmt::Debug;
use std::future::Future;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// The store of what `api` and `config` select and the future that fills it. `slim` drops what
/// the readers never use before an object is stored; `changed` runs after each watch event has
/// been applied to the store (the end of a relist included). The future runs until the process
/// stops (watch errors are logged and retried with [`crate::kube_client::watch_backoff`]) and
/// must be polled for the store to be filled: the caller runs it as a critical task.
pub fn reflect<'a, K>(
    api: Api<K>,
    config: watcher::Config,
    slim: fn(&mut K),
    changed: impl Fn(&Store<K>) + Send + Sync + 'a,
) -> (Store<K>, impl Future<Output = ()> + Send + 'a)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let store = reader.clone();
    let stream = watcher(api, config)
        .backoff(crate::kube_client::watch_backoff())
        .modify(slim);
    let fill = async move {
        reflector::reflector(writer, stream)
            .for_each(|event| {
                match event {
                    // The reflector has applied it to the store.
                    Ok(_) => changed(&store),
                    Err(error) => {
                        tracing::warn!(kind = %K::kind(&()), %error, "watch failed; retrying");
                    }
                }
                futures::future::ready(())
            })
            .await;
    };
    (reader, fill)
}
