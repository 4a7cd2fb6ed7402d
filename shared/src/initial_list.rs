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

/// As [`watcher`], but started over after every failure: each error is passed on, then, after
/// [`crate::kube_client::watch_backoff`], a new watcher lists everything again. kube's own
/// watcher resumes from the last resourceVersion, which is correct but gives no moment at which
/// the cache is known to be caught up; a fresh list ends with `InitDone`, which is that moment.
/// For the caches of a member cluster, whose outage must end with a complete list before
/// anything is decided on it.
pub fn relisting_watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let backoff = crate::kube_client::watch_backoff();
    futures::stream::unfold(
        (None::<BoxStream<'static, _>>, backoff, false),
        move |(events, mut backoff, failed)| {
            let (api, config) = (api.clone(), config.clone());
            async move {
                let mut events = match events {
                    Some(events) => events,
                    None => {
                        if failed && let Some(delay) = backoff.next() {
                            tokio::time::sleep(delay).await;
                        }
                        watcher(api, config).boxed()
                    }
                };
                let event = events.next().await?;
                let failed = event.is_err();
                let events = (!failed).then_some(events);
                Some((event, (events, backoff, failed)))
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use http::{Request, Response, StatusCode};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::client::Body;
    use tower_test::mock;

    use super::*;

    type Handle = mock::Handle<Request<Body>, Response<Body>>;

    fn answer(code: u16, body: serde_json::Value) -> Response<Body> {
        Response::builder()
            .status(StatusCode::from_u16(code).expect("a status code"))
            .body(Body::from(serde_json::to_vec(&body).expect("JSON")))
            .expect("a response")
    }

    /// Answers the next request, a list (not a watch), with one ConfigMap.
    async fn list(handle: &mut std::pin::Pin<&mut Handle>) {
        let (request, send) = handle.next_request().await.expect("a list");
        let query = request.uri().query().unwrap_or_default().to_owned();
        assert!(!query.contains("watch=true"), "a list, not {query}");
        send.send_response(answer(
            200,
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMapList",
                               "metadata": {"resourceVersion": "5"},
                               "items": [{"metadata": {"name": "a", "namespace": "ns"}}]}),
        ));
    }

    /// The first events of a watcher of ConfigMaps on an API server that answers a list with
    /// one ConfigMap, and refuses a streaming watch first when `refusing`.
    async fn first_events(refusing: bool) -> Vec<String> {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            let mut handle = pin!(handle);
            if refusing {
                let (request, send) = handle.next_request().await.expect("a watch");
                let query = request.uri().query().unwrap_or_default().to_owned();
                assert!(query.contains("sendInitialEvents=true"), "{query}");
                send.send_response(answer(
                    422,
                    serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                        "reason": "Invalid", "code": 422,
                        "message": "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"}),
                ));
            }
            list(&mut handle).await;
            // The watch after the listing is never answered: the test has what it needs.
            std::future::pending::<()>().await;
        });
        let api: Api<ConfigMap> = Api::namespaced(kube::Client::new(service, "ns"), "ns");
        let events = watcher(api, watcher::Config::default())
            .take(3)
            .map(|event| match event {
                Ok(watcher::Event::Init) => "init".to_owned(),
                Ok(watcher::Event::InitApply(config_map)) => {
                    format!("listed {}", config_map.metadata.name.unwrap_or_default())
                }
                Ok(watcher::Event::InitDone) => "done".to_owned(),
                other => format!("{other:?}"),
            })
            .collect()
            .await;
        server.abort();
        events
    }

    /// The only test that touches the process's setting (nothing else in this crate builds a
    /// client): the steps run in order.
    #[tokio::test]
    async fn a_refused_streaming_watch_lists_instead_and_so_does_every_later_watch() {
        let listed = vec!["init".to_owned(), "listed a".to_owned(), "done".to_owned()];
        // Given a process set to stream, and an API server that refuses it as one with
        // WatchList off does
        configure(InitialList::Streaming);
        assert!(streaming());
        let events = first_events(true).await;
        // Then the watch lists at once, its refusal not passed on as an error
        assert_eq!(events, listed);
        // And later watches list without asking again, even if told to stream
        assert!(!streaming());
        configure(InitialList::Streaming);
        assert_eq!(first_events(false).await, listed);
        // And a process told to list lists
        configure(InitialList::List);
        assert!(!streaming());
    }

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
