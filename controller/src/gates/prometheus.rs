//! A thin Prometheus client: one instant query over the HTTP API (`/api/v1/query`), bounded by
//! a timeout, with optional bearer or basic auth and a CA or no certificate check. Anything
//! but a successful answer is an error, which the health check treats as inconclusive.

use baton_core::gates::answers::{QueryError, samples};
use baton_core::gates::redact::redact;

use super::egress;

/// How to authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    Bearer(String),
    Basic { username: String, password: String },
}

/// Which certificates to trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tls {
    /// The platform's roots.
    System,
    /// This PEM CA.
    Ca(String),
    /// No certificate check at all.
    Insecure,
}

#[derive(Debug, Clone)]
pub struct PrometheusClient {
    address: String,
    auth: Auth,
    http: reqwest::Client,
    max_answer_bytes: u64,
}

impl PrometheusClient {
    /// A client for `address` (already permitted by the operator's allowlist), its calls made by
    /// `builder` ([`super::egress::Allowlist::client_builder`]).
    pub fn new(
        address: &str,
        builder: reqwest::ClientBuilder,
        auth: Auth,
        tls: Tls,
        max_answer_bytes: u64,
    ) -> Result<Self, QueryError> {
        let builder = match tls {
            Tls::System => builder,
            Tls::Ca(pem) => {
                let ca = reqwest::Certificate::from_pem(pem.as_bytes())
                    .map_err(|error| QueryError::Client(format!("the CA: {error}")))?;
                builder.add_root_certificate(ca)
            }
            Tls::Insecure => builder.danger_accept_invalid_certs(true),
        };
        let http = builder
            .build()
            .map_err(|error| QueryError::Client(error.to_string()))?;
        Ok(Self {
            address: address.trim_end_matches('/').to_owned(),
            auth,
            http,
            max_answer_bytes,
        })
    }

    /// Runs `promql` as an instant query; returns the value of every sample.
    pub async fn query(&self, promql: &str) -> Result<Vec<f64>, QueryError> {
        let endpoint = format!("{}/api/v1/query", self.address);
        let url =
            reqwest::Url::parse_with_params(&endpoint, [("query", promql)]).map_err(|error| {
                QueryError::Client(format!("the address {}: {error}", redact(&endpoint)))
            })?;
        let request = self.http.get(url);
        let request = match &self.auth {
            Auth::None => request,
            Auth::Bearer(token) => request.bearer_auth(token),
            Auth::Basic { username, password } => request.basic_auth(username, Some(password)),
        };
        let failed = |why: String| QueryError::Http {
            address: redact(&self.address),
            why,
        };
        let response = request
            .send()
            .await
            .map_err(|error| failed(egress::describe_failure(&error).to_owned()))?;
        let status = response.status();
        let body = egress::read_capped(response, self.max_answer_bytes)
            .await
            .map_err(failed)?;
        samples(status.as_u16(), &body)
    }
}
