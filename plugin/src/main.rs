//! `kubectl baton`: see where baton's rollouts stand, wait for one to finish, see what the
//! controller would do next, pause and resume a zone, approve a step — from the user's
//! kubeconfig, with no port-forward: the plugin computes what the controller computes, with the
//! same code (`baton_core`: the status page's view over the planner and the gates), from the
//! StatefulSets and pods it reads ([`access`]). So the plugin and the page say the same, and the
//! plugin links no server, certificate or HTML code.
//!
//! Layout: [`access`] is the only I/O, and [`scope`] routes it across member clusters;
//! [`render`], [`wait::verdict`], the annotation changes of [`pause`], the step [`approval`]
//! names, the rollback [`rollback::decide`]s and where each write goes ([`clusters::route`]) are
//! pure and unit tested (the writes across members also against fake API servers,
//! `fake_api.rs`); e2e tests run this binary against the local control plane
//! (tests/tests/plugin.rs) and three of them (tests/tests/clusters.rs). Exit codes are in
//! [`exit`].
//!
//! Every command also sees a cross-cluster group: with `--cluster NAME[=CONTEXT]` (repeated),
//! the group's StatefulSets and pods are read from each member's context and named for it
//! (`cluster-a/ingester`), then viewed as one cluster's ([`clusters`]); the commands that write
//! send each write to its member's context under the name it has there ([`scope`]).

// Every line printed leaves through `output`, which escapes what namespace users wrote.
#![deny(clippy::print_stdout, clippy::print_stderr)]
mod access;
mod approval;
mod cluster_add;
mod clusters;
#[cfg(test)]
mod fake_api;
#[cfg(test)]
mod fixtures;
mod output;
mod pause;
mod render;
mod rollback;
mod scope;
mod wait;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};

use baton_core::gates;
use baton_core::status::{self};
use baton_core::status::{Replica, Role, RolloutStatus};

use crate::access::{Access, AccessError, ClusterAccess, History, Target};
use crate::clusters::Cluster;
use crate::scope::Scope;

/// Exit codes (docs/plugin.md lists them): a pipeline can tell a failed rollout from a slow
/// one, and both from a mistake.
pub mod exit {
    /// Done: for `wait`, the rollout is complete.
    pub const SUCCESS: i32 = 0;
    /// An error: no such group, no permission, the API server unreachable…
    pub const ERROR: i32 = 1;
    /// The command line is wrong (clap's own code).
    pub const USAGE: i32 = 2;
    /// `wait`: the timeout passed first.
    pub const TIMEOUT: i32 = 3;
    /// `wait`: the group is halted (`baton.dev/halted`) and waits for a person.
    pub const HALTED: i32 = 4;
    /// `wait`: baton skips the group (a member is not OnDelete), so it never completes.
    pub const SKIPPED: i32 = 5;
    /// `wait`: the next step waits for a person's approval (`kubectl baton approve`).
    pub const AWAITING_APPROVAL: i32 = 6;
    /// `wait`: the group rolled back (every pod runs the revision before the rollout).
    pub const ROLLED_BACK: i32 = 7;
    /// `wait`: an annotation of the group cannot be read (a typo'd `baton.dev/soak`): it holds
    /// until a person fixes it. Not a halt: there is nothing to resume.
    pub const INVALID_CONFIGURATION: i32 = 8;
}

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-baton",
    bin_name = "kubectl baton",
    version,
    about = "See, wait for, plan, pause, resume, approve and roll back baton's zone-by-zone rollouts; add a cluster to a hub's"
)]
struct Cli {
    /// The kubeconfig file (default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,
    /// The namespace (default: the context's, else `default`).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The rollout groups of the namespace (or one), their zones, and why each waits.
    Status {
        /// Only this rollout group (the value of the `rollout-group` label).
        group: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: render::Format,
        /// The rollout groups of every namespace (one baton serving several), each named
        /// NAMESPACE/GROUP. Not with --cluster.
        #[arg(short = 'A', long, conflicts_with = "clusters")]
        all_namespaces: bool,
        #[command(flatten)]
        across: Across,
    },
    /// Wait until every zone of GROUP runs its update revision and is ready.
    ///
    /// Exit codes: 0 complete, 1 error, 3 timed out, 4 halted, 5 skipped (a member is not
    /// OnDelete), 6 awaiting approval, 7 rolled back, 8 invalid configuration (an annotation to
    /// fix). Progress bars on a terminal, a line per change otherwise.
    Wait {
        group: String,
        /// How long to wait: a duration such as 90s, 30m or 1h30m (0: look once).
        #[arg(long, default_value = "30m", value_parser = parse_timeout)]
        timeout: Timeout,
        #[command(flatten)]
        across: Across,
    },
    /// What the controller would do next in GROUP and why (a dry run: changes nothing).
    Plan {
        group: String,
        #[command(flatten)]
        across: Across,
    },
    /// Pause the rollout of a zone (StatefulSet): set grafana.com/rollout-paused.
    Pause {
        /// The StatefulSet (with --cluster: CLUSTER/STATEFULSET, as status names it).
        zone: String,
        #[command(flatten)]
        across: Across,
    },
    /// Resume a zone: remove grafana.com/rollout-paused and baton.dev/halted.
    Resume {
        /// The StatefulSet (with --cluster: CLUSTER/STATEFULSET, as status names it).
        zone: String,
        #[command(flatten)]
        across: Across,
    },
    /// Approve the step GROUP awaits (baton.dev/approval): records exactly that step (its zone,
    /// revision and pods updated) in baton.dev/approved on every member, with who approved in
    /// baton.dev/approved-by, and prints what was approved.
    Approve {
        group: String,
        /// Approve only if this is the step awaited (as `wait` and `status` name it): what you
        /// looked at, not whatever is awaited by the time the command runs.
        #[arg(long, value_name = "STEP")]
        step: Option<String>,
        #[command(flatten)]
        across: Across,
    },
    /// Roll GROUP back: every zone goes back to the revision it ran before this rollout, the
    /// zones the rollout reached last first, the newest pods first, within max-unavailable and one
    /// zone at a time. Prints the plan; `wait` follows it (exit 7 once rolled back).
    Rollback {
        group: String,
        /// Why, for the Events and the status (who asked, as the API server authenticated them,
        /// is added: "kubectl baton rollback by alice: …").
        #[arg(long, default_value = "no reason given")]
        reason: String,
        #[command(flatten)]
        across: Across,
    },
    /// Cluster clusters of a hub's cross-cluster groups (docs/multi-cluster.md).
    #[command(subcommand)]
    Cluster(ClusterCommand),
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Give the hub's controller member cluster NAME: a token of deploy/member-cluster's ServiceAccount
    /// there (from --from-context), in a kubeconfig the controller accepts, written as the
    /// Secret it reads in the hub (--context). Run it again to rotate the token.
    Add(cluster_add::Add),
}

/// The member clusters of a cross-cluster group (docs/plugin.md, "Across clusters").
#[derive(Debug, Clone, Default, Args)]
struct Across {
    /// A cluster of a cross-cluster group, as the controller names it
    /// (controller.clusters[].name), and the kubeconfig context that reaches it (default: NAME).
    /// Repeat it for each cluster: the group is then the StatefulSets of the namespace in every
    /// cluster, each shown as NAME/STATEFULSET, and each write goes to its cluster's context.
    /// Not with --context.
    #[arg(long = "cluster", value_name = "NAME[=CONTEXT]", value_parser = clusters::parse)]
    clusters: Vec<Cluster>,
}

impl Cli {
    /// What clap cannot say itself: `--cluster` with `--context` (each cluster has its own),
    /// and a cluster given twice.
    fn check(&self) -> Result<(), clap::Error> {
        let clusters = &self.command.across().clusters;
        if clusters.is_empty() {
            return Ok(());
        }
        if self.context.is_some() {
            return Err(Cli::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                "--context cannot be used with --cluster: each cluster names its own context (--cluster NAME=CONTEXT)",
            ));
        }
        clusters::distinct(clusters)
            .map_err(|why| Cli::command().error(clap::error::ErrorKind::ValueValidation, why))
    }
}

impl Command {
    /// Its member clusters (every command of a group takes `--cluster`).
    fn across(&self) -> &Across {
        static NONE: Across = Across {
            clusters: Vec::new(),
        };
        match self {
            Self::Cluster(_) => &NONE,
            Self::Status { across, .. }
            | Self::Wait { across, .. }
            | Self::Plan { across, .. }
            | Self::Pause { across, .. }
            | Self::Resume { across, .. }
            | Self::Approve { across, .. }
            | Self::Rollback { across, .. } => across,
        }
    }
}

/// `--timeout` as written (for messages) and as a duration.
#[derive(Debug, Clone)]
struct Timeout {
    text: String,
    duration: Duration,
}

fn parse_timeout(text: &str) -> Result<Timeout, String> {
    let accepted = "expected a duration such as 90s, 30m or 1h30m";
    let nanos = baton_core::duration::go::parse(text.trim())
        .map_err(|error| format!("{error}: {accepted}"))?;
    let nanos = u64::try_from(nanos).map_err(|_| format!("{text:?} is negative: {accepted}"))?;
    Ok(Timeout {
        text: text.trim().to_owned(),
        duration: Duration::from_nanos(nanos),
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(error) = cli.check() {
        error.exit();
    }
    baton_shared::crypto::install_default_provider();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            output::err([format!("error: {error}")]);
            exit::ERROR
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

async fn run(cli: Cli) -> Result<i32, AccessError> {
    let target = Target {
        kubeconfig: cli.kubeconfig,
        context: cli.context,
        namespace: cli.namespace,
    };
    if let Command::Cluster(ClusterCommand::Add(add)) = &cli.command {
        output::out(cluster_add::add(&target, add).await?);
        return Ok(exit::SUCCESS);
    }
    // Across member clusters, each member through its own context, no other.
    let scope = Scope::connect(&target, &cli.command.across().clusters).await?;
    match cli.command {
        Command::Status {
            group,
            output,
            all_namespaces,
            ..
        } => {
            let document = match &scope {
                Scope::One(access) if all_namespaces => {
                    status_everywhere(access, group.as_deref()).await?
                }
                Scope::One(access) => status(access, group.as_deref()).await?,
                Scope::Clusters(members) => status_across(members, group.as_deref()).await?,
            };
            if document.groups.is_empty() && output == render::Format::Table {
                // A header over nothing reads as "all is well here": say what was read.
                let said = if all_namespaces {
                    render::no_groups_anywhere(&scope.read_where())
                } else {
                    render::no_groups(&document.namespace, &scope.read_where())
                };
                output::out([said]);
            } else {
                output::out(render::status(&document, output));
            }
            Ok(exit::SUCCESS)
        }
        Command::Wait { group, timeout, .. } => {
            let outcome = match &scope {
                Scope::One(access) => {
                    wait::run(access, &group, timeout.duration, &timeout.text).await?
                }
                Scope::Clusters(members) => {
                    wait::run_across(members, &group, timeout.duration, &timeout.text).await?
                }
            };
            Ok(print_outcome(&outcome))
        }
        Command::Plan { group, .. } => {
            let read = scope.read_group(&group, History::Without).await?;
            let now = jiff::Timestamp::now();
            let (plan, gate) = gates::health_check::evaluate_without_queries(&read.snapshot(), now);
            output::out(render::plan(scope.namespace(), &group, &plan, &gate));
            Ok(exit::SUCCESS)
        }
        Command::Pause { zone, .. } => {
            output::out(pause::run(&scope, &zone, pause::Command::Pause).await?);
            Ok(exit::SUCCESS)
        }
        Command::Resume { zone, .. } => {
            output::out(pause::run(&scope, &zone, pause::Command::Resume).await?);
            Ok(exit::SUCCESS)
        }
        Command::Rollback { group, reason, .. } => rollback::run(&scope, &group, &reason).await,
        Command::Approve { group, step, .. } => {
            approval::run(&scope, &group, step.as_deref()).await
        }
        Command::Cluster(_) => unreachable!("handled above, without a scope"),
    }
}

/// Prints how `wait` ended (stdout when complete, else stderr); its exit code.
fn print_outcome(outcome: &wait::WaitOutcome) -> i32 {
    if outcome.code == exit::SUCCESS {
        output::out([&outcome.message]);
    } else {
        output::err([&outcome.message]);
    }
    outcome.code
}

/// The status document of every group of the namespace, or of `only` (an error if it does not
/// exist): the controller's own view, without the leader's history (since when a group waits,
/// its last actions), which only the leader has.
async fn status(access: &Access, only: Option<&str>) -> Result<RolloutStatus, AccessError> {
    let statefulsets = match only {
        Some(group) => access.group_members(group).await?,
        None => access.grouped_statefulsets().await?,
    };
    let pods = access.pods().await?;
    Ok(document(
        &access.namespace,
        &statefulsets,
        &pods,
        &access.reader,
    ))
}

/// [`status()`] of every namespace holding a rollout group (or a group `only` of that name),
/// each group named with its namespace; the document names no namespace of its own.
async fn status_everywhere(
    access: &Access,
    only: Option<&str>,
) -> Result<RolloutStatus, AccessError> {
    let now = jiff::Timestamp::now();
    let mut groups = Vec::new();
    for (namespace, statefulsets) in access.grouped_statefulsets_everywhere(only).await? {
        let pods = access.statefulset_pods_in(&namespace).await?;
        let mut document = document(&namespace, &statefulsets, &pods, &access.reader);
        for group in &mut document.groups {
            group.namespace = Some(namespace.clone());
        }
        groups.extend(document.groups);
    }
    if let (Some(group), true) = (only, groups.is_empty()) {
        return Err(AccessError::NoSuchGroup {
            group: group.to_owned(),
            namespace: "any namespace".to_owned(),
            clusters: Vec::new(),
        });
    }
    let replica = Replica {
        identity: "kubectl-baton".to_owned(),
        role: Role::Standby,
    };
    Ok(RolloutStatus::new(
        String::new(),
        now,
        replica,
        None,
        groups,
    ))
}

/// [`status()`] across member clusters: every member read at once, its objects named for it
/// (`cluster-a/ingester`), then the same view of the merged objects.
async fn status_across(
    members: &[ClusterAccess],
    only: Option<&str>,
) -> Result<RolloutStatus, AccessError> {
    let reads = access::read_clusters(members, only, access::History::Without).await?;
    let (statefulsets, pods) = clusters::merge(
        reads
            .iter()
            .map(|read| (read.member.as_str(), &read.statefulsets, &read.pods)),
    );
    let (namespace, reader) = members
        .first()
        .map(|member| {
            (
                member.access.namespace.as_str(),
                member.access.reader.clone(),
            )
        })
        .unwrap_or_default();
    Ok(document(namespace, &statefulsets, &pods, &reader))
}

/// The status document of `statefulsets` (every group among them) and `pods`.
fn document(
    namespace: &str,
    statefulsets: &[k8s_openapi::api::apps::v1::StatefulSet],
    pods: &[baton_core::pods::CachedPod],
    reader: &baton_core::commands::Reader,
) -> RolloutStatus {
    let now = jiff::Timestamp::now();
    let groups = status::groups(
        &statefulsets.iter().collect::<Vec<_>>(),
        &pods.iter().collect::<Vec<_>>(),
        &[],
        |_| None,
        reader,
        now,
    );
    let replica = Replica {
        identity: "kubectl-baton".to_owned(),
        role: Role::Standby,
    };
    RolloutStatus::new(namespace.to_owned(), now, replica, None, groups)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_summary_line_names_every_command() {
        // How the summary words each command; a command added without its words fails here.
        let worded = [
            ("status", "See"),
            ("wait", "wait for"),
            ("plan", "plan"),
            ("pause", "pause"),
            ("resume", "resume"),
            ("approve", "approve"),
            ("rollback", "roll back"),
            ("cluster", "add a cluster"),
        ];
        let command = Cli::command();
        let about = command
            .get_about()
            .map(ToString::to_string)
            .unwrap_or_default();
        let commands: Vec<&str> = command
            .get_subcommands()
            .map(clap::Command::get_name)
            .filter(|name| *name != "help")
            .collect();
        for name in &commands {
            let words = worded
                .iter()
                .find(|(command, _)| command == name)
                .map(|(_, words)| *words)
                .unwrap_or_else(|| panic!("say how the summary words {name}"));
            assert!(
                about.contains(words),
                "the summary {about:?} lacks {name} ({words:?})"
            );
        }
        assert_eq!(commands.len(), worded.len(), "{commands:?}");
    }

    #[test]
    fn timeouts_are_go_durations_and_bad_ones_say_what_is_accepted() {
        assert_eq!(
            parse_timeout("1h30m").unwrap().duration,
            Duration::from_secs(5400)
        );
        assert_eq!(parse_timeout("0").unwrap().duration, Duration::ZERO);
        for bad in ["soon", "10", "-5s"] {
            let error = parse_timeout(bad).unwrap_err();
            assert!(error.contains("30m"), "{error}");
        }
        let error = Cli::try_parse_from(["kubectl-baton", "wait", "g", "--timeout", "soon"])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--timeout") && error.contains("\"soon\""),
            "{error}"
        );
    }

    #[test]
    fn members_are_repeated_on_every_command_and_each_has_its_own_context() {
        let cli = Cli::try_parse_from([
            "kubectl-baton",
            "wait",
            "ingester",
            "--cluster",
            "cluster-a",
            "--cluster",
            "cluster-b=kind-b",
            "-n",
            "mimir",
        ])
        .unwrap();
        cli.check().unwrap();
        let Command::Wait { across, .. } = &cli.command else {
            panic!("{cli:?}")
        };
        let clusters: Vec<(&str, &str)> = across
            .clusters
            .iter()
            .map(|cluster| (cluster.name.as_str(), cluster.context.as_str()))
            .collect();
        assert_eq!(
            clusters,
            [("cluster-a", "cluster-a"), ("cluster-b", "kind-b")]
        );
        let status = Cli::try_parse_from(["kubectl-baton", "status", "--cluster", "a=x"]).unwrap();
        assert!(
            matches!(&status.command, Command::Status { across, .. } if across.clusters.len() == 1)
        );

        // Every command takes members, the ones that write too
        for args in [
            &["plan", "g"][..],
            &["pause", "a/z"],
            &["resume", "a/z"],
            &["approve", "g", "--step", "s"],
            &["rollback", "g"],
        ] {
            let cli = Cli::try_parse_from(["kubectl-baton"].iter().chain(args).chain(&[
                "--cluster",
                "a",
                "--cluster",
                "b=kind-b",
            ]))
            .unwrap_or_else(|error| panic!("{args:?}: {error}"));
            cli.check().unwrap();
            assert_eq!(cli.command.across().clusters.len(), 2, "{args:?}");
        }

        // A member is not with --context, nor given twice
        let approve_with_context = Cli::try_parse_from([
            "kubectl-baton",
            "approve",
            "g",
            "--cluster",
            "a",
            "--context",
            "prod",
        ])
        .unwrap();
        assert_eq!(
            approve_with_context.check().unwrap_err().kind(),
            clap::error::ErrorKind::ArgumentConflict
        );
        let with_context = Cli::try_parse_from([
            "kubectl-baton",
            "status",
            "--cluster",
            "a",
            "--context",
            "prod",
        ])
        .unwrap();
        let error = with_context.check().unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::ArgumentConflict);
        assert!(
            error
                .to_string()
                .contains("--context cannot be used with --cluster"),
            "{error}"
        );
        let twice = Cli::try_parse_from([
            "kubectl-baton",
            "wait",
            "g",
            "--cluster",
            "a",
            "--cluster",
            "a=y",
        ])
        .unwrap();
        let error = twice.check().unwrap_err().to_string();
        assert!(error.contains("member a is given twice"), "{error}");
        let error = Cli::try_parse_from(["kubectl-baton", "status", "--cluster", "A"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("not a DNS label"), "{error}");
    }

    #[test]
    fn cluster_add_takes_the_members_name_and_context_with_deploy_members_defaults() {
        let cli = Cli::try_parse_from([
            "kubectl-baton",
            "cluster",
            "add",
            "cluster-b",
            "--from-context",
            "kind-b",
            "--context",
            "hub",
            "-n",
            "mimir",
        ])
        .unwrap();
        cli.check().unwrap();
        assert_eq!(cli.context.as_deref(), Some("hub"));
        assert_eq!(cli.namespace.as_deref(), Some("mimir"));
        let Command::Cluster(ClusterCommand::Add(add)) = &cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!(add.name, "cluster-b");
        assert_eq!(add.from_context, "kind-b");
        assert_eq!(add.server, None);
        assert_eq!(add.duration, Duration::from_secs(8760 * 3600));
        assert_eq!(add.service_account.to_string(), "baton-system/baton-member");
        assert_eq!(add.secret, None);
        assert_eq!(add.key, "kubeconfig");
        assert_eq!(add.system_namespace, "baton-system");
        assert!(!add.no_check);

        // The member's context is required, its name a DNS label, and it takes no --cluster
        for (args, saying) in [
            (&["cluster", "add", "cluster-b"][..], "--from-context"),
            (
                &["cluster", "add", "Cluster_B", "--from-context", "x"],
                "not a DNS label",
            ),
            (
                &[
                    "cluster",
                    "add",
                    "b",
                    "--from-context",
                    "x",
                    "--cluster",
                    "a",
                ],
                "--cluster",
            ),
            (
                &[
                    "cluster",
                    "add",
                    "b",
                    "--from-context",
                    "x",
                    "--duration",
                    "5m",
                ],
                "at least 10m",
            ),
        ] {
            let error = Cli::try_parse_from(["kubectl-baton"].iter().chain(args))
                .unwrap_err()
                .to_string();
            assert!(error.contains(saying), "{args:?}: {error}");
        }
    }

    #[test]
    fn namespace_and_context_are_global_like_kubectls() {
        let cli = Cli::try_parse_from([
            "kubectl-baton",
            "status",
            "-n",
            "mimir",
            "--context",
            "prod",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.namespace.as_deref(), Some("mimir"));
        assert_eq!(cli.context.as_deref(), Some("prod"));
        assert!(matches!(
            cli.command,
            Command::Status {
                output: render::Format::Json,
                ..
            }
        ));
    }
}
