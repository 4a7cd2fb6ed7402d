//! A web check's calls (`spec.web` of a `RolloutHealthCheck`): each query's URL permitted by
//! the operator's `gates.web_check_addresses` and the egress guard ([`super::egress`], the
//! same as Prometheus': no loopback, link-local, metadata or unspecified address unless listed,
//! names re-checked as they resolve, no proxy, no redirects), its Secret headers read only
//! under the Prometheus credentials' rules, the call bounded by the check's timeout and the
//! answer's body read up to `gates.max_answer_bytes`. What the answer means is the core's
//! (`baton_core::gates::web_check::judge`).

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::calls::CheckConnector;
use super::egress;
use super::health::{Unusable, read_secret};
use baton_core::gates::health_check::QuerySpec;
use baton_core::gates::redact::redact;
use baton_core::gates::web_check::{WebAnswer, WebQuery, WebSpec};

/// One query's call, ready: the URL permitted, the headers with their Secrets read.
#[derive(Debug)]
pub struct Call {
    method: reqwest::Method,
    url: reqwest::Url,
    headers: HeaderMap,
    body: Option<String>,
}

/// The calls of `queries` (as rendered, in order), if what each asks is allowed: a URL the
/// operator permits (a refusal names `spec.queries[i].web.url`), and Secret headers only as
/// [`WebSpec::refuse_credentials`] allows, from Secrets that opted in.
pub async fn prepare(
    connector: &CheckConnector,
    spec: &WebSpec,
    queries: &[(QuerySpec, String)],
) -> Result<Vec<Call>, Unusable> {
    let mut calls = Vec::with_capacity(queries.len());
    for (index, (query, _)) in queries.iter().enumerate() {
        let Some(web) = &query.web else {
            return Err(Unusable::Refused(format!(
                "spec.queries[{index}].web is needed: this check asks spec.web"
            )));
        };
        calls.push(prepare_one(connector, spec, index, web).await?);
    }
    Ok(calls)
}

async fn prepare_one(
    connector: &CheckConnector,
    spec: &WebSpec,
    index: usize,
    web: &WebQuery,
) -> Result<Call, Unusable> {
    let refused = |why: String| Unusable::Refused(format!("spec.queries[{index}].web.{why}"));
    let url = connector
        .web
        .permit(&web.url)
        .map_err(|why| refused(format!("url: {why}")))?;
    let listed = connector.web.lists(&url);
    if let Some(why) =
        spec.refuse_credentials(index, web, &url, listed, connector.own_secret.as_deref())
    {
        return Err(Unusable::Refused(why));
    }
    let method = match web.method().map_err(refused)? {
        "POST" => reqwest::Method::POST,
        _ => reqwest::Method::GET,
    };
    let mut headers = HeaderMap::new();
    for (name, source) in &web.headers {
        let text = match (&source.value, &source.secret_key_ref) {
            (Some(text), _) => text.clone(),
            (None, Some(secret)) => read_secret(connector, &secret.name, &secret.key).await?,
            (None, None) => {
                return Err(refused(format!(
                    "headers[{name:?}] needs exactly one of value and secretKeyRef"
                )));
            }
        };
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| refused(format!("headers[{name:?}] is not an HTTP header name")))?;
        // Never the value in the message: it may be a Secret's.
        let mut value = HeaderValue::from_str(text.trim_end_matches(['\r', '\n']))
            .map_err(|_| refused(format!("headers[{name:?}] is not a valid header value")))?;
        value.set_sensitive(source.secret_key_ref.is_some());
        headers.insert(header, value);
    }
    Ok(Call {
        method,
        url,
        headers,
        body: web.body.clone(),
    })
}

impl Call {
    /// Makes the call with `http` (built by the allowlist's `client_builder`): the status and
    /// at most `max_answer_bytes` of the body, or why there is none (the URL redacted).
    pub async fn answer(
        &self,
        http: &reqwest::Client,
        max_answer_bytes: u64,
    ) -> Result<WebAnswer, String> {
        let mut request = http
            .request(self.method.clone(), self.url.clone())
            .headers(self.headers.clone());
        if let Some(body) = &self.body {
            request = request.body(body.clone());
        }
        let failed = |why: &str| format!("calling {}: {why}", redact(self.url.as_str()));
        let response = request
            .send()
            .await
            .map_err(|error| failed(egress::describe_failure(&error)))?;
        let status = response.status().as_u16();
        let body = egress::read_capped(response, max_answer_bytes).await?;
        Ok(WebAnswer { status, body })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on loopback that answers every request with `status` and `body` (its length
    /// announced or not), once per connection.
    async fn serve(status: u16, body: Vec<u8>, announce_length: bool) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let address = listener.local_addr().expect("an address");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = socket.read(&mut request).await;
                    let head = if announce_length {
                        format!(
                            "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        )
                    } else {
                        format!("HTTP/1.1 {status} X\r\nconnection: close\r\n\r\n")
                    };
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(&body).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        format!("http://{address}/stats")
    }

    fn listed(url: &str) -> egress::Allowlist {
        egress::Allowlist::new(
            "gates.web_check_addresses",
            vec![url.parse().expect("an entry")],
        )
    }

    fn call(url: &str) -> Call {
        Call {
            method: reqwest::Method::GET,
            url: url.parse().expect("a URL"),
            headers: HeaderMap::new(),
            body: None,
        }
    }

    #[tokio::test]
    async fn an_answer_within_the_bound_is_read_whole() {
        let url = serve(200, br#"{"errorRate": 0.01}"#.to_vec(), true).await;
        let http = listed(&url)
            .client_builder(Duration::from_secs(10))
            .build()
            .expect("a client");
        let answer = call(&url).answer(&http, 1024).await.expect("an answer");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, br#"{"errorRate": 0.01}"#);
    }

    #[tokio::test]
    async fn a_10_mib_answer_is_refused_announced_or_streamed() {
        let huge = vec![b' '; 10 * 1024 * 1024];
        for announce_length in [true, false] {
            let url = serve(200, huge.clone(), announce_length).await;
            let http = listed(&url)
                .client_builder(Duration::from_secs(10))
                .build()
                .expect("a client");
            let refused = call(&url)
                .answer(&http, 1024 * 1024)
                .await
                .expect_err("too large");
            assert_eq!(
                refused, "the answer is larger than 1048576 bytes",
                "length announced: {announce_length}"
            );
        }
    }

    #[tokio::test]
    async fn loopback_is_refused_unless_listed_even_through_a_name() {
        let url = serve(200, b"{}".to_vec(), true).await;
        let open = egress::Allowlist::new("gates.web_check_addresses", Vec::new());
        assert!(
            open.permit(&url)
                .is_err_and(|why| why.contains("loopback, link-local"))
        );
        assert!(
            open.permit("http://169.254.169.254/latest/meta-data/")
                .is_err_and(|why| why.contains("metadata-service address"))
        );
        // A name that resolves to loopback reaches nothing
        let by_name = url.replace("127.0.0.1", "localhost");
        let http = open
            .client_builder(Duration::from_secs(10))
            .build()
            .expect("a client");
        let refused = call(&by_name)
            .answer(&http, 1024)
            .await
            .expect_err("refused");
        assert!(refused.contains("could not connect"), "{refused}");
    }
}
