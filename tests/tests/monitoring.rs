//! The monitoring baton ships in `deploy/monitoring/`: Prometheus accepts the alerting rules,
//! their unit tests pass, and every metric the dashboard and the rules query is one baton
//! exports. The exported names are read from the binaries' real metric sets, registered as
//! `controller/src/app.rs` and `webhook/src/main.rs` register them, so a renamed or removed
//! metric fails here instead of leaving a dashboard panel empty or an alert silent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use baton_config::{KubernetesConfig, PodsConfig};
use baton_controller::certificates::CertificateMetrics;
use baton_controller::leader::LeaderMetrics;
use baton_controller::metrics::ControllerMetrics;
use baton_e2e::Scene;
use baton_e2e::controller_support::{create_ready_group, roll_out};
use baton_e2e::prometheus_support::Prometheus;
use baton_e2e::{ControlPlane, TestNamespace};
use baton_shared::kube_client::RequestDurationLayer;
use baton_shared::pod_client::PodHttpClient;
use baton_shared::rate_limit::RateLimitLayer;
use baton_webhook::evictions::ZpdbMetrics;
use baton_webhook::metrics::WebhookMetrics;
use k8s_openapi::api::core::v1::ConfigMap;
use prometheus::Registry;
use prometheus::core::Collector;
use prometheus::proto::MetricType;
use promql_parser::parser::{self, Expr};
use promql_parser::util::{ExprVisitor, walk_expr};
use serde_json::Value;

fn monitoring_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("reading {path:?}: {error}"))
}

// ---------------------------------------------------------------------------------------------
// What baton exports

/// What baton exports: each series name a query can select and the labels its series carry.
type Exported = BTreeMap<String, BTreeSet<String>>;

/// Labels the scrape adds to every series: `job` and `instance`, and `namespace`, which
/// docs/alerts.md asks the scrape config to copy from the pod.
const TARGET_LABELS: [&str; 3] = ["job", "instance", "namespace"];

/// The series of one metric family as a query selects them: a histogram's are `_bucket`
/// (with `le`), `_sum` and `_count`.
fn add_family(exported: &mut Exported, name: &str, kind: MetricType, labels: &BTreeSet<String>) {
    let mut add = |series: String, extra: Option<&str>| {
        let mut labels = labels.clone();
        labels.extend(extra.map(str::to_owned));
        exported.entry(series).or_default().extend(labels);
    };
    match kind {
        MetricType::HISTOGRAM => {
            add(format!("{name}_bucket"), Some("le"));
            add(format!("{name}_sum"), None);
            add(format!("{name}_count"), None);
        }
        MetricType::SUMMARY => {
            add(name.to_owned(), Some("quantile"));
            add(format!("{name}_sum"), None);
            add(format!("{name}_count"), None);
        }
        _ => add(name.to_owned(), None),
    }
}

/// A metric family baton exports: its type and the labels of its series.
#[derive(Debug, Clone, PartialEq)]
struct Family {
    kind: MetricType,
    labels: BTreeSet<String>,
}

type Families = BTreeMap<String, Family>;

/// The families of `registry` and of `vectors`: `gather()` shows every plain metric but leaves
/// out a vector without series, so each vector is read from its `desc()` (name and labels; its
/// type from `collect()`, which names the family even when it is empty).
fn families_of(registry: &Registry, vectors: &[&dyn Collector]) -> Families {
    let mut families = Families::new();
    for family in registry.gather() {
        let labels = family
            .get_metric()
            .iter()
            .flat_map(|metric| metric.get_label())
            .map(|label| label.name().to_owned())
            .collect();
        let kind = family.get_field_type();
        families.insert(family.name().to_owned(), Family { kind, labels });
    }
    for vector in vectors {
        let collected = vector.collect();
        for desc in vector.desc() {
            let kind = collected
                .iter()
                .find(|family| family.name() == desc.fq_name)
                .map_or(MetricType::UNTYPED, |family| family.get_field_type());
            let labels = desc
                .variable_labels
                .iter()
                .cloned()
                .chain(
                    desc.const_label_pairs
                        .iter()
                        .map(|pair| pair.name().to_owned()),
                )
                .collect();
            families.insert(desc.fq_name.clone(), Family { kind, labels });
        }
    }
    families
}

/// Every metric family either binary exports, from their metric sets registered as each
/// binary registers them (one registry per binary, so a name clash fails here too). A family
/// both export (the API and pod client histograms) must be the same in both.
fn exported_families() -> Families {
    baton_shared::crypto::install_default_provider();
    let pods_config = PodsConfig::default();

    let controller = Registry::new();
    let api = RequestDurationLayer::register(&controller).expect("API client histogram");
    let kubernetes = KubernetesConfig::default();
    let limits = RateLimitLayer::register(&kubernetes, &controller).expect("API client limits");
    let rollout = ControllerMetrics::register(&controller).expect("rollout metrics");
    LeaderMetrics::register(&controller).expect("leader metrics");
    let pods = PodHttpClient::new(&pods_config, &controller).expect("pod client");
    let certificates = CertificateMetrics::register(&controller).expect("certificate metrics");
    let cluster_out =
        baton_controller::clusters::register_out_gauge(&controller).expect("member metrics");
    // Every field of each set is named (no `..`): a metric added to a set does not compile
    // here until it is listed, so it cannot escape the check.
    let CertificateMetrics {
        expiry,
        secret_writes,
        injections,
        failure_policy,
    } = &certificates;
    let mut collectors = rollout.collectors();
    collectors.extend(limits.collectors());
    collectors.extend([
        api.histogram() as &dyn Collector,
        pods.duration_histogram(),
        expiry,
        secret_writes,
        injections,
        failure_policy,
        &cluster_out,
    ]);
    let mut families = families_of(&controller, &collectors);

    let webhook = Registry::new();
    let api = RequestDurationLayer::register(&webhook).expect("API client histogram");
    let limits = RateLimitLayer::register(&kubernetes, &webhook).expect("API client limits");
    let [rate_limited, rate_limit_qps] = limits.collectors();
    let admission = WebhookMetrics::register(&webhook).expect("webhook metrics");
    let pods = PodHttpClient::new(&pods_config, &webhook).expect("pod client");
    let zpdb = ZpdbMetrics::register(&webhook).expect("zpdb metrics");
    let WebhookMetrics {
        request_duration,
        inflight: inflight_requests,
        request_bytes,
        response_bytes,
        decisions,
        parent_lookups,
        failures,
    } = &admission;
    let ZpdbMetrics {
        eviction_requests,
        inflight,
        configurations,
        api_reads,
        api_writes,
    } = &zpdb;
    let from_webhook = families_of(
        &webhook,
        &[
            api.histogram(),
            rate_limited,
            rate_limit_qps,
            pods.duration_histogram(),
            request_duration,
            inflight_requests,
            request_bytes,
            response_bytes,
            decisions,
            parent_lookups,
            failures.counter(),
            eviction_requests,
            inflight,
            configurations,
            api_reads,
            api_writes,
        ],
    );
    for (name, family) in from_webhook {
        if let Some(other) = families.get(&name) {
            assert_eq!(other, &family, "{name} differs between the binaries");
        }
        families.insert(name, family);
    }
    families
}

/// Every series name either binary exports and the labels its series carry.
fn exported_metrics() -> Exported {
    let mut exported = Exported::new();
    for (name, family) in exported_families() {
        add_family(&mut exported, &name, family.kind, &family.labels);
    }
    exported
}

// ---------------------------------------------------------------------------------------------
// What the dashboard and the rules query

/// One PromQL expression and where it comes from (named in every failure).
#[derive(Debug, Clone)]
struct Query {
    origin: String,
    expr: String,
}

/// Grafana's variables replaced by values PromQL parses: `$__rate_interval` and its kin by a
/// duration, any other (`$namespace`, `${rollout_group}`) by a regex that matches anything.
fn without_grafana_variables(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, consumed) = match after.strip_prefix('{') {
            Some(braced) => {
                let end = braced.find('}').unwrap_or(braced.len());
                (&braced[..end], end + 2)
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        out.push_str(if name.starts_with("__") { "5m" } else { ".*" });
        rest = &after[consumed.min(after.len())..];
    }
    out.push_str(rest);
    out
}

/// Every query of a Grafana dashboard: each panel's targets (rows' panels too) and each
/// query variable's selector (`label_values(<selector>, <label>)`).
fn dashboard_queries(dashboard: &Value) -> Vec<Query> {
    fn panels<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            out.push(panel);
            if let Some(nested) = panel.get("panels") {
                panels(nested, out);
            }
        }
    }
    let mut all = Vec::new();
    panels(&dashboard["panels"], &mut all);
    let mut queries = Vec::new();
    for panel in all {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let ref_id = target["refId"].as_str().unwrap_or("?");
                queries.push(Query {
                    origin: format!("dashboard panel {title:?} query {ref_id}"),
                    expr: expr.to_owned(),
                });
            }
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let query = variable["query"]
            .get("query")
            .unwrap_or(&variable["query"])
            .as_str()
            .unwrap_or("");
        if let Some(arguments) = query
            .strip_prefix("label_values(")
            .and_then(|inner| inner.strip_suffix(')'))
        {
            let selector = arguments.rsplit_once(',').map_or(arguments, |(s, _)| s);
            queries.push(Query {
                origin: format!("dashboard variable {}", variable["name"]),
                expr: selector.trim().to_owned(),
            });
        }
    }
    queries
}

/// Every `expr` of a Prometheus rules file.
fn rule_queries(rules: &str) -> Vec<Query> {
    let rules: serde_json::Value = serde_saphyr::from_str(rules).expect("the rules file is YAML");
    let mut queries = Vec::new();
    for group in rules["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let name = rule["alert"].as_str().or(rule["record"].as_str());
            let expr = rule["expr"].as_str().expect("every rule has an expr");
            queries.push(Query {
                origin: format!("rule {}", name.unwrap_or("(unnamed)")),
                expr: expr.to_owned(),
            });
        }
    }
    queries
}

/// What an expression reads: the metrics it selects (`foo{…}`, `foo[5m]`,
/// `{__name__="foo"}`) with the labels their matchers use, and the labels it groups or matches
/// by (`by`, `without`, `on`, `ignoring`, `group_left`, `group_right`).
#[derive(Debug, Default)]
struct Selected {
    metrics: BTreeMap<String, BTreeSet<String>>,
    grouping: BTreeSet<String>,
}

impl ExprVisitor for Selected {
    type Error = std::convert::Infallible;
    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, Self::Error> {
        let selector = match expr {
            Expr::VectorSelector(selector) => selector,
            Expr::MatrixSelector(matrix) => &matrix.vs,
            Expr::Aggregate(aggregate) => {
                if let Some(modifier) = &aggregate.modifier {
                    self.grouping
                        .extend(modifier.labels().labels.iter().cloned());
                }
                return Ok(true);
            }
            Expr::Binary(binary) => {
                if let Some(modifier) = &binary.modifier {
                    if let Some(matching) = &modifier.matching {
                        self.grouping
                            .extend(matching.labels().labels.iter().cloned());
                    }
                    if let Some(include) = modifier.card.labels() {
                        self.grouping.extend(include.labels.iter().cloned());
                    }
                }
                return Ok(true);
            }
            _ => return Ok(true),
        };
        let by_name = selector
            .matchers
            .matchers
            .iter()
            .filter(|matcher| matcher.name == "__name__")
            .map(|matcher| matcher.value.clone());
        let names: Vec<String> = selector.name.clone().into_iter().chain(by_name).collect();
        let labels = selector
            .matchers
            .matchers
            .iter()
            .filter(|matcher| matcher.name != "__name__")
            .map(|matcher| matcher.name.clone());
        let labels: BTreeSet<String> = labels.collect();
        for name in names {
            self.metrics.entry(name).or_default().extend(labels.clone());
        }
        Ok(true)
    }
}

fn selected(expr: &str) -> Result<Selected, String> {
    let parsed = parser::parse(&without_grafana_variables(expr))?;
    let mut selected = Selected::default();
    let Ok(_) = walk_expr(&mut selected, &parsed);
    Ok(selected)
}

/// What is wrong with `queries` against `exported`: an expression that does not parse, selects
/// no metric, selects one baton does not export, matches on a label that metric does not have,
/// or groups by a label none of its metrics has. Empty when all is well.
fn unknown_metrics(queries: &[Query], exported: &Exported) -> Vec<String> {
    let mut problems = Vec::new();
    for query in queries {
        let origin = &query.origin;
        let selected = match selected(&query.expr) {
            Ok(selected) => selected,
            Err(error) => {
                problems.push(format!(
                    "{origin}: does not parse ({error}): {}",
                    query.expr
                ));
                continue;
            }
        };
        if selected.metrics.is_empty() {
            problems.push(format!(
                "{origin}: selects no metric at all: {}",
                query.expr
            ));
        }
        let mut any_label: BTreeSet<&str> = TARGET_LABELS.into_iter().collect();
        for (name, matched) in &selected.metrics {
            let Some(labels) = exported.get(name) else {
                problems.push(format!("{origin}: {name} is not a metric baton exports"));
                continue;
            };
            any_label.extend(labels.iter().map(String::as_str));
            for label in matched {
                if !labels.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                    problems.push(format!(
                        "{origin}: {name} has no label {label} (it has {labels:?})"
                    ));
                }
            }
        }
        for label in &selected.grouping {
            if !any_label.contains(label.as_str()) {
                problems.push(format!(
                    "{origin}: groups by {label}, which none of its metrics has"
                ));
            }
        }
    }
    problems
}

fn dashboard() -> Value {
    let path = monitoring_dir().join("dashboard.json");
    serde_json::from_str(&read(&path)).unwrap_or_else(|error| panic!("{path:?}: {error}"))
}

fn alerts() -> String {
    read(&monitoring_dir().join("alerts.yaml"))
}

/// Runs `program` in `dir` and returns its output, failing with it (and its arguments).
fn run(dir: &Path, program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|error| {
            panic!("{program} runs (tests/control-plane/install.sh installs it): {error}")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{program} {} failed:\n{text}",
        args.join(" ")
    );
    text
}

/// promtool (Debian's prometheus) in `deploy/monitoring/`.
fn promtool(args: &[&str]) -> String {
    run(&monitoring_dir(), "promtool", args)
}

// ---------------------------------------------------------------------------------------------
// Scenarios

#[test]
fn prometheus_accepts_the_alerting_rules() {
    // Given the rules file as shipped; when Prometheus' own checker loads it
    let output = promtool(&["check", "rules", "alerts.yaml"]);
    // then every rule is valid, and there are rules
    let rules = rule_queries(&alerts()).len();
    assert!(rules >= 5, "only {rules} rules in alerts.yaml");
    assert!(
        output.contains(&format!("{rules} rules found")),
        "promtool found a different number of rules than alerts.yaml has ({rules}):\n{output}"
    );
}

#[test]
fn the_alerts_fire_when_their_unit_tests_say() {
    // Given series for a waiting group (with a standby's stale gauge), a lost leader, a
    // certificate not renewed and failing reconciles; when promtool evaluates the rules over them
    let output = promtool(&["test", "rules", "alerts_test.yaml"]);
    // then each alert fires exactly when and with the labels and text its test expects
    assert!(output.contains("SUCCESS"), "{output}");
}

#[test]
fn every_metric_the_dashboard_and_the_alerts_query_is_one_baton_exports() {
    // Given what both binaries export, the dashboard's queries and the rules'
    let exported = exported_metrics();
    let mut queries = dashboard_queries(&dashboard());
    let from_dashboard = queries.len();
    queries.extend(rule_queries(&alerts()));
    assert!(
        from_dashboard >= 20,
        "only {from_dashboard} queries found in the dashboard: is its layout still read right?"
    );

    // When each is parsed for the metrics it selects
    let problems = unknown_metrics(&queries, &exported);

    // Then each names only exported metrics
    assert!(
        problems.is_empty(),
        "{}\n\nbaton exports: {exported:#?}",
        problems.join("\n")
    );
}

#[test]
fn a_misspelled_metric_in_the_dashboard_is_caught() {
    // Given the real dashboard with one metric name misspelled in one panel
    let exported = exported_metrics();
    let text = read(&monitoring_dir().join("dashboard.json"));
    let misspelled = text.replacen("baton_rollout_pods_ready{", "baton_rollout_pod_ready{", 1);
    assert_ne!(text, misspelled, "the dashboard shows ready pods");
    let dashboard: Value = serde_json::from_str(&misspelled).unwrap();

    // When it is checked
    let problems = unknown_metrics(&dashboard_queries(&dashboard), &exported);

    // Then exactly that name, in that panel, is reported
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].contains("baton_rollout_pod_ready is not a metric baton exports")
            && problems[0].contains("Pods updated and ready"),
        "{problems:#?}"
    );
}

#[test]
fn the_checker_reports_unknown_names_unparsable_queries_and_histogram_suffixes() {
    let exported = exported_metrics();
    let query = |expr: &str| Query {
        origin: "test".to_owned(),
        expr: expr.to_owned(),
    };
    let problems = |expr: &str| unknown_metrics(&[query(expr)], &exported);

    // Names in selectors, ranges, by-clauses, functions and Grafana variables are told apart
    assert_eq!(
        problems(
            r#"sum by (rollout_group) (rate(rollout_operator_group_reconciles_total{namespace=~"$namespace"}[$__rate_interval])) > 0 and on (job) baton_leader == 1"#
        ),
        Vec::<String>::new()
    );
    // A histogram is queried through its series, never its bare name
    assert!(
        problems(r#"histogram_quantile(0.99, rate(rollout_operator_request_duration_seconds_bucket[5m]))"#)
            .is_empty()
    );
    assert_eq!(
        problems("rate(rollout_operator_request_duration_seconds[5m])").len(),
        1
    );
    // A misspelled name, also one given as __name__, is reported by name
    assert_eq!(
        problems("rate(rollout_operator_group_reconciles_totl[5m])"),
        vec!["test: rollout_operator_group_reconciles_totl is not a metric baton exports"]
    );
    assert_eq!(
        problems(r#"{__name__="baton_leaders"}"#),
        vec!["test: baton_leaders is not a metric baton exports"]
    );
    // So is a label a matcher or a grouping names that the metrics do not have
    assert_eq!(
        problems(r#"rate(baton_admission_decisions_total{reslt="denied"}[5m])"#),
        vec![
            r#"test: baton_admission_decisions_total has no label reslt (it has {"result", "webhook"})"#
        ]
    );
    assert_eq!(
        problems("max by (namespace, rollout_grup) (baton_rollout_group_waiting)"),
        vec!["test: groups by rollout_grup, which none of its metrics has"]
    );
    assert!(problems("histogram_quantile(0.9, sum by (le) (rate(rollout_operator_group_reconcile_duration_seconds_bucket[5m])))").is_empty());
    assert_eq!(
        problems("sum by (le) (rollout_operator_group_reconcile_duration_seconds_count)"),
        vec!["test: groups by le, which none of its metrics has"]
    );
    // A query that does not parse, or selects nothing, is a problem too
    assert!(problems("sum(baton_leader")[0].contains("does not parse"));
    assert!(problems("vector(1)")[0].contains("selects no metric"));
}

#[tokio::test]
async fn the_monitoring_kustomization_applies_on_a_bare_cluster() {
    // Given a cluster with no monitoring CRDs (no Prometheus Operator) and a namespace
    let control_plane = ControlPlane::shared().await;
    let ns = TestNamespace::create(control_plane, "monitoring").await;
    let kubeconfig = control_plane.kubeconfig_path().to_str().unwrap().to_owned();

    // When deploy/monitoring is applied as docs/alerts.md says
    let output = run(
        &monitoring_dir(),
        control_plane.kubectl().to_str().unwrap(),
        &[
            "--kubeconfig",
            &kubeconfig,
            "apply",
            "-k",
            ".",
            "-n",
            ns.name(),
        ],
    );

    // Then Grafana's sidecar finds the dashboard and Prometheus the rules, as the files have them
    let config_maps = ns.api::<ConfigMap>();
    let dashboard = config_maps
        .get("baton-grafana-dashboard")
        .await
        .unwrap_or_else(|error| panic!("{error}; kubectl said:\n{output}"));
    assert_eq!(
        dashboard
            .metadata
            .labels
            .unwrap_or_default()
            .get("grafana_dashboard"),
        Some(&"1".to_owned())
    );
    let data = dashboard.data.unwrap_or_default();
    assert_eq!(
        data.get("baton.json"),
        Some(&read(&monitoring_dir().join("dashboard.json")))
    );
    let rules = config_maps.get("baton-prometheus-rules").await.unwrap();
    assert_eq!(
        rules.data.unwrap_or_default().get("baton-alerts.yaml"),
        Some(&alerts())
    );
}

#[test]
fn the_prometheus_rule_docs_alerts_md_makes_carries_the_rules_file() {
    // Given the command docs/alerts.md gives for the Prometheus Operator (the block after its
    // `prometheus-rule` marker), without its final `| kubectl apply …`
    let docs = read(&monitoring_dir().join("../../docs/alerts.md"));
    let block = docs
        .split_once("<!-- prometheus-rule -->")
        .and_then(|(_, after)| after.split_once("```sh\n"))
        .and_then(|(_, after)| after.split_once("```"))
        .map(|(block, _)| block)
        .expect("docs/alerts.md has a sh block after <!-- prometheus-rule -->");
    let (make, apply) = block
        .rsplit_once("| kubectl apply")
        .expect("the block ends by piping into kubectl apply");
    assert!(apply.contains("-f -"), "{block}");

    // When it runs from the repository's root
    let repository = monitoring_dir().join("../..");
    let rendered = run(&repository, "sh", &["-c", make]);

    // Then it is a PrometheusRule whose spec is exactly the plain rules file
    let rule: serde_json::Value = serde_saphyr::from_str(&rendered).expect("YAML");
    assert_eq!(
        rule["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    let plain: serde_json::Value = serde_saphyr::from_str(&alerts()).unwrap();
    assert_eq!(rule["spec"], plain);
}

/// The query of the dashboard panel titled `title` (its first), as Grafana sends it with every
/// variable at "All" and a one-minute rate interval.
fn panel_query(dashboard: &Value, title: &str) -> String {
    let expr = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|panel| panel["title"] == title)
        .and_then(|panel| panel["targets"][0]["expr"].as_str())
        .unwrap_or_else(|| panic!("the dashboard has a panel {title:?} with a query"));
    expr.replace("$__rate_interval", "1m")
        .replace("$namespace", ".*")
        .replace("$rollout_group", ".*")
}

/// The expression of the alert named `alert` in alerts.yaml.
fn alert_expr(alert: &str) -> String {
    let rules: serde_json::Value = serde_saphyr::from_str(&alerts()).unwrap();
    rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().into_iter().flatten())
        .find(|rule| rule["alert"].as_str() == Some(alert))
        .and_then(|rule| rule["expr"].as_str())
        .unwrap_or_else(|| panic!("alerts.yaml has an alert {alert}"))
        .to_owned()
}

#[tokio::test]
async fn the_dashboard_and_the_waiting_alert_read_a_live_stuck_rollout() {
    // Given a ready group of 3 zones under a controller that a real Prometheus scrapes
    let scene = Scene::start("monitoring-live").await;
    let client = scene.namespace.client();
    let ns = scene.namespace.name();
    let names = create_ready_group(&client, ns, &["a", "b", "c"], 2).await;
    let target = scene
        .controller
        .ops_address
        .parse()
        .expect("a socket address");
    let prometheus = Prometheus::start(target).await;
    let dashboard = dashboard();

    // When a version whose pods crash-loop is rolled out, so the group waits on zone a
    scene.simulator.break_version("v2");
    roll_out(&client, ns, &names, "v2").await;

    // Then the waiting alert's expression names the group (its `for:` aside) ...
    let waiting = alert_expr("BatonRolloutGroupWaiting");
    prometheus
        .wait_value(&format!("count({waiting})"), 1.0)
        .await;
    prometheus
        .wait_value(
            &format!(
                r#"count(({waiting}) and on (rollout_group) baton_rollout_group_waiting{{rollout_group="ingester"}})"#
            ),
            1.0,
        )
        .await;
    // ... and the dashboard shows one leader, one group of three zones, waiting, with zone a
    // partly updated and zones b and c not at all
    for (title, value) in [
        ("Leaders", 1.0),
        ("Rollout groups", 1.0),
        ("Zones", 3.0),
        ("Groups waiting", 1.0),
        ("Groups halted", 0.0),
    ] {
        prometheus
            .wait_value(&panel_query(&dashboard, title), value)
            .await;
    }
    let progress = panel_query(&dashboard, "Zone progress (updated / total)");
    prometheus
        .wait_value(
            &format!(
                r#"({progress}) and on (statefulset) baton_rollout_pods{{statefulset="ingester-zone-a"}}"#
            ),
            0.5,
        )
        .await;
    prometheus
        .wait_value(&format!("count(({progress}) == 0)"), 2.0)
        .await;
}

fn type_name(kind: MetricType) -> &'static str {
    match kind {
        MetricType::COUNTER => "counter",
        MetricType::GAUGE => "gauge",
        MetricType::HISTOGRAM => "histogram",
        MetricType::SUMMARY => "summary",
        MetricType::UNTYPED => "untyped",
    }
}

#[test]
fn every_exported_metric_is_documented_with_its_type_and_labels() {
    // Given the table of docs/alerts.md's "Metrics" section: | `name` | type | `labels` | … |
    let docs = read(&monitoring_dir().join("../../docs/alerts.md"));
    let section = docs
        .split_once("\n## Metrics\n")
        .map(|(_, after)| after.split("\n## ").next().unwrap_or(after))
        .expect("docs/alerts.md has a Metrics section");
    let mut documented = BTreeMap::new();
    for row in section.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_owned();
        let labels: BTreeSet<String> = cells[3]
            .split(',')
            .map(|label| label.trim().trim_matches('`').to_owned())
            .filter(|label| !label.is_empty() && label != "—")
            .collect();
        documented.insert(name, (cells[2].to_owned(), labels));
    }

    // When it is compared with what the binaries export
    let exported: BTreeMap<String, (String, BTreeSet<String>)> = exported_families()
        .into_iter()
        .map(|(name, family)| (name, (type_name(family.kind).to_owned(), family.labels)))
        .collect();

    // Then each metric is there once, with its type and labels, and nothing else is
    let mut problems = Vec::new();
    for (name, (kind, labels)) in &exported {
        match documented.get(name) {
            None => problems.push(format!("{name} ({kind}, {labels:?}) is not documented")),
            Some(row) if row != &(kind.clone(), labels.clone()) => problems.push(format!(
                "{name} is documented as {row:?} but is ({kind}, {labels:?})"
            )),
            Some(_) => {}
        }
    }
    for name in documented
        .keys()
        .filter(|name| !exported.contains_key(*name))
    {
        problems.push(format!("{name} is documented but not exported"));
    }
    assert!(
        problems.is_empty(),
        "docs/alerts.md, Metrics:\n{}",
        problems.join("\n")
    );
}
