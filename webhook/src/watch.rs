//! How every cache of the webhook is filled: a watch of one namespace's objects of a kind,
//! reflected into a store, with the workspace's watch backoff. The caches differ only in what
//! they drop from each object before storing it and in what they do once a change is applied
//! (count it, start another watch), so those are the two parameters.

use std::future::Future;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

/// The store of `namespace`'s objects of kind `K` and the future that fills it. `slim` drops
/// what the readers never use before an object is stored; `changed` runs after each watch
/// event has been applied to the store. The future runs until the process stops (watch errors
/// are logged and retried with backoff) and must be polled for the store to be filled: the
/// caller runs it as a critical task.
pub fn reflect<K>(
    client: Client,
    namespace: &str,
    slim: fn(&mut K),
    changed: impl Fn(&Store<K>) + Send + Sync + 'static,
) -> (Store<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let api: Api<K> = Api::namespaced(client, namespace);
    let namespace = namespace.to_owned();
    let store = reader.clone();
    let stream = watcher(api, watcher::Config::default())
        .backoff(baton_shared::kube_client::watch_backoff())
        .modify(slim);
    let fill = async move {
        reflector::reflector(writer, stream)
            .for_each(|event| {
                match event {
                    // The reflector has applied it to the store.
                    Ok(_) => changed(&store),
                    Err(error) => {
                        tracing::warn!(kind = %K::kind(&()), %namespace, %error, "watch failed; retrying");
                    }
                }
                futures::future::ready(())
            })
            .await;
    };
    (reader, fill)
}
