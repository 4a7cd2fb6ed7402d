//! The configuration reference, generated from the doc comments on [`Config`] so the two can
//! never disagree. `docs/configuration.md` is this output; a test keeps it current.

use serde_json::{Map, Value};

use crate::{Config, ENV_PREFIX};

/// Markdown table of every key: its environment variable, default and meaning.
pub fn reference_markdown() -> String {
    let schema = schemars::schema_for!(Config);
    let root = schema.as_value();
    let definitions = root
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let defaults = serde_json::to_value(Config::default()).expect("defaults serialize");
    let mut rows = Vec::new();
    collect(root, &definitions, &defaults, "", &mut rows);

    let mut out = String::from(
        "# Configuration reference\n\n\
         Generated from the doc comments of `config/src/lib.rs` \
         (`UPDATE_CONFIG_REFERENCE=1 cargo test -p baton-config` rewrites it).\n\n\
         baton-controller and baton-webhook read the same configuration: built-in defaults, then \
         a YAML file (`--config PATH` or `BATON_CONFIG`), then environment variables \
         (`BATON_` prefix, `__` between nested keys). Unknown keys are rejected, in a file and \
         below a top-level key in the environment (`BATON_WEBHOOK__ADRESS`). A `BATON_` variable \
         whose first part names no top-level key is not baton's and is not read (a pod gets the \
         link variables of every Service in its namespace, `BATON_WEBHOOK_PORT=tcp://…` for \
         `baton-webhook`); each one that does not look like a Service's link is logged as a \
         warning at start. A list is written in the environment as `a,b` (or `[a, b]`), e.g. \
         `BATON_GATES__PROMETHEUS_ADDRESSES=https://prometheus-a:9090,https://prometheus-b:9090`. \
         `--print-config` prints the effective configuration.\n\n\
         | key | environment variable | default | meaning |\n|---|---|---|---|\n",
    );
    for row in rows {
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            row.key, row.env, row.default, row.meaning
        ));
    }
    out
}

struct Row {
    key: String,
    env: String,
    default: String,
    meaning: String,
}

fn collect(
    node: &Value,
    definitions: &Map<String, Value>,
    defaults: &Value,
    prefix: &str,
    rows: &mut Vec<Row>,
) {
    let Some(properties) = node.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        let resolved = resolve(property, definitions);
        let default = defaults.get(name).cloned().unwrap_or(Value::Null);
        if resolved.get("properties").is_some() {
            collect(resolved, definitions, &default, &key, rows);
            continue;
        }
        let description = property
            .get("description")
            .or_else(|| resolved.get("description"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut meaning = description.replace('\n', " ");
        let choices = choices(resolved);
        if !choices.is_empty() {
            meaning.push_str(&format!(" One of: {}.", choices.join(", ")));
        }
        rows.push(Row {
            env: format!("{ENV_PREFIX}{}", key.replace('.', "__").to_uppercase()),
            key,
            default: match default {
                Value::String(text) => format!("`{text}`"),
                other => format!("`{other}`"),
            },
            meaning,
        });
    }
}

fn resolve<'a>(node: &'a Value, definitions: &'a Map<String, Value>) -> &'a Value {
    node.get("$ref")
        .and_then(Value::as_str)
        .and_then(|reference| reference.strip_prefix("#/$defs/"))
        .and_then(|name| definitions.get(name))
        .unwrap_or(node)
}

fn choices(node: &Value) -> Vec<String> {
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
            .collect();
    }
    node.get("oneOf")
        .and_then(Value::as_array)
        .map(|variants| {
            variants
                .iter()
                .filter_map(|variant| {
                    let value = variant.get("const").and_then(Value::as_str)?;
                    let doc = variant.get("description").and_then(Value::as_str);
                    Some(match doc {
                        Some(doc) => format!("`{value}` ({})", doc.trim_end_matches('.')),
                        None => format!("`{value}`"),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}
