//! The sequence step by step, against an in-memory API server and pods that write down what
//! they were asked ([`World`]): each scenario reads as the requests made, in order, and the
//! answer.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSetStatus;

use super::*;
use crate::admission::verdict::Refusal;
use crate::annotations::{
    MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, NO_DOWNSCALE_LABEL, PREPARE_DOWNSCALE_LABEL,
    PREPARE_DOWNSCALE_PATH_ANNOTATION, PREPARE_DOWNSCALE_PORT_ANNOTATION,
};
use crate::testing::now;
use crate::testing::objects::{labels, zone_pod, zone_statefulset};

const A: &str = "ingester-zone-a";
const B: &str = "ingester-zone-b";
const C: &str = "ingester-zone-c";
const LEDGER: &str = "baton-downscale-ingester";
const TRACKER: &str = "rollout-operator-zone-tracker";
const UID: &str = "review-1";
const GENERATION: i64 = 4;
/// What every denial starts with.
const SUBJECT: &str = "downscale of statefulsets/ingester-zone-a in mimir from 5 to 3 replicas";

fn settings() -> Settings {
    Settings {
        namespace: "mimir".to_owned(),
        zone_tracker: TRACKER.to_owned(),
        claim_grace: Duration::from_secs(60),
        addressing: PodAddressing::Dns,
        cluster_domain: "cluster.local".to_owned(),
        members: None,
    }
}

fn at(seconds_from_now: i64) -> Timestamp {
    now() + jiff::SignedDuration::from_secs(seconds_from_now)
}

/// Zone `name` of the `ingester` group, opted in, 5 replicas all updated, min-time 1h.
fn zone(name: &str) -> StatefulSet {
    let mut statefulset = zone_statefulset(name, 5);
    let metadata = &mut statefulset.metadata;
    metadata.resource_version = Some(format!("rv-{name}"));
    metadata.generation = Some(GENERATION);
    metadata.labels.get_or_insert_default().extend(labels(&[
        (PREPARE_DOWNSCALE_LABEL, "true"),
        (MIN_TIME_BETWEEN_ZONES_DOWNSCALE_LABEL, "1h"),
    ]));
    metadata.annotations = Some(labels(&[
        (
            PREPARE_DOWNSCALE_PATH_ANNOTATION,
            "ingester/prepare-shutdown",
        ),
        (PREPARE_DOWNSCALE_PORT_ANNOTATION, "8080"),
    ]));
    if let Some(spec) = statefulset.spec.as_mut() {
        spec.service_name = Some("ingester".to_owned());
    }
    statefulset.status = Some(StatefulSetStatus {
        replicas: 5,
        updated_replicas: Some(5),
        ..StatefulSetStatus::default()
    });
    statefulset
}

/// `zone(name)` out of any group.
fn alone(name: &str) -> StatefulSet {
    let mut statefulset = zone(name);
    if let Some(labels) = statefulset.metadata.labels.as_mut() {
        labels.remove(ROLLOUT_GROUP_LABEL);
    }
    statefulset
}

/// Its five pods, Ready for an hour.
fn pods_of(name: &str) -> Vec<CachedPod> {
    (0..5)
        .map(|ordinal| CachedPod::of(&zone_pod(name, ordinal, at(-3600)).build()))
        .collect()
}

/// The review of zone a's downscale from 5 to 3, describing it as stored.
fn request() -> PrepareRequest {
    PrepareRequest {
        uid: UID.to_owned(),
        downscale: Downscale {
            resource: "statefulsets".to_owned(),
            name: A.to_owned(),
            namespace: "mimir".to_owned(),
            from: 5,
            to: 3,
        },
        stored_as: StoredAs {
            uid: Some(format!("uid-{A}")),
            resource_version: Some(format!("rv-{A}")),
        },
    }
}

/// An entry confirmed `seconds` ago.
fn downscaled(seconds: i64) -> String {
    serde_json::to_string(&Entry::new(at(-seconds), "earlier")).unwrap()
}

/// The API server and the pods, as far as the flow asks them: answers each step from what it
/// holds, and writes down every request (`said`), in order.
struct World {
    statefulsets: Vec<StatefulSet>,
    /// The ledger as stored (`resource_version: None`: no such ConfigMap).
    ledger: Ledger,
    tracker: ZoneTracker,
    pods: Vec<CachedPod>,
    /// Requests that fail, as `said` writes them (a records read: each ConfigMap's own
    /// `read configmaps/<name>`), and at which time they are made (1: the first).
    failing: Vec<(String, usize)>,
    /// How many times each request was made.
    made: BTreeMap<String, usize>,
    /// Other replicas' writes of the ledger, one before each of ours, while any are left:
    /// each sets this entry (when some) and moves the version.
    rivals: usize,
    rival_entry: Option<(String, String)>,
    said: Vec<String>,
    /// How each release ended.
    released: Vec<Released>,
    /// With member clusters: this cluster's name, and what the claim across them answers.
    members: Option<(String, Result<Vec<String>, String>)>,
}

impl World {
    fn new(statefulsets: Vec<StatefulSet>) -> Self {
        let pods = statefulsets
            .iter()
            .filter_map(|statefulset| statefulset.metadata.name.as_deref())
            .flat_map(pods_of)
            .collect();
        Self {
            statefulsets,
            ledger: Ledger::default(),
            tracker: ZoneTracker::default(),
            pods,
            failing: Vec::new(),
            made: BTreeMap::new(),
            rivals: 0,
            rival_entry: None,
            said: Vec::new(),
            released: Vec::new(),
            members: None,
        }
    }

    /// With member clusters, this one `cluster`, the claim across them answering `answer`.
    fn with_members(mut self, cluster: &str, answer: Result<Vec<String>, String>) -> Self {
        self.members = Some((cluster.to_owned(), answer));
        self
    }

    /// The three zones of the group, all settled.
    fn group() -> Self {
        Self::new(vec![zone(A), zone(B), zone(C)])
    }

    /// `request` fails the first time it is made.
    fn failing(self, request: &str) -> Self {
        self.failing_at(request, 1)
    }

    /// `request` fails the `time`th time it is made.
    fn failing_at(mut self, request: &str, time: usize) -> Self {
        self.failing.push((request.to_owned(), time));
        self
    }

    fn with_entry(mut self, statefulset: &str, entry: String) -> Self {
        self.ledger.resource_version = Some("1".to_owned());
        self.ledger.data.insert(statefulset.to_owned(), entry);
        self
    }

    /// Runs the flow for `request` to its answer; the notes taken on the way.
    fn run(&mut self, request: PrepareRequest) -> (Verdict, Vec<Note>) {
        let members = self.members.as_ref().map(|(cluster, _)| MemberSettings {
            cluster: cluster.clone(),
            lifetime: Duration::from_secs(9),
        });
        let (mut flow, mut step) = Flow::start(
            Settings {
                members,
                ..settings()
            },
            request,
        );
        let mut notes = Vec::new();
        for _ in 0..100 {
            notes.extend(flow.take_notes());
            let reply = match step {
                Step::Do(io) => self.perform(io, ""),
                Step::Undo { pods, release } => {
                    self.undo(&pods, release);
                    Reply::Undone
                }
                Step::Answer(verdict) => return (verdict, notes),
            };
            step = flow.advance(reply, now());
        }
        panic!("the flow never answered: {:?}", self.said);
    }

    /// `what` said, and made: its error when it fails.
    fn say(&mut self, what: String) -> Result<(), String> {
        self.said.push(what.clone());
        self.make(&what)
    }

    /// `what` made: its error when it fails this time.
    fn make(&mut self, what: &str) -> Result<(), String> {
        let made = self.made.entry(what.to_owned()).or_default();
        *made += 1;
        if self.failing.contains(&(what.to_owned(), *made)) {
            return Err(format!("{what}: the server is unreachable"));
        }
        Ok(())
    }

    fn perform(&mut self, io: Io, prefix: &str) -> Reply {
        match io {
            Io::ReadStatefulSet { name } => Reply::StatefulSet(
                self.say(format!("{prefix}read statefulsets/{name}"))
                    .and_then(|()| {
                        let found = self.statefulsets.iter().find(|statefulset| {
                            statefulset.metadata.name.as_deref() == Some(&name)
                        });
                        found
                            .map(|statefulset| Box::new(statefulset.clone()))
                            .ok_or_else(|| format!("{name} not found"))
                    }),
            ),
            Io::ListGroup { selector } => {
                let listed = self.say(format!("{prefix}list statefulsets {selector}"));
                let members = self
                    .statefulsets
                    .iter()
                    .filter(|statefulset| matches(&selector, &statefulset.metadata.labels))
                    .cloned()
                    .collect();
                Reply::Group(listed.map(|()| members))
            }
            Io::ReadRecords { ledger, tracker } => {
                let read_ledger = format!("read configmaps/{ledger}");
                let read_tracker = format!("read configmaps/{tracker}");
                self.said
                    .push(format!("{prefix}{read_ledger} + configmaps/{tracker}"));
                Reply::Records {
                    ledger: self.make(&read_ledger).map(|()| self.ledger.clone()),
                    tracker: self.make(&read_tracker).map(|()| self.tracker.clone()),
                }
            }
            Io::ListPods { selector } => {
                let listed = self.say(format!("{prefix}list pods {selector}"));
                let pods = self
                    .pods
                    .iter()
                    .filter(|pod| matches(&selector, &pod.labels))
                    .cloned()
                    .collect();
                Reply::Pods(listed.map(|()| pods))
            }
            Io::ReadLedger { name } => {
                let read = self.say(format!("{prefix}read configmaps/{name}"));
                Reply::Ledger(read.map(|()| self.ledger.clone()))
            }
            Io::WriteLedger { name, ledger, .. } => {
                let written = self.say(format!("{prefix}write configmaps/{name}"));
                Reply::Written(written.map(|()| self.write(ledger)))
            }
            Io::Prepare { pods } => {
                let names: Vec<&str> = pods.iter().map(|pod| pod.pod.as_str()).collect();
                let called = self.say(format!("{prefix}POST {}", names.join(", ")));
                Reply::Prepared(called)
            }
            Io::ClaimMembers {
                cluster,
                ledger,
                key,
                claim,
                ..
            } => {
                self.said.push(format!(
                    "{prefix}claim {key} in the other members' {ledger}, after {cluster}'s"
                ));
                assert_eq!(claim.request, UID);
                let answer = self.members.as_ref().expect("members").1.clone();
                Reply::Members(answer)
            }
        }
    }

    /// A write conditioned on the version `ledger` was read at.
    fn write(&mut self, ledger: Ledger) -> Written {
        if self.rivals > 0 {
            self.rivals -= 1;
            if let Some((statefulset, entry)) = &self.rival_entry {
                self.ledger.data.insert(statefulset.clone(), entry.clone());
            }
            self.bump();
        }
        if ledger.resource_version != self.ledger.resource_version {
            return Written::Conflict;
        }
        self.ledger.data = ledger.data;
        self.bump();
        Written::Done(self.ledger.clone())
    }

    fn bump(&mut self) {
        let version = self
            .ledger
            .resource_version
            .as_deref()
            .map_or(0, |version| version.parse::<u32>().unwrap());
        self.ledger.resource_version = Some((version + 1).to_string());
    }

    fn undo(&mut self, pods: &[PodEndpoint], release: Option<Release>) {
        if !pods.is_empty() {
            let names: Vec<&str> = pods.iter().map(|pod| pod.pod.as_str()).collect();
            self.said.push(format!("undo: DELETE {}", names.join(", ")));
        }
        if let Some(mut release) = release {
            let mut step = release.start();
            for _ in 0..100 {
                match step {
                    ReleaseStep::Do(io) => {
                        let reply = self.perform(io, "undo: ");
                        step = release.advance(reply);
                    }
                    ReleaseStep::Done(released) => {
                        self.released.push(released);
                        return;
                    }
                }
            }
            panic!("the release never ended: {:?}", self.said);
        }
    }

    /// The entry the ledger holds for `statefulset`.
    fn entry(&self, statefulset: &str) -> Option<Entry> {
        self.ledger.entry(statefulset).unwrap()
    }
}

/// Whether `labels` have every `key=value` of `selector`.
fn matches(selector: &str, labels: &impl crate::labels::LabelSet) -> bool {
    selector.split(',').all(|pair| {
        let (key, value) = pair.split_once('=').unwrap();
        labels.label(key) == Some(value)
    })
}

fn said(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|line| (*line).to_owned()).collect()
}

/// What a grouped downscale asks before its claim, in order.
const JUDGED: [&str; 5] = [
    "read statefulsets/ingester-zone-a",
    "list statefulsets rollout-group=ingester",
    "read configmaps/baton-downscale-ingester + configmaps/rollout-operator-zone-tracker",
    "list pods zone=ingester-zone-b",
    "list pods zone=ingester-zone-c",
];

fn refusal(verdict: &Verdict) -> &Refusal {
    match verdict {
        Verdict::Refuse(refusal) => refusal,
        other => panic!("not refused: {other:?}"),
    }
}

fn prepared_message() -> Option<String> {
    Some(format!(
        "{SUBJECT} is allowed -- all pods successfully prepared for shutdown."
    ))
}

#[test]
fn a_downscale_outside_any_group_lists_its_pods_and_tells_those_going_away() {
    let mut world = World::new(vec![alone(A)]);
    // A pod named and labelled as zone a's that zone a does not control is never called.
    let stray = world
        .pods
        .iter_mut()
        .find(|pod| pod.name == "ingester-zone-a-4");
    stray.unwrap().controller = None;

    let (verdict, notes) = world.run(request());

    assert_eq!(verdict.message(), prepared_message());
    assert!(verdict.is_allowed());
    assert_eq!(
        world.said,
        said(&[
            "read statefulsets/ingester-zone-a",
            "list pods zone=ingester-zone-a",
            "POST ingester-zone-a-3",
        ])
    );
    assert_eq!(notes, vec![Note::Prepared]);
}

#[test]
fn a_grouped_downscale_judges_min_time_and_readiness_then_claims_then_tells_the_pods() {
    let mut world = World::group();

    let (verdict, notes) = world.run(request());

    assert_eq!(verdict.message(), prepared_message());
    let mut expected = said(&JUDGED);
    expected.extend(said(&[
        "write configmaps/baton-downscale-ingester",
        "list pods zone=ingester-zone-a",
        "POST ingester-zone-a-4, ingester-zone-a-3",
    ]));
    assert_eq!(world.said, expected);
    assert_eq!(
        world.entry(A),
        Some(Entry::claim(now(), UID, (5, 3), GENERATION, None))
    );
    assert_eq!(
        notes,
        vec![
            Note::Claimed {
                ledger: LEDGER.to_owned()
            },
            Note::Prepared
        ]
    );
}

#[test]
fn a_review_for_another_namespace_is_refused_before_any_request() {
    let mut world = World::group();
    let mut foreign = request();
    foreign.downscale.namespace = "kube-system".to_owned();

    let (verdict, notes) = world.run(foreign);

    assert_eq!(
        verdict.message().unwrap(),
        "downscale of statefulsets/ingester-zone-a in kube-system from 5 to 3 replicas is not allowed because baton does not serve namespace kube-system"
    );
    assert!(world.said.is_empty());
    assert_eq!(
        notes,
        vec![Note::ForeignNamespace {
            served: "mimir".to_owned(),
            review: "kube-system".to_owned()
        }]
    );
}

#[test]
fn a_review_not_of_the_statefulset_as_stored_prepares_nothing_and_says_what_differs_only_in_the_log()
 {
    let stored_as = |uid: Option<&str>, version: Option<&str>| StoredAs {
        uid: uid.map(str::to_owned),
        resource_version: version.map(str::to_owned),
    };
    let cases = [
        (5, stored_as(Some("uid-ingester-zone-a"), Some("rv-old"))),
        (5, stored_as(Some("uid-forged"), Some("rv-ingester-zone-a"))),
        (5, stored_as(None, None)),
        // The review says 5 replicas, the StatefulSet has 6.
        (
            6,
            stored_as(Some("uid-ingester-zone-a"), Some("rv-ingester-zone-a")),
        ),
    ];
    for (replicas, review) in cases {
        let mut stored = zone(A);
        stored.spec.as_mut().unwrap().replicas = Some(replicas);
        let mut world = World::new(vec![stored, zone(B)]);
        let mut forged = request();
        forged.stored_as = review.clone();

        let (verdict, notes) = world.run(forged);

        assert_eq!(refusal(&verdict).reason, Reason::NotAsStored, "{review:?}");
        assert!(!verdict.message().unwrap().contains("rv-"), "{verdict:?}");
        assert_eq!(world.said, said(&["read statefulsets/ingester-zone-a"]));
        assert_eq!(
            notes,
            vec![Note::NotAsStored {
                stored_replicas: replicas,
                stored: stored_as(Some("uid-ingester-zone-a"), Some("rv-ingester-zone-a")),
                review,
            }]
        );
    }
}

#[test]
fn a_statefulset_not_opted_in_is_allowed_and_one_also_labelled_no_downscale_is_refused_after_one_read()
 {
    let mut unlabelled = zone(A);
    unlabelled
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(PREPARE_DOWNSCALE_LABEL);
    let mut world = World::new(vec![unlabelled, zone(B)]);
    let (verdict, _) = world.run(request());
    assert_eq!(verdict, Verdict::allow());
    assert_eq!(world.said, said(&["read statefulsets/ingester-zone-a"]));

    let mut forbidden = zone(A);
    forbidden
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(NO_DOWNSCALE_LABEL.to_owned(), "true".to_owned());
    let mut world = World::new(vec![forbidden, zone(B)]);
    let (verdict, _) = world.run(request());
    assert_eq!(refusal(&verdict).reason, Reason::NoDownscaleLabel);
    assert_eq!(world.said, said(&["read statefulsets/ingester-zone-a"]));
}

#[test]
fn another_zone_downscaled_within_min_time_denies_before_any_pod_list_or_write() {
    let mut world = World::group().with_entry(B, downscaled(600));

    let (verdict, _) = world.run(request());

    assert_eq!(
        verdict.message().unwrap(),
        format!(
            "{SUBJECT} is not allowed because statefulset ingester-zone-b was downscaled at 2023-11-14 22:03:20 +0000 UTC and is labelled to wait 1h0m0s between zone downscales (50m0s left)"
        )
    );
    assert_eq!(refusal(&verdict).reason, Reason::MinTime);
    assert_eq!(world.said, said(&JUDGED[..3]));
    assert_eq!(world.entry(A), None);
}

#[test]
fn a_malformed_tracker_entry_of_a_member_is_noted_with_the_trackers_version_and_counts_as_now() {
    let mut world = World::group();
    world.tracker = ZoneTracker {
        resource_version: Some("t-9".to_owned()),
        data: BTreeMap::from([
            (B.to_owned(), "yesterday".to_owned()),
            // Not a member's: never parsed, never noted.
            ("someone-else".to_owned(), "garbage".to_owned()),
        ]),
    };

    let (verdict, notes) = world.run(request());

    assert_eq!(refusal(&verdict).reason, Reason::MinTime);
    assert_eq!(
        notes,
        vec![Note::MalformedTracker {
            version: Some("t-9".to_owned()),
            entries: vec![MalformedTrackerEntry {
                key: B.to_owned(),
                value: "yesterday".to_owned()
            }],
        }]
    );
    assert_eq!(world.said, said(&JUDGED[..3]));
}

#[test]
fn another_zone_not_ready_denies_after_every_other_zone_is_counted_and_claims_nothing() {
    let mut world = World::group();
    // Zone b's pod 2 is not Ready.
    let not_ready = CachedPod::of(&zone_pod(B, 2, at(-3600)).not_ready(at(-60)).build());
    let index = world
        .pods
        .iter()
        .position(|pod| pod.name == "ingester-zone-b-2")
        .unwrap();
    world.pods[index] = not_ready;

    let (verdict, _) = world.run(request());

    assert_eq!(
        verdict.message().unwrap(),
        format!(
            "{SUBJECT} is not allowed because statefulset ingester-zone-b has 0 non-updated replicas and 1 non-ready replicas"
        )
    );
    assert_eq!(refusal(&verdict).reason, Reason::OtherZoneNotReady);
    assert_eq!(world.said, said(&JUDGED));
    assert_eq!(world.entry(A), None);
}

/// Every request before the claim, failing: denied naming it, nothing written, nothing to undo.
#[test]
fn a_failure_before_the_claim_denies_naming_the_step_and_undoes_nothing() {
    let cases = [
        (
            "read statefulsets/ingester-zone-a",
            "reading statefulsets/ingester-zone-a in namespace mimir",
            1,
        ),
        (
            "list statefulsets rollout-group=ingester",
            "finding other statefulsets",
            2,
        ),
        (
            "read configmaps/baton-downscale-ingester",
            "reading the group's downscale ledger",
            3,
        ),
        (
            "read configmaps/rollout-operator-zone-tracker",
            "reading the zone tracker rollout-operator-zone-tracker",
            3,
        ),
        (
            "list pods zone=ingester-zone-b",
            "checking whether StatefulSets have non-updated replicas",
            4,
        ),
        (
            "list pods zone=ingester-zone-c",
            "checking whether StatefulSets have non-updated replicas",
            5,
        ),
        (
            "write configmaps/baton-downscale-ingester",
            "recording the downscale in the group's ledger",
            6,
        ),
    ];
    for (failing, what, asked) in cases {
        let mut world = World::group().failing(failing);

        let (verdict, notes) = world.run(request());

        let error = format!("{failing}: the server is unreachable");
        assert_eq!(
            verdict.message().unwrap(),
            format!("{SUBJECT} is not allowed because {what} failed: {error}"),
            "{failing}"
        );
        assert_eq!(refusal(&verdict).reason, Reason::ReadFailed);
        let mut expected = said(&JUDGED);
        expected.push("write configmaps/baton-downscale-ingester".to_owned());
        expected.truncate(asked);
        assert_eq!(world.said, expected, "{failing}");
        assert!(world.released.is_empty(), "{failing}");
        assert_eq!(
            notes.last(),
            Some(&Note::StepFailed {
                what: what.to_owned(),
                error
            })
        );
    }
}

#[test]
fn listing_the_pods_failing_after_the_claim_releases_it() {
    let before = downscaled(7200);
    let mut world = World::group()
        .with_entry(A, before.clone())
        .failing("list pods zone=ingester-zone-a");

    let (verdict, _) = world.run(request());

    assert_eq!(
        verdict.message().unwrap(),
        format!(
            "{SUBJECT} is not allowed because listing its pods failed: list pods zone=ingester-zone-a: the server is unreachable"
        )
    );
    let mut expected = said(&JUDGED);
    expected.extend(said(&[
        "write configmaps/baton-downscale-ingester",
        "list pods zone=ingester-zone-a",
        "undo: read configmaps/baton-downscale-ingester",
        "undo: write configmaps/baton-downscale-ingester",
    ]));
    assert_eq!(world.said, expected);
    assert_eq!(world.released, vec![Released::Restored]);
    // The entry the claim replaced is back as it was.
    assert_eq!(world.ledger.data[A], before);
}

#[test]
fn a_pod_failing_to_prepare_tells_every_pod_to_undo_and_releases_the_claim_at_the_same_step() {
    let mut world = World::group().failing("POST ingester-zone-a-4, ingester-zone-a-3");

    let (verdict, notes) = world.run(request());

    let error = "POST ingester-zone-a-4, ingester-zone-a-3: the server is unreachable";
    assert_eq!(
        verdict.message().unwrap(),
        format!(
            "{SUBJECT} is not allowed because one or more pods failed to prepare for shutdown: {error}"
        )
    );
    assert_eq!(refusal(&verdict).reason, Reason::PodsFailedToPrepare);
    let mut expected = said(&JUDGED);
    expected.extend(said(&[
        "write configmaps/baton-downscale-ingester",
        "list pods zone=ingester-zone-a",
        "POST ingester-zone-a-4, ingester-zone-a-3",
        "undo: DELETE ingester-zone-a-4, ingester-zone-a-3",
        "undo: read configmaps/baton-downscale-ingester",
        "undo: write configmaps/baton-downscale-ingester",
    ]));
    assert_eq!(world.said, expected);
    assert_eq!(world.released, vec![Released::Restored]);
    // The claim had replaced nothing: nothing is left.
    assert_eq!(world.entry(A), None);
    assert!(notes.contains(&Note::PodFailed {
        error: error.to_owned()
    }));
}

#[test]
fn a_pod_failing_outside_any_group_is_undone_with_nothing_to_release() {
    let mut world = World::new(vec![alone(A)]).failing("POST ingester-zone-a-4, ingester-zone-a-3");

    let (verdict, _) = world.run(request());

    assert_eq!(refusal(&verdict).reason, Reason::PodsFailedToPrepare);
    assert_eq!(
        world.said,
        said(&[
            "read statefulsets/ingester-zone-a",
            "list pods zone=ingester-zone-a",
            "POST ingester-zone-a-4, ingester-zone-a-3",
            "undo: DELETE ingester-zone-a-4, ingester-zone-a-3",
        ])
    );
    assert!(world.released.is_empty());
}

#[test]
fn a_pod_that_cannot_be_addressed_calls_no_pod_and_releases_the_claim() {
    let mut world = World::group();
    // Named as DNS cannot take: no pod is called, and nothing is left claimed.
    world.statefulsets[0].spec.as_mut().unwrap().service_name = Some("Not_A_Service".to_owned());

    let (verdict, _) = world.run(request());

    assert_eq!(refusal(&verdict).reason, Reason::PodAddress, "{verdict:?}");
    let mut expected = said(&JUDGED);
    expected.extend(said(&[
        "write configmaps/baton-downscale-ingester",
        "list pods zone=ingester-zone-a",
        "undo: read configmaps/baton-downscale-ingester",
        "undo: write configmaps/baton-downscale-ingester",
    ]));
    assert_eq!(world.said, expected);
    assert_eq!(world.entry(A), None);
}

#[test]
fn a_claim_lost_to_another_replica_is_judged_again_on_a_fresh_read() {
    // The other replica claimed zone b's downscale first: judged again, a's is denied.
    let mut world = World::group();
    world.rivals = 1;
    world.rival_entry = Some((B.to_owned(), downscaled(0)));

    let (verdict, notes) = world.run(request());

    assert_eq!(refusal(&verdict).reason, Reason::MinTime);
    let mut expected = said(&JUDGED);
    expected.extend(said(&[
        "write configmaps/baton-downscale-ingester",
        "read configmaps/baton-downscale-ingester",
    ]));
    assert_eq!(world.said, expected);
    assert!(notes.contains(&Note::LedgerChanged));
    assert_eq!(world.entry(A), None);

    // The other replica wrote something that does not deny: claimed on the second write.
    let mut world = World::group();
    world.rivals = 1;
    let (verdict, _) = world.run(request());
    assert_eq!(verdict.message(), prepared_message());
    let writes = world
        .said
        .iter()
        .filter(|line| line.starts_with("write "))
        .count();
    assert_eq!(writes, 2);
    assert!(world.entry(A).is_some());
}

#[test]
fn a_ledger_that_keeps_changing_ends_the_claim_after_the_attempts_with_nothing_to_undo() {
    let mut world = World::group();
    world.rivals = usize::MAX;

    let (verdict, _) = world.run(request());

    assert_eq!(
        verdict.message().unwrap(),
        format!(
            "{SUBJECT} is not allowed because the group's downscale ledger {LEDGER} kept changing; retry"
        )
    );
    assert_eq!(refusal(&verdict).reason, Reason::LedgerContended);
    let count = |prefix: &str| {
        world
            .said
            .iter()
            .filter(|line| line.starts_with(prefix))
            .count()
    };
    // Bounded: as many writes as attempts, a fresh read between two.
    assert_eq!(count("write configmaps/"), CLAIM_ATTEMPTS);
    assert_eq!(
        count("read configmaps/baton-downscale-ingester"),
        CLAIM_ATTEMPTS
    );
    assert_eq!(world.said.len(), JUDGED.len() + 2 * CLAIM_ATTEMPTS - 1);
    assert!(world.released.is_empty());
}

#[test]
fn a_fresh_read_failing_after_a_lost_race_denies_naming_it() {
    // Read first with the tracker, then again alone.
    let mut world = World::group().failing_at("read configmaps/baton-downscale-ingester", 2);
    world.rivals = 1;

    let (verdict, _) = world.run(request());

    assert_eq!(
        verdict.message().unwrap(),
        format!(
            "{SUBJECT} is not allowed because reading the group's downscale ledger failed: read configmaps/baton-downscale-ingester: the server is unreachable"
        )
    );
    assert_eq!(
        world.said.last().unwrap(),
        "read configmaps/baton-downscale-ingester"
    );
    assert!(world.released.is_empty());
}

#[test]
fn the_same_downscale_admitted_again_moments_later_is_claimed_but_its_pods_are_not_told_twice() {
    let earlier = Entry::claim(at(-10), "review-0", (5, 3), GENERATION, None);
    let mut world = World::group().with_entry(A, serde_json::to_string(&earlier).unwrap());

    let (verdict, notes) = world.run(request());

    assert_eq!(verdict.message(), prepared_message());
    let mut expected = said(&JUDGED);
    expected.push("write configmaps/baton-downscale-ingester".to_owned());
    assert_eq!(world.said, expected);
    assert!(notes.contains(&Note::PreparedAlready));
    assert_eq!(world.entry(A).unwrap().request, UID);
}

#[test]
fn a_reply_that_answers_no_step_asked_is_refused_as_internal() {
    let (mut flow, _) = Flow::start(settings(), request());
    let step = flow.advance(Reply::Undone, now());
    let Step::Answer(verdict) = step else {
        panic!("{step:?}")
    };
    assert_eq!(refusal(&verdict).reason, Reason::Internal);
    assert_eq!(
        verdict.message().unwrap(),
        "the downscale could not be prepared: internal error: the undo answered while reading the StatefulSet"
    );
}

mod releasing {
    use super::*;

    fn release(previous: Option<Entry>) -> Release {
        Release {
            uid: UID.to_owned(),
            statefulset: A.to_owned(),
            ledger: LEDGER.to_owned(),
            group: "ingester".to_owned(),
            previous,
            member: None,
            writes: 0,
        }
    }

    fn ours() -> String {
        serde_json::to_string(&Entry::claim(now(), UID, (5, 3), GENERATION, None)).unwrap()
    }

    fn released(world: &mut World, previous: Option<Entry>) -> Released {
        world.undo(&[], Some(release(previous)));
        world.released.pop().unwrap()
    }

    #[test]
    fn a_claim_still_ours_is_replaced_by_what_it_replaced() {
        let previous = Entry::new(at(-7200), "earlier");
        let mut world = World::group().with_entry(A, ours());
        assert_eq!(
            released(&mut world, Some(previous.clone())),
            Released::Restored
        );
        assert_eq!(world.entry(A), Some(previous));
    }

    #[test]
    fn a_claim_no_longer_ours_is_left_alone() {
        let mut world = World::group().with_entry(A, downscaled(5));
        let before = world.ledger.clone();
        assert_eq!(released(&mut world, None), Released::NotOurs);
        assert_eq!(world.ledger, before);
        assert_eq!(
            world.said,
            said(&["undo: read configmaps/baton-downscale-ingester"])
        );
    }

    #[test]
    fn a_lost_race_reads_again_and_a_ledger_that_keeps_changing_gives_up_after_the_attempts() {
        let mut world = World::group().with_entry(A, ours());
        world.rivals = 1;
        assert_eq!(released(&mut world, None), Released::Restored);
        assert_eq!(world.said.len(), 4);
        assert_eq!(world.entry(A), None);

        let mut world = World::group().with_entry(A, ours());
        world.rivals = usize::MAX;
        assert_eq!(released(&mut world, None), Released::KeptChanging);
        assert_eq!(world.said.len(), 2 * CLAIM_ATTEMPTS);
    }

    #[test]
    fn a_failed_read_or_write_ends_the_release_naming_it() {
        for failing in [
            "undo: read configmaps/baton-downscale-ingester",
            "undo: write configmaps/baton-downscale-ingester",
        ] {
            let mut world = World::group().with_entry(A, ours()).failing(failing);
            assert_eq!(
                released(&mut world, None),
                Released::Failed(format!("{failing}: the server is unreachable"))
            );
            assert_eq!(world.said.last().unwrap(), failing);
        }
    }
}

mod across_members {
    use super::*;

    const OWN_CLAIM: &str = "member_cluster-a_ingester-zone-a_review-1";

    #[test]
    fn the_claim_goes_into_the_own_ledger_with_the_entry_then_to_the_others_before_any_pod_is_told()
    {
        let mut world = World::group().with_members("cluster-a", Ok(Vec::new()));

        let (verdict, _) = world.run(request());

        assert_eq!(verdict.message(), prepared_message());
        let mut expected = said(&JUDGED);
        expected.extend(said(&[
            "write configmaps/baton-downscale-ingester",
            "claim member_cluster-a_ingester-zone-a_review-1 in the other members' baton-downscale-ingester, after cluster-a's",
            "list pods zone=ingester-zone-a",
            "POST ingester-zone-a-4, ingester-zone-a-3",
        ]));
        assert_eq!(world.said, expected);
        assert!(world.entry(A).is_some(), "the entry, as in one cluster");
        let claim: MemberClaim =
            serde_json::from_str(&world.ledger.data[OWN_CLAIM]).expect("the member claim");
        assert_eq!(claim.window(), Ok((now(), Duration::from_secs(3600))));
    }

    #[test]
    fn an_approval_without_every_member_warns_naming_the_members_that_did_not_take_it() {
        let silent = "member cluster cluster-c had not answered when a majority accepted";
        let mut world = World::group().with_members("cluster-a", Ok(vec![silent.to_owned()]));

        let (verdict, _) = world.run(request());

        assert_eq!(verdict.message(), prepared_message());
        let Verdict::Allow(allowed) = &verdict else {
            panic!("allowed: {verdict:?}");
        };
        assert_eq!(allowed.warnings, [silent]);
        assert!(world.said.iter().any(|line| line.starts_with("POST")));
    }

    #[test]
    fn no_majority_refuses_for_now_and_releases_the_own_ledgers_entry_and_claim() {
        let message =
            "downscale ... is not allowed yet: member cluster cluster-b could not be reached";
        let mut world = World::group().with_members("cluster-a", Err(message.to_owned()));

        let (verdict, _) = world.run(request());

        let refused = refusal(&verdict);
        assert_eq!(refused.reason, Reason::NoMajority);
        assert!(refused.retry_later, "a 429: retried later");
        assert_eq!(refused.message, message);
        assert!(!world.said.iter().any(|line| line.starts_with("POST")));
        assert_eq!(world.released, vec![Released::Restored]);
        assert_eq!(world.entry(A), None);
        assert!(!world.ledger.data.contains_key(OWN_CLAIM), "withdrawn");
    }

    #[test]
    fn another_members_claim_in_the_own_ledger_refuses_for_now_without_a_write() {
        let theirs = member_claims::key("cluster-b", "ingester-zone-b", "other");
        let claim = MemberClaim::new(at(-60), Duration::from_secs(600), "other");
        let entry = serde_json::to_string(&claim).unwrap();
        let mut world = World::group()
            .with_entry(&theirs, entry)
            .with_members("cluster-a", Ok(Vec::new()));

        let (verdict, _) = world.run(request());

        let refused = refusal(&verdict);
        assert_eq!(refused.reason, Reason::NoMajority);
        assert!(refused.retry_later);
        assert!(
            refused.message.contains(
                "member cluster cluster-a (this one) holds a claim of cluster-b/ingester-zone-b"
            ),
            "{}",
            refused.message
        );
        assert_eq!(world.said, said(&JUDGED), "nothing written");
    }
}
