//! The multi-cluster setup of docs/multi-cluster.md ("Setting it up"), read from that page and
//! run: the member overlay applied in each member, `kubectl baton cluster add` writing each
//! member's Secret in the hub, the hub's Role for those Secrets and its `controller.clusters`.
//! The three-cluster tests set their members up with these ([`crate::cluster_support`]), so the
//! page cannot drift from what is tested: a block renamed, a patch that no longer applies, a
//! flag that changed, and the trio does not start.
//!
//! The page writes its examples for the groups' namespace `mimir` ([`DOCS_NAMESPACE`]) and
//! clusters named cluster-a (the hub), cluster-b and cluster-c, contexts named after them, as the
//! trio's are; a test swaps in its own namespace, and nothing else.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::control_plane::tool;
use crate::manifests::deploy_dir;
use crate::renders::{documents, run};

/// The page the setup is read from.
pub fn docs_page() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/multi-cluster.md")
}

/// The groups' namespace of the page's examples.
pub const DOCS_NAMESPACE: &str = "mimir";

/// The text of the fenced block of `page` whose first line is `# name` (as the page heads each
/// file it shows: `# my-member-overlay/kustomization.yaml`), without the indentation of the
/// list item it sits in.
pub fn docs_block(page: &str, name: &str) -> anyhow::Result<String> {
    let heading = format!("# {name}");
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if !trimmed.starts_with("```") || trimmed.len() == 3 {
            continue;
        }
        let indent = line.len() - trimmed.len();
        let mut block = Vec::new();
        for line in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            block.push(line.get(indent..).unwrap_or(line.trim_start()));
        }
        if block.first() == Some(&heading.as_str()) {
            return Ok(block.join("\n") + "\n");
        }
    }
    bail!("{} has no block headed {heading:?}", docs_page().display())
}

/// The arguments of the page's command line that starts with `kubectl baton` followed by
/// `starts` (`cluster add cluster-b`), as `kubectl-baton` takes them.
pub fn docs_command(page: &str, starts: &str) -> anyhow::Result<Vec<String>> {
    let prefix = format!("kubectl baton {starts} ");
    let line = page
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with(&prefix))
        .with_context(|| format!("{} has no line {prefix:?}…", docs_page().display()))?;
    Ok(line.split_whitespace().skip(2).map(str::to_owned).collect())
}

/// The page's text.
pub fn read_docs() -> String {
    std::fs::read_to_string(docs_page())
        .unwrap_or_else(|error| panic!("reading {}: {error}", docs_page().display()))
}

/// Writes the page's overlay `overlay` (its files `files`, each headed `# overlay/file`) into
/// `directory`, beside a link to deploy/ (the overlays name `../deploy`), `mimir` replaced by
/// `namespace`; returns the overlay's folder.
pub fn write_overlay(
    page: &str,
    directory: &Path,
    overlay: &str,
    files: &[&str],
    namespace: &str,
) -> anyhow::Result<PathBuf> {
    let deploy = directory.join("deploy");
    if !deploy.exists() {
        std::os::unix::fs::symlink(deploy_dir().canonicalize()?, &deploy)?;
    }
    let folder = directory.join(overlay);
    std::fs::create_dir_all(&folder)?;
    for file in files {
        let text = docs_block(page, &format!("{overlay}/{file}"))?;
        std::fs::write(folder.join(file), text.replace(DOCS_NAMESPACE, namespace))?;
    }
    Ok(folder)
}

/// What `kubectl kustomize folder` renders.
pub fn kustomize(folder: &Path) -> anyhow::Result<Vec<Value>> {
    let (ok, output) = run(
        "kubectl",
        &["kustomize", folder.to_str().context("a UTF-8 path")?],
        None,
    );
    if !ok {
        bail!("kubectl kustomize {} failed:\n{output}", folder.display());
    }
    Ok(documents(&output))
}

/// The page's member overlay (`my-member-overlay`) for the groups' `namespace`, rendered.
pub fn member_overlay(page: &str, directory: &Path, namespace: &str) -> anyhow::Result<Vec<Value>> {
    let folder = write_overlay(
        page,
        directory,
        "my-member-overlay",
        &[
            "kustomization.yaml",
            "groups-namespace.yaml",
            "certificate.yaml",
        ],
        namespace,
    )?;
    kustomize(&folder)
}

/// What of the member overlay the test clusters cannot run, by `kind/name`: they have no
/// cert-manager (its Issuer and Certificate) and no node to run baton-webhook on, so the six
/// webhook configurations, `failurePolicy: Fail`, would refuse every change to the groups'
/// StatefulSets. The scenario of the member's guards registers them against a replica of its
/// own (tests/tests/clusters.rs).
pub const NOT_IN_TEST_CLUSTERS: [&str; 8] = [
    "Certificate/baton-webhook",
    "Issuer/baton-webhook",
    "MutatingWebhookConfiguration/baton-prepare-downscale",
    "ValidatingWebhookConfiguration/baton-no-downscale",
    "ValidatingWebhookConfiguration/baton-pod-eviction",
    "ValidatingWebhookConfiguration/baton-record-guard",
    "ValidatingWebhookConfiguration/baton-state-guard",
    "ValidatingWebhookConfiguration/baton-zpdb-validation",
];

fn kind_and_name(object: &Value) -> String {
    format!(
        "{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Applies the page's member overlay in the cluster of `kubeconfig` for the groups'
/// `namespace`, as the page's `kubectl apply --server-side -k my-member-overlay` does, but for
/// [`NOT_IN_TEST_CLUSTERS`] (an error if those are not exactly what it leaves out).
pub fn install_member(kubeconfig: &Path, namespace: &str) -> anyhow::Result<()> {
    let page = read_docs();
    let directory = tempfile::tempdir()?;
    let objects = member_overlay(&page, directory.path(), namespace)?;
    let (left_out, applied): (Vec<Value>, Vec<Value>) = objects
        .into_iter()
        .partition(|object| NOT_IN_TEST_CLUSTERS.contains(&kind_and_name(object).as_str()));
    let mut left: Vec<String> = left_out.iter().map(kind_and_name).collect();
    left.sort();
    if left != NOT_IN_TEST_CLUSTERS {
        bail!("the member overlay renders {left:?} of {NOT_IN_TEST_CLUSTERS:?}");
    }
    let list = directory.path().join("applied.json");
    std::fs::write(
        &list,
        serde_json::to_vec(
            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": applied}),
        )?,
    )?;
    let output = std::process::Command::new(tool("kubectl"))
        .args(["apply", "--server-side", "-f"])
        .arg(&list)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .context("running kubectl")?;
    if !output.status.success() {
        bail!(
            "applying the member overlay:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// The page's `kubectl baton cluster add` for `cluster`, for the groups' `namespace`, with
/// baton's namespace in the hub as `system_namespace` (the trio's controller keeps everything
/// in the groups' namespace; the page's is baton-system, the default).
pub fn cluster_add_args(
    page: &str,
    cluster: &str,
    namespace: &str,
    system_namespace: &str,
) -> anyhow::Result<Vec<String>> {
    let mut args: Vec<String> = docs_command(page, &format!("cluster add {cluster}"))?
        .into_iter()
        .map(|arg| {
            if arg == DOCS_NAMESPACE {
                namespace.to_owned()
            } else {
                arg
            }
        })
        .collect();
    args.extend(["--system-namespace".to_owned(), system_namespace.to_owned()]);
    Ok(args)
}

/// The page's `kubectl baton cluster add` handing `own`'s webhook a token of `member`'s
/// `baton-peer` ("Downscales across clusters": written for cluster-b's webhook and cluster-a),
/// for the groups' `namespace`, the Secret in `own`'s `namespace` too (the trio keeps
/// everything there).
pub fn peer_add_args(
    page: &str,
    member: &str,
    own: &str,
    namespace: &str,
) -> anyhow::Result<Vec<String>> {
    let args = docs_command(
        page,
        "cluster add cluster-a --from-context cluster-a --context cluster-b",
    )?;
    let mut args: Vec<String> = args
        .into_iter()
        .map(|arg| match arg.as_str() {
            "cluster-a" => member.to_owned(),
            "cluster-b" => own.to_owned(),
            "peer-cluster-a" => format!("peer-{member}"),
            DOCS_NAMESPACE => namespace.to_owned(),
            _ => arg,
        })
        .collect();
    args.extend(["--system-namespace".to_owned(), namespace.to_owned()]);
    Ok(args)
}

/// The page's `kubectl --context cluster-a apply -n NAMESPACE -f FILE` lines (the peer
/// identity in the hub; its `-k` overlays are not these), as (namespace, file under the
/// repository).
pub fn docs_hub_applies(page: &str) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let prefix = "kubectl --context cluster-a apply ";
    let applies: Vec<(String, PathBuf)> = page
        .lines()
        .map(str::trim)
        .filter_map(|line| line.strip_prefix(prefix))
        .filter(|rest| rest.split_whitespace().any(|word| word == "-f"))
        .map(|rest| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let after = |flag: &str| {
                words
                    .iter()
                    .position(|word| *word == flag)
                    .and_then(|at| words.get(at + 1))
                    .map(|word| (*word).to_owned())
                    .with_context(|| format!("{prefix}{rest} has no {flag}"))
            };
            let file = after("-f")?;
            Ok((after("-n")?, deploy_dir().join("..").join(file)))
        })
        .collect::<anyhow::Result<_>>()?;
    if applies.is_empty() {
        bail!("{} has no line {prefix:?}…", docs_page().display());
    }
    Ok(applies)
}

/// Gives the hub of `kubeconfig` the peer identity as the page does (its `kubectl apply`
/// lines), the groups' `namespace` for `mimir`; baton-system is created if missing (the hub's
/// install has it).
pub fn install_peer(kubeconfig: &Path, namespace: &str) -> anyhow::Result<()> {
    let kubectl = |args: &[&str]| {
        std::process::Command::new(tool("kubectl"))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .context("running kubectl")
    };
    let created = kubectl(&["create", "namespace", "baton-system"])?;
    let stderr = String::from_utf8_lossy(&created.stderr);
    if !created.status.success() && !stderr.contains("AlreadyExists") {
        bail!("creating baton-system: {stderr}");
    }
    for (target, file) in docs_hub_applies(&read_docs())? {
        let target = if target == DOCS_NAMESPACE {
            namespace
        } else {
            target.as_str()
        };
        let file = file.to_str().context("a UTF-8 path")?;
        let output = kubectl(&["apply", "--server-side", "-n", target, "-f", file])?;
        if !output.status.success() {
            bail!(
                "applying {file} in {target}:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    Ok(())
}

/// The hub's configuration file as the page's `my-hub-overlay/clusters-config.yaml` gives it.
pub fn docs_hub_config(page: &str) -> anyhow::Result<String> {
    let block = docs_block(page, "my-hub-overlay/clusters-config.yaml")?;
    let configmap: Value = serde_saphyr::from_str(&block)?;
    configmap["data"]["config.yaml"]
        .as_str()
        .map(str::to_owned)
        .context("clusters-config.yaml has no data.config.yaml")
}

/// `controller.clusters` of `config` (a configuration file), as (name, kubeconfig_secret).
pub fn clusters_of(config: &str) -> anyhow::Result<Vec<(String, String)>> {
    let config: Value = serde_saphyr::from_str(config)?;
    Ok(config["controller"]["clusters"]
        .as_array()
        .context("no controller.clusters")?
        .iter()
        .map(|member| {
            (
                member["name"].as_str().unwrap_or_default().to_owned(),
                member["kubeconfig_secret"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::renders::find;

    #[test]
    fn blocks_are_found_by_their_heading_and_lose_the_list_items_indentation() {
        let page = "1. Step:\n\n   ```yaml\n   # a/b.yaml\n   key:\n     nested: 1\n   ```\n\n```sh\nkubectl baton cluster add x --from-context x\n```\n";
        assert_eq!(
            docs_block(page, "a/b.yaml").unwrap(),
            "# a/b.yaml\nkey:\n  nested: 1\n"
        );
        assert!(docs_block(page, "a/c.yaml").is_err());
        assert_eq!(
            docs_command(page, "cluster add x").unwrap(),
            ["cluster", "add", "x", "--from-context", "x"]
        );
    }

    #[test]
    fn the_docs_member_overlay_names_the_groups_namespace_everywhere_deploy_members_needs_it() {
        let page = read_docs();
        let directory = tempfile::tempdir().unwrap();
        let objects = member_overlay(&page, directory.path(), "team-a").unwrap();
        let text = serde_json::to_string(&objects).unwrap();
        assert!(!text.contains(DOCS_NAMESPACE), "mimir left in:\n{text}");
        assert_eq!(
            find(&objects, "ConfigMap", "baton-config")["data"]["groups-namespace"],
            "team-a"
        );
        for role in [
            "baton-member-groups",
            "baton-webhook-groups",
            "baton-peer-groups",
        ] {
            for kind in ["Role", "RoleBinding"] {
                assert_eq!(
                    find(&objects, kind, role)["metadata"]["namespace"],
                    "team-a",
                    "{kind} {role}"
                );
            }
        }
        // The webhook's certificate comes from cert-manager, for the webhook's Service, and
        // every configuration has its CA injected and judges the groups' namespace alone
        let certificate = find(&objects, "Certificate", "baton-webhook");
        assert_eq!(certificate["spec"]["secretName"], "baton-webhook-tls");
        assert_eq!(
            certificate["spec"]["dnsNames"],
            serde_json::json!(["baton-webhook.baton-system.svc"])
        );
        let configurations: Vec<&Value> = objects
            .iter()
            .filter(|object| {
                object["kind"]
                    .as_str()
                    .is_some_and(|kind| kind.ends_with("WebhookConfiguration"))
            })
            .collect();
        assert_eq!(configurations.len(), 6);
        for configuration in configurations {
            let name = kind_and_name(configuration);
            assert_eq!(
                configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                "baton-system/baton-webhook",
                "{name}"
            );
            for webhook in configuration["webhooks"].as_array().unwrap() {
                assert_eq!(
                    webhook["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
                    "team-a",
                    "{name}"
                );
            }
        }
        let image =
            find(&objects, "Deployment", "baton-webhook")["spec"]["template"]["spec"]["containers"]
                [0]["image"]
                .as_str()
                .unwrap()
                .to_owned();
        assert!(
            image.starts_with("registry.example.com/baton@sha256:"),
            "{image}"
        );
        let mut left_out: Vec<String> = objects
            .iter()
            .map(kind_and_name)
            .filter(|name| NOT_IN_TEST_CLUSTERS.contains(&name.as_str()))
            .collect();
        left_out.sort();
        assert_eq!(left_out, NOT_IN_TEST_CLUSTERS);
    }

    #[test]
    fn the_docs_peer_identity_may_write_records_and_read_pods_and_statefulsets_alone() {
        let page = read_docs();
        let directory = tempfile::tempdir().unwrap();
        let objects = member_overlay(&page, directory.path(), "team-a").unwrap();
        // The member overlay has baton-peer in baton-system, bound in the groups' namespace to
        // records (ConfigMaps, no patch or delete) and reading pods and StatefulSets alone, and
        // a record writer
        let account = find(&objects, "ServiceAccount", "baton-peer");
        assert_eq!(account["metadata"]["namespace"], "baton-system");
        let role = find(&objects, "Role", "baton-peer-groups");
        assert_eq!(
            role["rules"],
            serde_json::json!([
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list", "watch"]},
            ])
        );
        assert_eq!(
            find(&objects, "RoleBinding", "baton-peer-groups")["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "baton-peer",
                                "namespace": "baton-system"}])
        );
        let webhook = find(&objects, "Deployment", "baton-webhook");
        let writers = webhook["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|variable| variable["name"] == "BATON_WEBHOOK__RECORD_WRITERS")
            .and_then(|variable| variable["value"].as_str())
            .unwrap();
        assert!(
            writers
                .split(',')
                .any(|writer| writer == "system:serviceaccount:baton-system:baton-peer"),
            "{writers}"
        );
        // The page gives the hub the same two files, and each webhook the others' tokens
        let applies = docs_hub_applies(&page).unwrap();
        let files: Vec<(&str, String)> = applies
            .iter()
            .map(|(namespace, file)| {
                assert!(file.exists(), "{}", file.display());
                let name = file.file_name().unwrap().to_string_lossy().into_owned();
                (namespace.as_str(), name)
            })
            .collect();
        assert_eq!(
            files,
            [
                ("baton-system", "peer-account.yaml".to_owned()),
                (DOCS_NAMESPACE, "peer-rbac.yaml".to_owned())
            ]
        );
        assert_eq!(
            peer_add_args(&page, "cluster-c", "cluster-a", "team-a").unwrap(),
            [
                "cluster",
                "add",
                "cluster-c",
                "--from-context",
                "cluster-c",
                "--context",
                "cluster-a",
                "-n",
                "team-a",
                "--service-account",
                "baton-system/baton-peer",
                "--secret",
                "peer-cluster-c",
                "--system-namespace",
                "team-a"
            ]
        );
    }

    #[test]
    fn the_docs_hub_configuration_is_deploy_bases_with_the_members_added_and_loads() {
        let page = read_docs();
        let docs = docs_hub_config(&page).unwrap();
        let mut docs_value: Value = serde_saphyr::from_str(&docs).unwrap();
        let base: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(deploy_dir().join("base/config.yaml")).unwrap(),
        )
        .unwrap();
        let base: Value =
            serde_saphyr::from_str(base["data"]["config.yaml"].as_str().unwrap()).unwrap();
        docs_value["controller"]
            .as_object_mut()
            .unwrap()
            .remove("clusters")
            .expect("the docs add controller.clusters");
        assert_eq!(
            docs_value, base,
            "docs/multi-cluster.md's clusters-config.yaml is deploy/base/config.yaml's file with controller.clusters added: copy the change"
        );
        let directory = tempfile::tempdir().unwrap();
        let file = directory.path().join("config.yaml");
        std::fs::write(&file, &docs).unwrap();
        let loaded = baton_config::Config::load(Some(&file)).expect("the docs' configuration");
        assert_eq!(loaded.controller.clusters.len(), 3);
    }

    #[test]
    fn the_docs_hub_overlay_renders_the_members_and_a_role_reading_exactly_their_secrets() {
        let page = read_docs();
        let directory = tempfile::tempdir().unwrap();
        // README's install overlay, as it is for the groups of `default`: deploy/ as it ships
        let install = directory.path().join("my-overlay");
        std::fs::create_dir_all(&install).unwrap();
        std::fs::write(
            install.join("kustomization.yaml"),
            "resources:\n  - ../deploy\n",
        )
        .unwrap();
        let hub = write_overlay(
            &page,
            directory.path(),
            "my-hub-overlay",
            &[
                "kustomization.yaml",
                "member-secrets.yaml",
                "clusters-config.yaml",
            ],
            "default",
        )
        .unwrap();
        let objects = kustomize(&hub).unwrap();
        let config = find(&objects, "ConfigMap", "baton-config");
        assert_eq!(config["metadata"]["namespace"], "baton-system");
        let members = clusters_of(config["data"]["config.yaml"].as_str().unwrap()).unwrap();
        let secrets: Vec<&str> = members
            .iter()
            .map(|(_, secret)| secret.as_str())
            .filter(|secret| !secret.is_empty())
            .collect();
        assert_eq!(secrets, ["member-cluster-b", "member-cluster-c"]);
        let role = find(&objects, "Role", "baton-controller-members");
        assert_eq!(role["metadata"]["namespace"], "baton-system");
        assert_eq!(
            role["rules"],
            serde_json::json!([{"apiGroups": [""], "resources": ["secrets"],
                                "resourceNames": secrets, "verbs": ["get", "list", "watch"]}])
        );
        let binding = find(&objects, "RoleBinding", "baton-controller-members");
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "baton-controller",
                                "namespace": "baton-system"}])
        );
        // The rest is the install as it was
        find(&objects, "Deployment", "baton-controller");
    }
}
