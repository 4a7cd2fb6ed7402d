//! `wait GROUP`: follows a group until its rollout is complete, and says so with its exit code
//! (what a deploy pipeline calls, since `kubectl rollout status` does not work for OnDelete
//! StatefulSets).
//!
//! Whether to stop is a pure [`verdict`] of the group's view. The group is read once (so a
//! missing group or permission fails at once, naming it), then followed by watches on its
//! StatefulSets and the namespace's pods, recomputing the view after every change, and once a
//! second for what changes with time alone (minReadySeconds, a soak).
//!
//! A watch that fails (the API server gone, a permission revoked) does not end `wait`: it is
//! retried, and the view stays the last one read. Across member clusters (`--cluster`,
//! [`run_across`]) the same choice is kept, and made strict, since one member's last known state
//! must never stand for its present one. Every member is first read at once: a context the
//! kubeconfig lacks, a cluster that cannot be reached or a missing permission fails at once,
//! naming the member, as one cluster's does. Then each member is followed by its own two
//! watches ([`ClusterCache`]). When one fails, the member cannot be read: `wait` says so on a line
//! of its own, the member counts as not ready (the planner holds the group with
//! `MemberUnreachable`, and the view is never complete, see [`clusters::view`]), no outcome is
//! drawn while any member cannot be read, and the watch starts again with a fresh list (not
//! resumed from where it stopped). `wait` keeps waiting until the member is read again or the
//! timeout passes; the timeout's message names the members that could not be read.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_core::commands::Reader;
use baton_core::pods::CachedPod;
use baton_shared::index::Index;
use baton_shared::initial_list::relisting_watcher;
use baton_shared::pod_cache;
use baton_shared::reflect::reflect;
use futures::FutureExt;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::Notify;

use baton_core::rollout::GroupSnapshot;
use baton_core::status::{self};
use baton_core::status::{GroupStatus, RolloutPhase};

use crate::access::{self, Access, AccessError, ClusterAccess, group_selector};
use crate::clusters::{self, ClusterCache, Reading, Watch};
use crate::exit;
use crate::output;
use crate::render;

/// Whether waiting is over, from the group's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitVerdict {
    /// Every zone runs the update revision and every pod is available.
    Complete,
    /// Nothing moves until a person acts (`baton.dev/halted`, a hook baton may not call, a
    /// template re-applied after a rollback); the message says what and why.
    Halted(String),
    /// Nothing moves until a person fixes an annotation baton cannot read; the message names
    /// it, its value and its StatefulSet.
    InvalidConfiguration(String),
    /// baton leaves the group alone (a member is not OnDelete); the message names it.
    Skipped(String),
    /// The next step waits for a person's approval; the message names it.
    AwaitingApproval(String),
    /// The group rolled back: every pod runs the revision from before the rollout.
    RolledBack(String),
    /// Still rolling or waiting.
    Pending,
}

/// Pure: stop when the group is complete, rolled back, halted, held by invalid configuration,
/// skipped or awaiting approval (each needs a person, or nothing more).
pub fn verdict(view: &GroupStatus) -> WaitVerdict {
    let message = || {
        view.waiting
            .as_ref()
            .map_or_else(String::new, |waiting| waiting.message.clone())
    };
    match view.phase {
        RolloutPhase::Complete => WaitVerdict::Complete,
        RolloutPhase::Halted => WaitVerdict::Halted(message()),
        RolloutPhase::InvalidConfiguration => WaitVerdict::InvalidConfiguration(message()),
        RolloutPhase::Skipped => WaitVerdict::Skipped(message()),
        RolloutPhase::AwaitingApproval => WaitVerdict::AwaitingApproval(message()),
        RolloutPhase::RolledBack => {
            WaitVerdict::RolledBack(view.rollback.clone().unwrap_or_default())
        }
        RolloutPhase::Rolling
        | RolloutPhase::Waiting
        | RolloutPhase::Paused
        | RolloutPhase::RollingBack => WaitVerdict::Pending,
    }
}

/// How `wait` ended: its exit code and the line to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitOutcome {
    pub code: i32,
    pub message: String,
}

/// The outcome of a view that is final, None while it is pending.
pub fn outcome(view: &GroupStatus) -> Option<WaitOutcome> {
    let group = &view.name;
    match verdict(view) {
        WaitVerdict::Complete => Some(WaitOutcome {
            code: exit::SUCCESS,
            message: format!(
                "rollout group {group} is complete: every zone runs its update revision and every pod is ready"
            ),
        }),
        WaitVerdict::Halted(why) => Some(WaitOutcome {
            code: exit::HALTED,
            message: format!("rollout group {group} is halted: {why}"),
        }),
        WaitVerdict::InvalidConfiguration(why) => Some(WaitOutcome {
            code: exit::INVALID_CONFIGURATION,
            message: format!("rollout group {group} is held: {why}"),
        }),
        WaitVerdict::Skipped(why) => Some(WaitOutcome {
            code: exit::SKIPPED,
            message: format!("rollout group {group} is skipped by baton: {why}"),
        }),
        WaitVerdict::AwaitingApproval(why) => Some(WaitOutcome {
            code: exit::AWAITING_APPROVAL,
            message: format!("rollout group {group} awaits approval: {why}"),
        }),
        WaitVerdict::RolledBack(why) => Some(WaitOutcome {
            code: exit::ROLLED_BACK,
            message: format!("rollout group {group} is {why}"),
        }),
        WaitVerdict::Pending => None,
    }
}

/// The outcome once `timeout` passed with the group still at `view`.
pub fn timed_out(view: &GroupStatus, timeout: &str) -> WaitOutcome {
    let why = view.waiting.as_ref().map_or_else(String::new, |waiting| {
        format!("; waits ({}): {}", waiting.kind, waiting.message)
    });
    WaitOutcome {
        code: exit::TIMEOUT,
        message: format!(
            "timed out after {timeout} waiting for rollout group {}: {}{why}",
            view.name,
            view.phase.as_str()
        ),
    }
}

/// Waits for `group`; returns how it ended.
pub async fn run(
    access: &Access,
    group: &str,
    timeout: Duration,
    timeout_text: &str,
) -> Result<WaitOutcome, AccessError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let selector = group_selector(group)?;
    let members = access.group_members(group).await?;
    let pods = access.pods().await?;
    let mut display = Display::new();
    let mut current = compute(group, &members, &pods, &access.reader);
    display.show(&current);
    if let Some(outcome) = outcome(&current) {
        display.finish();
        return Ok(outcome);
    }

    let changed = Arc::new(Notify::new());
    let (pod_cache, fill_pods) = pod_cache::watch(
        access.client.clone(),
        &access.namespace,
        watcher::Config::default(),
        {
            let changed = changed.clone();
            move |_| changed.notify_one()
        },
    );
    let (statefulset_store, fill_statefulsets) = reflect(
        Api::<StatefulSet>::namespaced(access.client.clone(), &access.namespace),
        watcher::Config::default().labels(&selector),
        |statefulset| statefulset.managed_fields_mut().clear(),
        {
            let changed = changed.clone();
            move |_| changed.notify_one()
        },
    );
    // Polled only here: the watches fill the caches while this waits.
    let mut watches = std::pin::pin!(futures::future::join(fill_pods, fill_statefulsets));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {
                display.finish();
                return Ok(timed_out(&current, timeout_text));
            }
            _ = &mut watches => {}
            () = changed.notified() => {}
            _ = tick.tick() => {}
        }
        // Until both watches listed everything, the stores hold part of the group: keep the
        // last view (never await readiness here: only polling `watches` fills the stores).
        let ready = |ready: Option<Result<(), _>>| matches!(ready, Some(Ok(())));
        if !ready(statefulset_store.wait_until_ready().now_or_never()) || !pod_cache.is_ready() {
            continue;
        }
        let members = statefulset_store.state();
        if members.is_empty() {
            display.finish();
            return Err(AccessError::NoSuchGroup {
                group: group.to_owned(),
                namespace: access.namespace.clone(),
                clusters: Vec::new(),
            });
        }
        let pods = pod_cache.state();
        current = compute(
            group,
            members.iter().map(AsRef::as_ref),
            pods.iter().map(AsRef::as_ref),
            &access.reader,
        );
        display.show(&current);
        if let Some(outcome) = outcome(&current) {
            display.finish();
            return Ok(outcome);
        }
    }
}

/// Waits for `group` across member clusters (`--cluster`; see the module header).
pub async fn run_across(
    members: &[ClusterAccess],
    group: &str,
    timeout: Duration,
    timeout_text: &str,
) -> Result<WaitOutcome, AccessError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let selector = group_selector(group)?;
    let reader = &members
        .first()
        .map(|member| member.access.reader.clone())
        .unwrap_or_default();
    let reads = access::read_clusters(members, Some(group), access::History::Without).await?;
    let caches: Vec<Mutex<ClusterCache>> = reads
        .into_iter()
        .map(|read| {
            Mutex::new(ClusterCache::new(
                &read.member,
                read.statefulsets,
                read.pods,
            ))
        })
        .collect();
    let mut display = Display::new();
    let mut current = reading(&caches, |now| compute_across(group, now, reader));
    display.show(&current);
    if let Some(outcome) = outcome(&current) {
        display.finish();
        return Ok(outcome);
    }

    let changed = Notify::new();
    let follows = members
        .iter()
        .zip(&caches)
        .map(|(member, cache)| follow(&member.access, &selector, cache, &changed));
    // Polled only here, as in `run`: the watches fill the caches while this waits.
    let mut watches = std::pin::pin!(futures::future::join_all(follows));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // What was last said of each member that cannot be read.
    let mut told: Vec<Option<String>> = vec![None; members.len()];
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {
                display.finish();
                return Ok(reading(&caches, |now| timed_out_across(&current, now, timeout_text)));
            }
            _ = &mut watches => {}
            () = changed.notified() => {}
            _ = tick.tick() => {}
        }
        let looked = reading(&caches, |now| {
            note_unreadable(&mut display, now, &mut told);
            // Until every member's watches listed (or failed), keep the last view, as `run` does.
            if now.iter().any(|cache| cache.reading() == Reading::Listing) {
                return None;
            }
            let unreadable = clusters::unreadable(now);
            if unreadable.is_empty()
                && now
                    .iter()
                    .all(|cache| cache.statefulsets().next().is_none())
            {
                return Some(Err(()));
            }
            Some(Ok((
                compute_across(group, now, reader),
                unreadable.is_empty(),
            )))
        });
        let (computed, all_read) = match looked {
            None => continue,
            Some(Err(())) => {
                display.finish();
                return Err(access::no_group_in(members, group));
            }
            Some(Ok(looked)) => looked,
        };
        current = computed;
        display.show(&current);
        // A member that cannot be read may be anything now: nothing is concluded until it is
        // read again (the timeout still applies).
        if all_read && let Some(outcome) = outcome(&current) {
            display.finish();
            return Ok(outcome);
        }
    }
}

/// `look` at every member's cache at one instant. Locked only to read (never across an await):
/// the watches run when polled.
fn reading<T>(caches: &[Mutex<ClusterCache>], look: impl FnOnce(&[&ClusterCache]) -> T) -> T {
    let guards: Vec<_> = caches
        .iter()
        .map(|cache| {
            cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        })
        .collect();
    let now: Vec<&ClusterCache> = guards.iter().map(|cache| &**cache).collect();
    look(&now)
}

/// Says once, on each change, that a member cannot be read (and why), or is read again.
fn note_unreadable(display: &mut Display, now: &[&ClusterCache], told: &mut [Option<String>]) {
    for (cache, told) in now.iter().zip(told) {
        let unreadable = match cache.reading() {
            Reading::Unreadable(error) => Some(error),
            Reading::Read | Reading::Listing => None,
        };
        if unreadable == *told {
            continue;
        }
        display.note(&match &unreadable {
            Some(error) => format!(
                "member cluster {} cannot be read: {}; it counts as not ready until it is listed again",
                cache.name, error
            ),
            None => format!("member cluster {} is read again", cache.name),
        });
        *told = unreadable;
    }
}

/// The view of `group` across `members` (see [`clusters::view`]).
fn compute_across(group: &str, members: &[&ClusterCache], reader: &Reader) -> GroupStatus {
    clusters::view(group, members, reader, jiff::Timestamp::now())
}

/// [`timed_out`], naming the members that could not be read when it did.
pub fn timed_out_across(
    view: &GroupStatus,
    members: &[&ClusterCache],
    timeout: &str,
) -> WaitOutcome {
    let mut outcome = timed_out(view, timeout);
    for (member, error) in clusters::unreadable(members) {
        outcome.message.push_str(&format!(
            "; member cluster {member} cannot be read: {error}"
        ));
    }
    outcome
}

/// Follows one member: a watch of the group's StatefulSets and one of the namespace's pods,
/// into `cache`, telling `changed` of every change. A watch that fails marks the member
/// unreadable and is started afresh, as the controller's member watches are
/// ([`relisting_watcher`]: a new list, not a watch resumed from where it stopped, which gives no
/// moment at which the cache is known to be caught up).
async fn follow(access: &Access, selector: &str, cache: &Mutex<ClusterCache>, changed: &Notify) {
    let mut into_statefulsets = ClusterWatch {
        cache,
        changed,
        watch: Watch::StatefulSets,
    };
    let mut into_pods = ClusterWatch {
        cache,
        changed,
        watch: Watch::Pods,
    };
    let statefulsets = baton_shared::index::drive(
        relisting_watcher(
            Api::<StatefulSet>::namespaced(access.client.clone(), &access.namespace),
            watcher::Config::default().labels(selector),
        ),
        &mut into_statefulsets,
    );
    let pods = baton_shared::index::drive(
        relisting_watcher(
            Api::<Pod>::namespaced(access.client.clone(), &access.namespace),
            watcher::Config::default(),
        ),
        &mut into_pods,
    );
    futures::future::join(statefulsets, pods).await;
}

/// A member's watch writing into its cache.
struct ClusterWatch<'a> {
    cache: &'a Mutex<ClusterCache>,
    changed: &'a Notify,
    watch: Watch,
}

impl ClusterWatch<'_> {
    fn change(&self, change: impl FnOnce(&mut ClusterCache)) {
        change(
            &mut self
                .cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        self.changed.notify_one();
    }

    fn failed_with(&mut self, error: &watcher::Error) {
        let watch = self.watch;
        self.change(|cache| cache.failed(watch, clusters::error_chain(error)));
    }
}

impl Index<StatefulSet> for ClusterWatch<'_> {
    type Kept = StatefulSet;

    fn keep(&self, mut statefulset: StatefulSet) -> StatefulSet {
        statefulset.managed_fields_mut().clear();
        statefulset
    }

    fn reset(&mut self, statefulsets: Vec<StatefulSet>) {
        self.change(|cache| cache.listed_statefulsets(statefulsets));
    }

    fn apply(&mut self, statefulset: StatefulSet) {
        self.change(|cache| cache.applied_statefulset(statefulset));
    }

    fn delete(&mut self, statefulset: StatefulSet) {
        self.change(|cache| cache.deleted_statefulset(&statefulset));
    }

    fn failed(&mut self, error: &watcher::Error) {
        self.failed_with(error);
    }
}

impl Index<Pod> for ClusterWatch<'_> {
    type Kept = CachedPod;

    fn keep(&self, pod: Pod) -> CachedPod {
        CachedPod::of(&pod)
    }

    fn reset(&mut self, pods: Vec<CachedPod>) {
        self.change(|cache| cache.listed_pods(pods));
    }

    fn apply(&mut self, pod: CachedPod) {
        self.change(|cache| cache.applied_pod(pod));
    }

    fn delete(&mut self, pod: CachedPod) {
        self.change(|cache| cache.deleted_pod(&pod));
    }

    fn failed(&mut self, error: &watcher::Error) {
        self.failed_with(error);
    }
}

fn compute<'a>(
    group: &str,
    members: impl IntoIterator<Item = &'a StatefulSet>,
    pods: impl IntoIterator<Item = &'a CachedPod>,
    reader: &Reader,
) -> GroupStatus {
    let mut snapshot = GroupSnapshot::from_kubernetes(group, members, pods);
    snapshot.reach.reader = reader.clone();
    status::compute(&snapshot, None, jiff::Timestamp::now())
}

/// Progress bars on a terminal, else a line whenever something changed.
enum Display {
    Bars {
        multi: MultiProgress,
        zones: Vec<(String, ProgressBar)>,
        group: ProgressBar,
    },
    Lines {
        last: Vec<String>,
    },
}

impl Display {
    fn new() -> Self {
        if std::io::stderr().is_terminal() {
            let multi = MultiProgress::new();
            let group = multi.add(ProgressBar::new_spinner());
            group.enable_steady_tick(Duration::from_millis(120));
            Self::Bars {
                multi,
                zones: Vec::new(),
                group,
            }
        } else {
            Self::Lines { last: Vec::new() }
        }
    }

    fn show(&mut self, view: &GroupStatus) {
        match self {
            Self::Bars {
                multi,
                zones,
                group,
            } => {
                let style = ProgressStyle::with_template(
                    "{prefix:>24} [{bar:30.green/white}] {pos}/{len} updated  {msg}",
                )
                .expect("a valid template")
                .progress_chars("=> ");
                for zone in &view.zones {
                    let bar = match zones.iter().find(|(name, _)| *name == zone.statefulset) {
                        Some((_, bar)) => bar.clone(),
                        None => {
                            let bar = multi.insert_before(group, ProgressBar::new(0));
                            bar.set_style(style.clone());
                            bar.set_prefix(output::line(&zone.statefulset).into_owned());
                            zones.push((zone.statefulset.clone(), bar.clone()));
                            bar
                        }
                    };
                    bar.set_length(u64::from(zone.total));
                    bar.set_position(u64::from(zone.updated));
                    bar.set_message(format!(
                        "{}/{} ready  {}",
                        zone.ready,
                        zone.total,
                        zone.phase.as_str()
                    ));
                }
                group.set_message(output::line(&render::group_line(view)).into_owned());
            }
            Self::Lines { last } => output::out(changed_lines(last, view)),
        }
    }

    /// A line of its own (not a zone's nor the group's): above the bars, or printed.
    fn note(&mut self, line: &str) {
        match self {
            Self::Bars { multi, .. } => {
                // Not drawn only when the terminal is gone; the bars go on either way.
                let _ = multi.println(output::line(line));
            }
            Self::Lines { .. } => output::out([line]),
        }
    }

    fn finish(&mut self) {
        if let Self::Bars { zones, group, .. } = self {
            for (_, bar) in zones.iter() {
                bar.abandon();
            }
            group.finish_and_clear();
        }
    }
}

/// The lines of `view` (one per zone, then the group's) that `last`, the lines shown before,
/// does not hold; `last` becomes `view`'s. Off a terminal `wait` prints only these: a line
/// when what it says changed, not one per recomputation (a soak's countdown reads whole
/// seconds, so it changes once a second).
fn changed_lines(last: &mut Vec<String>, view: &GroupStatus) -> Vec<String> {
    let lines: Vec<String> = view
        .zones
        .iter()
        .map(render::zone_line)
        .chain(std::iter::once(render::group_line(view)))
        .collect();
    let changed = lines
        .iter()
        .filter(|line| !last.contains(line))
        .cloned()
        .collect();
    *last = lines;
    changed
}

#[cfg(test)]
mod tests {
    use baton_core::annotations::ROLLOUT_PAUSED_ANNOTATION;
    use baton_core::gates::HALTED_ANNOTATION;
    use baton_core::rollout::UpdateStrategy;

    use super::*;
    use crate::fixtures::{group, status_of, zone};

    #[test]
    fn complete_exits_zero() {
        let view = status_of(&group(vec![zone("a", 2, 2), zone("b", 2, 2)]));
        let done = outcome(&view).expect("final");
        assert_eq!(done.code, 0);
        assert!(
            done.message.contains("ingester is complete"),
            "{}",
            done.message
        );
    }

    #[test]
    fn rolling_and_paused_groups_keep_waiting() {
        let rolling = status_of(&group(vec![zone("a", 2, 1), zone("b", 2, 0)]));
        assert_eq!(verdict(&rolling), WaitVerdict::Pending);
        let mut b = zone("b", 2, 0);
        b.annotations
            .insert(ROLLOUT_PAUSED_ANNOTATION.to_owned(), "true".to_owned());
        // A person may resume a paused zone: not final.
        let paused = status_of(&group(vec![zone("a", 2, 2), b]));
        assert_eq!(outcome(&paused), None);
        let timed_out = timed_out(&paused, "5s");
        assert_eq!(timed_out.code, exit::TIMEOUT);
        assert_eq!(
            timed_out.message,
            "timed out after 5s waiting for rollout group ingester: paused; waits (Paused): \
             rollout paused with pods left to update in b"
        );
    }

    #[test]
    fn a_reason_written_to_drive_the_terminal_or_forge_a_line_is_printed_escaped() {
        // Given a halt whose reason a namespace user wrote with an escape sequence and a newline
        let mut b = zone("b", 2, 0);
        b.annotations.insert(
            HALTED_ANNOTATION.to_owned(),
            "oops\u{1b}[2J\u{7}\rrollout group ingester is complete\n".to_owned(),
        );
        let view = status_of(&group(vec![zone("a", 2, 0), b]));
        // When wait stops and the status line is printed
        let halted = outcome(&view).expect("final");
        let line = render::group_line(&view);
        // Then neither holds a control character once printed, each is one line, and the
        // reason is still there, escaped
        for text in [&halted.message, &line] {
            let mut printed = Vec::new();
            output::write(&mut printed, [text]).expect("writing to memory");
            let printed = String::from_utf8(printed).expect("UTF-8");
            assert_eq!(printed.matches('\n').count(), 1, "{printed:?}");
            assert!(
                !printed.trim_end_matches('\n').chars().any(char::is_control),
                "{printed:?}"
            );
            assert!(
                printed.contains("oops\\u{1b}[2J\\u{7}\\rrollout group"),
                "{printed}"
            );
        }
    }

    #[test]
    fn halted_and_skipped_groups_stop_with_their_own_codes_and_reasons() {
        let mut b = zone("b", 2, 0);
        b.annotations
            .insert(HALTED_ANNOTATION.to_owned(), "hook answered 500".to_owned());
        let halted = outcome(&status_of(&group(vec![zone("a", 2, 0), b]))).expect("final");
        assert_eq!(halted.code, exit::HALTED);
        assert!(
            halted.message.contains("hook answered 500"),
            "{}",
            halted.message
        );
        assert!(
            halted.message.contains("kubectl baton resume b")
                && halted
                    .message
                    .contains("annotate statefulset b baton.dev/halted-"),
            "{}",
            halted.message
        );

        // A typo'd soak is not a halt: its own code, naming annotation, value and StatefulSet
        let typo = crate::fixtures::annotated(
            zone("b", 2, 0),
            baton_core::gates::SOAK_ANNOTATION,
            "5 minutes",
        );
        let invalid = outcome(&status_of(&group(vec![zone("a", 2, 0), typo]))).expect("final");
        assert_eq!(invalid.code, exit::INVALID_CONFIGURATION);
        assert_ne!(exit::INVALID_CONFIGURATION, exit::HALTED);
        for part in [
            "invalid configuration",
            "baton.dev/soak",
            "StatefulSet b",
            "\"5 minutes\"",
            "annotate statefulset b baton.dev/soak-",
        ] {
            assert!(
                invalid.message.contains(part),
                "{part}: {}",
                invalid.message
            );
        }

        let mut b = zone("b", 2, 0);
        b.update_strategy = UpdateStrategy::RollingUpdate;
        let skipped = outcome(&status_of(&group(vec![zone("a", 2, 0), b]))).expect("final");
        assert_eq!(skipped.code, exit::SKIPPED);
        assert!(
            skipped.message.contains("b uses RollingUpdate"),
            "{}",
            skipped.message
        );
    }

    #[test]
    fn awaiting_approval_and_rolled_back_groups_stop_with_their_own_codes() {
        let asking = crate::fixtures::annotated(
            zone("a", 2, 0),
            baton_core::gates::APPROVAL_ANNOTATION,
            "zone",
        );
        let awaiting = outcome(&status_of(&group(vec![asking, zone("b", 2, 0)]))).expect("final");
        assert_eq!(awaiting.code, exit::AWAITING_APPROVAL);
        assert!(
            awaiting.message.contains("awaits approval")
                && awaiting.message.contains("kubectl baton approve ingester"),
            "{}",
            awaiting.message
        );

        // Rolled back: every pod back at `old`, the records say from what and why.
        let record = baton_core::gates::rollback::RollbackRecord {
            from: "new".to_owned(),
            to: "old".to_owned(),
            why: "latency doubled".to_owned(),
            at: "2026-11-25T00:00:00Z".to_owned(),
            turn: 0,
            restored: true,
            settled: true,
        };
        let back = |name: &str| {
            crate::fixtures::annotated(
                baton_core::testing::zone(name, 2)
                    .at_revision("old")
                    .build(),
                baton_core::gates::rollback::ROLLBACK_STATE_ANNOTATION,
                &record.to_annotation(),
            )
        };
        let rolled_back = outcome(&status_of(&group(vec![back("a"), back("b")]))).expect("final");
        assert_eq!(rolled_back.code, exit::ROLLED_BACK);
        assert!(
            rolled_back.message.contains("rolled back from new")
                && rolled_back.message.contains("latency doubled"),
            "{}",
            rolled_back.message
        );
    }

    #[test]
    fn a_soak_counts_down_in_whole_seconds_a_line_per_second() {
        use baton_core::gates::keys::{SOAK_ANNOTATION, STATE_ANNOTATION};
        use baton_core::gates::state::ZoneState;
        use jiff::{SignedDuration, Timestamp};

        // Given zone a rolled and cleared, and zone b soaking 10 s after it since `started`
        let started = Timestamp::from_second(1_800_000_000).expect("a time");
        let state = |soak_started_at, cleared_at| ZoneState {
            revision: "new".to_owned(),
            soak_started_at,
            soak_after: vec!["a".to_owned()],
            cleared_at,
        };
        let a = crate::fixtures::annotated(
            crate::fixtures::annotated(zone("a", 2, 2), SOAK_ANNOTATION, "10s"),
            STATE_ANNOTATION,
            &state(None, Some(started - SignedDuration::from_secs(60))).to_annotation(),
        );
        let b = crate::fixtures::annotated(
            zone("b", 2, 0),
            STATE_ANNOTATION,
            &state(Some(started), None).to_annotation(),
        );
        let soaking = group(vec![a, b]);
        let at = |millis| {
            status::compute(
                &soaking,
                None,
                started + SignedDuration::from_millis(millis),
            )
        };
        // When wait recomputes the view a few times within one second, then a second later
        let mut last = Vec::new();
        let first = changed_lines(&mut last, &at(4_603));
        let within_the_second: Vec<_> = [4_653, 4_654, 4_999]
            .into_iter()
            .flat_map(|millis| changed_lines(&mut last, &at(millis)))
            .collect();
        let next_second = changed_lines(&mut last, &at(5_603));
        // Then the first view prints its lines, the countdown in whole seconds,
        assert!(
            first
                .last()
                .is_some_and(|line| line.ends_with("soaking after a: b starts in 6s")),
            "{first:?}"
        );
        // the views within the same second print nothing,
        assert_eq!(within_the_second, Vec::<String>::new());
        // and the next second prints the group's line alone, one second less
        assert_eq!(next_second.len(), 1, "{next_second:?}");
        assert!(
            next_second[0].ends_with("soaking after a: b starts in 5s"),
            "{next_second:?}"
        );
    }

    /// What `wait` does in a group of `phase`: "exits N" or "waits".
    fn wait_does(phase: RolloutPhase) -> String {
        let view = GroupStatus {
            name: "ingester".to_owned(),
            namespace: None,
            phase,
            zones: Vec::new(),
            waiting: None,
            last_actions: Vec::new(),
            rollback: None,
            warnings: Vec::new(),
            timeline: None,
            check: None,
        };
        outcome(&view).map_or_else(|| "waits".to_owned(), |done| format!("exits {}", done.code))
    }

    fn doc(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
    }

    /// The rows of the first Markdown table after `heading` in `text`, as cells.
    fn table_after(text: &str, heading: &str) -> Vec<Vec<String>> {
        let after = &text[text
            .find(heading)
            .unwrap_or_else(|| panic!("no {heading:?}"))..];
        after
            .lines()
            .skip_while(|line| !line.starts_with('|'))
            .take_while(|line| line.starts_with('|'))
            .skip(2)
            .map(|line| {
                line.trim_matches('|')
                    .split(" | ")
                    .map(|cell| cell.trim().trim_matches('`').to_owned())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_one_list_of_phases_in_status_md_is_what_the_code_says() {
        // Given the group phases as docs/status.md lists them, with what wait does in each
        let status = doc("status.md");
        let rows = table_after(&status, "Of a group");
        let documented: Vec<(String, String)> = rows
            .iter()
            .map(|cells| (cells[0].clone(), cells[2].clone()))
            .collect();
        // Then they are every phase of the code, in its order, and wait does what they say
        let coded: Vec<(String, String)> = RolloutPhase::ALL
            .iter()
            .map(|phase| (phase.as_str().to_owned(), wait_does(*phase)))
            .collect();
        assert_eq!(documented, coded);
        // and every zone phase listed is a phase
        for cells in table_after(&status, "Of a zone") {
            assert!(
                RolloutPhase::ALL
                    .iter()
                    .any(|phase| phase.as_str() == cells[0]),
                "status.md lists a zone phase {:?} the code does not have",
                cells[0]
            );
        }
    }

    #[test]
    fn every_phase_is_listed_once() {
        let words: std::collections::BTreeSet<&str> = RolloutPhase::ALL
            .iter()
            .map(|phase| phase.as_str())
            .collect();
        assert_eq!(words.len(), RolloutPhase::ALL.len());
    }

    #[test]
    fn other_docs_point_to_the_list_instead_of_keeping_their_own() {
        for name in ["plugin.md", "rollout-plans.md", "gates.md", "partition.md"] {
            let text = doc(name);
            for phase in RolloutPhase::ALL {
                let row = format!("| `{}` |", phase.as_str());
                assert!(
                    !text.lines().any(|line| line.starts_with(&row)),
                    "docs/{name} keeps its own row for {phase}; it points to status.md#phases"
                );
            }
        }
    }
}
