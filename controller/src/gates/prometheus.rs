//! A thin Prometheus client: one instant query over the HTTP API (`/api/v1/query`), bounded by
//! a timeout, with optional bearer or basic auth and a CA or no certificate check. Anything
//! but a successful answer is an error, which the health check treats as inconclusive.

use std::time::Duration;

use serde::Deserialize;

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

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("building the Prometheus client: {0}")]
    Client(String),
    #[error("asking Prometheus at {address}: {source}")]
    Http {
        address: String,
        source: reqwest::Error,
    },
    #[error("Prometheus answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("Prometheus could not run the query ({kind}): {error}")]
    Query { kind: String, error: String },
    #[error("unreadable answer from Prometheus: {0}")]
    Answer(String),
}

#[derive(Debug, Clone)]
pub struct PrometheusClient {
    address: String,
    auth: Auth,
    http: reqwest::Client,
}

impl PrometheusClient {
    pub fn new(address: &str, timeout: Duration, auth: Auth, tls: Tls) -> Result<Self, QueryError> {
        baton_shared::crypto::install_default_provider();
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout);
        match tls {
            Tls::System => {}
            Tls::Ca(pem) => {
                let ca = reqwest::Certificate::from_pem(pem.as_bytes())
                    .map_err(|error| QueryError::Client(format!("the CA: {error}")))?;
                builder = builder.add_root_certificate(ca);
            }
            Tls::Insecure => builder = builder.danger_accept_invalid_certs(true),
        }
        let http = builder
            .build()
            .map_err(|error| QueryError::Client(error.to_string()))?;
        Ok(Self {
            address: address.trim_end_matches('/').to_owned(),
            auth,
            http,
        })
    }

    /// Runs `promql` as an instant query; returns the value of every sample.
    pub async fn query(&self, promql: &str) -> Result<Vec<f64>, QueryError> {
        let endpoint = format!("{}/api/v1/query", self.address);
        let url = reqwest::Url::parse_with_params(&endpoint, [("query", promql)])
            .map_err(|error| QueryError::Client(format!("the address {endpoint:?}: {error}")))?;
        let request = self.http.get(url);
        let request = match &self.auth {
            Auth::None => request,
            Auth::Bearer(token) => request.bearer_auth(token),
            Auth::Basic { username, password } => request.basic_auth(username, Some(password)),
        };
        let http = |source| QueryError::Http {
            address: self.address.clone(),
            source,
        };
        let response = request.send().await.map_err(http)?;
        let status = response.status();
        let body = response.text().await.map_err(http)?;
        samples(status.as_u16(), &body)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct Sample {
    value: (f64, String),
}

/// The sample values of an answer (pure): a vector's samples, a scalar as one sample.
pub fn samples(status: u16, body: &str) -> Result<Vec<f64>, QueryError> {
    let answer: Answer = match serde_json::from_str(body) {
        Ok(answer) => answer,
        Err(_) if !(200..300).contains(&status) => {
            return Err(QueryError::Status {
                status,
                body: body.chars().take(200).collect(),
            });
        }
        Err(error) => return Err(QueryError::Answer(error.to_string())),
    };
    if answer.status != "success" {
        return Err(QueryError::Query {
            kind: answer.error_type.unwrap_or_default(),
            error: answer.error.unwrap_or_default(),
        });
    }
    let value = |raw: &str| {
        raw.parse::<f64>()
            .map_err(|_| QueryError::Answer(format!("sample value {raw:?}")))
    };
    let Some(data) = answer.data else {
        return Err(QueryError::Answer("no data".to_owned()));
    };
    let unreadable = |error: serde_json::Error| QueryError::Answer(error.to_string());
    match data.result_type.as_str() {
        "vector" => {
            let samples: Vec<Sample> = serde_json::from_value(data.result).map_err(unreadable)?;
            samples
                .iter()
                .map(|sample| value(&sample.value.1))
                .collect()
        }
        "scalar" => {
            let (_, raw): (f64, String) =
                serde_json::from_value(data.result).map_err(unreadable)?;
            Ok(vec![value(&raw)?])
        }
        other => Err(QueryError::Answer(format!(
            "a {other} result; health checks need an instant vector or scalar"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_and_scalar_answers_give_their_values() {
        let vector = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"job":"a"},"value":[1700000000.1,"0.5"]},
            {"metric":{"job":"b"},"value":[1700000000.1,"NaN"]}]}}"#;
        let values = samples(200, vector).expect("a vector");
        assert_eq!(values[0], 0.5);
        assert!(values[1].is_nan());
        let scalar =
            r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"2"]}}"#;
        assert_eq!(samples(200, scalar).expect("a scalar"), vec![2.0]);
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(samples(200, empty).expect("no samples"), Vec::<f64>::new());
    }

    #[test]
    fn errors_say_what_prometheus_said() {
        let bad = r#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#;
        assert_eq!(
            samples(400, bad).unwrap_err().to_string(),
            "Prometheus could not run the query (bad_data): parse error at char 4"
        );
        assert_eq!(
            samples(502, "Bad Gateway").unwrap_err().to_string(),
            "Prometheus answered HTTP 502: Bad Gateway"
        );
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(
            samples(200, matrix)
                .unwrap_err()
                .to_string()
                .contains("instant vector")
        );
    }
}
