//! How every watch of the process fills its cache when it starts (`kubernetes.initial_list`):
//! by streaming (a watch with `sendInitialEvents`, Kubernetes' WatchList, on by default since
//! 1.32: the API server sends the objects from its watch cache one event at a time, and never
//! builds a list response of all of them) or by paginated lists.
//!
//! One setting for the process, not one per watch: it is a fact about the API server, set once
//! when the client is built ([`crate::kube_client::client`]). And one finding: an API server
//! that refuses streaming (422, `sendInitialEvents` forbidden while WatchList is off) refuses it
//! for every watch, so the first refusal turns every watch of the process to lists, with one
//! warning, instead of each watch retrying a request that cannot succeed.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU8, Ordering};

use baton_config::InitialList;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, InitialListStrategy};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

const LIST: u8 = 0;
const STREAMING: u8 = 1;
/// Streaming was asked for and the API server refused it.
const REFUSED: u8 = 2;

static STRATEGY: AtomicU8 = AtomicU8::new(initial(InitialList::Streaming));

const fn initial(setting: InitialList) -> u8 {
    match setting {
        InitialList::Streaming => STREAMING,
        InitialList::List => LIST,
    }
}

/// Sets how the process's watches start from now on (a refusal already seen stays seen).
pub fn configure(setting: InitialList) {
    let wanted = initial(setting);
    let _ = STRATEGY.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
        (now != REFUSED || wanted == LIST).then_some(wanted)
    });
}

/// Whether watches that start now stream.
pub fn streaming() -> bool {
    STRATEGY.load(Ordering::Relaxed) == STREAMING
}

/// The API server's answer to a streaming watch when it does not serve them: the request is
/// invalid (422; 400 from servers that predate the parameter and refuse the
/// `resourceVersionMatch` it comes with).
fn refuses_streaming(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
            if status.code == 422 || status.code == 400
    )
}

/// Notes a refusal; true the first time, so it is told once.
fn note_refusal() -> bool {
    STRATEGY.swap(REFUSED, Ordering::Relaxed) == STREAMING
}

/// kube's [`watcher`](watcher::watcher) of what `api` and `config` select, starting by
/// streaming when the process does (see the module header), and by listing from the moment the
/// API server refuses streaming.
pub fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let listing = watcher::Config {
        initial_list_strategy: InitialListStrategy::ListWatch,
        ..config.clone()
    };
    if !streaming() {
        return watcher::watcher(api, listing).boxed();
    }
    let streaming: BoxStream<'static, _> =
        watcher::watcher(api.clone(), config.streaming_lists()).boxed();
    futures::stream::unfold(
        (streaming, Some((api, listing))),
        |(mut events, mut fallback)| async move {
            loop {
                let event = events.next().await?;
                if let Err(error) = &event
                    && refuses_streaming(error)
                    && let Some((api, listing)) = fallback.take()
                {
                    if note_refusal() {
                        tracing::warn!(kind = %K::kind(&()), %error, "the API server refuses streaming lists (its WatchList feature is off); every watch lists instead (kubernetes.initial_list: list says so without trying)");
                    }
                    events = watcher::watcher(api, listing).boxed();
                    continue;
                }
                return Some((event, (events, fallback)));
            }
        },
    )
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", "Invalid")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn only_an_invalid_request_at_the_start_is_a_refusal_of_streaming() {
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(
            status(422)
        )));
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(
            status(400)
        )));
        // Not allowed to watch, or a CRD not installed: the same whichever way it starts.
        assert!(!refuses_streaming(&watcher::Error::WatchStartFailed(
            status(403)
        )));
        assert!(!refuses_streaming(&watcher::Error::WatchStartFailed(
            status(404)
        )));
        assert!(!refuses_streaming(&watcher::Error::WatchFailed(status(
            422
        ))));
    }
}
