//! What Prometheus answered, read: the sample values of an instant query's answer, or what is
//! wrong with it, worded without quoting the answer (whatever answers at the address writes
//! it, and messages land in Events). The controller's Prometheus client makes the calls.

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("building the Prometheus client: {0}")]
    Client(String),
    #[error("asking Prometheus at {address}: {why}")]
    Http { address: String, why: String },
    #[error("Prometheus answered HTTP {status}")]
    Status { status: u16 },
    #[error("Prometheus could not run the query ({kind}): {error}")]
    Query { kind: String, error: String },
    #[error("unreadable answer from Prometheus: {0}")]
    Answer(String),
}

/// The longest part of Prometheus' own error message shown: whatever answers at the address
/// writes it, and it lands in Events.
const MAX_ERROR_CHARS: usize = 200;

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
/// What is wrong is said without quoting the answer: whatever answers at the address writes it,
/// and messages land in Events (only Prometheus' own error message is shown, shortened).
pub fn samples(status: u16, body: &[u8]) -> Result<Vec<f64>, QueryError> {
    let unreadable = |error: serde_json::Error| {
        QueryError::Answer(format!(
            "not a Prometheus answer ({:?} error at line {}, column {})",
            error.classify(),
            error.line(),
            error.column()
        ))
    };
    let answer: Answer = match serde_json::from_slice(body) {
        Ok(answer) => answer,
        Err(_) if !(200..300).contains(&status) => return Err(QueryError::Status { status }),
        Err(error) => return Err(unreadable(error)),
    };
    if answer.status != "success" {
        let shorten = |text: Option<String>| {
            text.unwrap_or_default()
                .chars()
                .take(MAX_ERROR_CHARS)
                .collect::<String>()
        };
        return Err(QueryError::Query {
            kind: shorten(answer.error_type),
            error: shorten(answer.error),
        });
    }
    let value = |raw: &str| {
        raw.parse::<f64>()
            .map_err(|_| QueryError::Answer("a sample value is not a number".to_owned()))
    };
    let Some(data) = answer.data else {
        return Err(QueryError::Answer("no data".to_owned()));
    };
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
        "matrix" | "string" => Err(QueryError::Answer(format!(
            "a {} result; health checks need an instant vector or scalar",
            data.result_type
        ))),
        _ => Err(QueryError::Answer(
            "an unknown result type; health checks need an instant vector or scalar".to_owned(),
        )),
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
        let values = samples(200, vector.as_bytes()).expect("a vector");
        assert_eq!(values[0], 0.5);
        assert!(values[1].is_nan());
        let scalar =
            r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"2"]}}"#;
        assert_eq!(
            samples(200, scalar.as_bytes()).expect("a scalar"),
            vec![2.0]
        );
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(
            samples(200, empty.as_bytes()).expect("no samples"),
            Vec::<f64>::new()
        );
    }

    #[test]
    fn errors_say_what_prometheus_said() {
        let bad = r#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#;
        assert_eq!(
            samples(400, bad.as_bytes()).unwrap_err().to_string(),
            "Prometheus could not run the query (bad_data): parse error at char 4"
        );
        assert_eq!(
            samples(502, b"Bad Gateway <secret page>")
                .unwrap_err()
                .to_string(),
            "Prometheus answered HTTP 502"
        );
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(
            samples(200, matrix.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("instant vector")
        );
    }
}
