//! The commands baton prints for a person to run (in wait reasons, Events, the status page and
//! `kubectl baton`'s answers). A command printed must work pasted as printed: a person in a
//! hurry runs what they read, and a command that answers `NotFound` (no namespace) or acts in
//! another cluster teaches them to distrust every other line. So each names the namespace; the
//! kubeconfig and context when the reader was given them (`kubectl baton --context …`); and for
//! a member of a group across clusters, the member clusters as `kubectl baton` takes them
//! (`--cluster NAME[=CONTEXT]`), or, for plain kubectl, the member's own context (a context named
//! after the cluster unless the plugin was told otherwise, the plugin's own default).
//!
//! `kubectl baton` is preferred where it does the whole job (`resume` lifts a halt and says
//! which other member still halts the group); plain kubectl is given beside it for whoever
//! has not installed the plugin.

use std::collections::{BTreeMap, BTreeSet};

use crate::clusters;

/// How the commands printed for one group reach it: where its objects live, and how the
/// reader got there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// The group's namespace; empty when unknown (a test's snapshot): then no `-n` is printed.
    pub namespace: String,
    /// The member clusters of a group across clusters (from its members' names
    /// `cluster/statefulset`), in order; empty in one cluster.
    pub clusters: Vec<String>,
    /// How the reader reached the cluster (none of it for the controller's messages).
    pub reader: Reader,
}

/// How the person reading reached the cluster: what `kubectl baton` was given. The controller
/// knows none of it (its Events and page are read by people with their own kubeconfigs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reader {
    /// The kubeconfig file named (`--kubeconfig`), if any.
    pub kubeconfig: Option<String>,
    /// The context named (`--context`), for a group in one cluster.
    pub context: Option<String>,
    /// The context that reaches a member cluster, when one was named that differs from the
    /// cluster's name (`--cluster NAME=CONTEXT`).
    pub member_contexts: BTreeMap<String, String>,
}

impl Reach {
    /// The reach of a group in `namespace` whose members are named `names` (as the group names
    /// them: `cluster-b/querier` across clusters), read by the controller: no context of the
    /// reader's is known.
    pub fn of<'a>(namespace: &str, names: impl IntoIterator<Item = &'a str>) -> Self {
        let clusters: BTreeSet<&str> = names
            .into_iter()
            .filter_map(|name| clusters::split(name).0)
            .collect();
        Self {
            namespace: namespace.to_owned(),
            clusters: clusters.into_iter().map(str::to_owned).collect(),
            ..Self::default()
        }
    }

    /// `kubectl baton ARGS`, with the flags that reach the group: `-n`, and `--context` in one
    /// cluster or `--cluster` for each member cluster across clusters.
    pub fn baton(&self, args: &str) -> String {
        let mut command = format!("kubectl baton {args}");
        command.push_str(&self.namespace_flag());
        command.push_str(&self.kubeconfig_flag());
        if self.clusters.is_empty() {
            if let Some(context) = &self.reader.context {
                command.push_str(&format!(" --context {}", shell_word(context)));
            }
        } else {
            for cluster in &self.clusters {
                let member = match self.reader.member_contexts.get(cluster) {
                    Some(context) if context != cluster => format!("{cluster}={context}"),
                    _ => cluster.clone(),
                };
                command.push_str(&format!(" --cluster {}", shell_word(&member)));
            }
        }
        command
    }

    /// `kubectl annotate statefulset NAME CHANGE` for `statefulset` as the group names it
    /// (`CHANGE` is `key-` or `key=value`, shell-quoted by the caller if it needs it): in its
    /// own cluster's context, under the name it has there.
    pub fn annotate(&self, statefulset: &str, change: &str) -> String {
        let (cluster, name) = clusters::split(statefulset);
        let context = match cluster {
            Some(cluster) => Some(
                self.reader
                    .member_contexts
                    .get(cluster)
                    .map_or(cluster, String::as_str),
            ),
            None => self.reader.context.as_deref(),
        };
        let mut command = "kubectl".to_owned();
        command.push_str(&self.kubeconfig_flag());
        if let Some(context) = context {
            command.push_str(&format!(" --context {}", shell_word(context)));
        }
        command.push_str(&self.namespace_flag());
        command.push_str(&format!(" annotate statefulset {name} {change}"));
        command
    }

    fn namespace_flag(&self) -> String {
        if self.namespace.is_empty() {
            String::new()
        } else {
            format!(" -n {}", shell_word(&self.namespace))
        }
    }

    fn kubeconfig_flag(&self) -> String {
        self.reader
            .kubeconfig
            .as_deref()
            .map(|file| format!(" --kubeconfig {}", shell_word(file)))
            .unwrap_or_default()
    }
}

/// `word` as one word of a POSIX shell command: as is when it holds only characters no shell
/// reads specially, else in single quotes (a quote inside closed, escaped and reopened).
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|character| character.is_ascii_alphanumeric() || "-_./:=@%+,".contains(character));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_in_one_cluster_names_the_namespace_and_the_readers_context() {
        let controller = Reach::of("baton-demo", ["ingester-zone-a", "ingester-zone-b"]);
        assert_eq!(
            controller.baton("resume ingester-zone-b"),
            "kubectl baton resume ingester-zone-b -n baton-demo"
        );
        assert_eq!(
            controller.annotate("ingester-zone-b", "baton.dev/halted-"),
            "kubectl -n baton-demo annotate statefulset ingester-zone-b baton.dev/halted-"
        );
        let plugin = Reach {
            reader: Reader {
                kubeconfig: Some("/home/me/my config".to_owned()),
                context: Some("prod-eu".to_owned()),
                ..Reader::default()
            },
            ..controller
        };
        assert_eq!(
            plugin.baton("resume ingester-zone-b"),
            "kubectl baton resume ingester-zone-b -n baton-demo --kubeconfig '/home/me/my config' \
             --context prod-eu"
        );
        assert_eq!(
            plugin.annotate("ingester-zone-b", "baton.dev/halted-"),
            "kubectl --kubeconfig '/home/me/my config' --context prod-eu -n baton-demo annotate \
             statefulset ingester-zone-b baton.dev/halted-"
        );
    }

    #[test]
    fn a_command_across_clusters_names_every_member_and_kubectl_the_members_own_context() {
        let mut reach = Reach::of("mimir", ["cluster-b/querier", "cluster-a/querier"]);
        assert_eq!(reach.clusters, ["cluster-a", "cluster-b"]);
        assert_eq!(
            reach.baton("resume cluster-b/querier"),
            "kubectl baton resume cluster-b/querier -n mimir --cluster cluster-a --cluster cluster-b"
        );
        assert_eq!(
            reach.annotate("cluster-b/querier", "baton.dev/halted-"),
            "kubectl --context cluster-b -n mimir annotate statefulset querier baton.dev/halted-"
        );
        // The contexts the reader named for the members
        reach
            .reader
            .member_contexts
            .insert("cluster-b".to_owned(), "prod us".to_owned());
        assert_eq!(
            reach.baton("resume cluster-b/querier"),
            "kubectl baton resume cluster-b/querier -n mimir --cluster cluster-a \
             --cluster 'cluster-b=prod us'"
        );
        assert_eq!(
            reach.annotate("cluster-b/querier", "baton.dev/halted-"),
            "kubectl --context 'prod us' -n mimir annotate statefulset querier baton.dev/halted-"
        );
    }

    #[test]
    fn words_a_shell_would_read_are_quoted() {
        assert_eq!(shell_word("prod-eu_1.x"), "prod-eu_1.x");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word("$(rm -rf /)"), "'$(rm -rf /)'");
        assert_eq!(shell_word(""), "''");
    }
}
