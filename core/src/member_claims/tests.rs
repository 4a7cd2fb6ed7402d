use super::*;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

const MINUTE: Duration = Duration::from_secs(60);
const LIFETIME: Duration = Duration::from_secs(10);

fn members() -> Vec<String> {
    order_of(&["cluster-c", "cluster-a", "cluster-b"])
}

fn order_of(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// Judged at the claim's own time.
fn judged(ledger: &Ledger, key: &str, claim: &MemberClaim) -> Judged {
    let now = claim.window().expect("readable").0;
    judge(ledger, key, claim, now, LIFETIME)
}

fn with(ledger: &Ledger, key: &str, claim: &MemberClaim) -> Ledger {
    match judged(ledger, key, claim) {
        Judged::Accepts(ledger) => ledger,
        other => panic!("expected the claim accepted, got {other:?}"),
    }
}

#[test]
fn keys_name_the_member_and_cannot_be_a_statefulsets_entry() {
    let key = key("cluster-a", "ingester-zone-a.v2", "7c1a_x/y-2");
    assert_eq!(key, "member_cluster-a_ingester-zone-a.v2_7c1axy-2");
    assert_eq!(
        member_of(&key).as_deref(),
        Some("cluster-a/ingester-zone-a.v2")
    );
    assert_eq!(member_of("ingester-zone-a"), None);
}

#[test]
fn claims_conflict_when_either_starts_within_the_others_min_time() {
    assert!(conflict((at(0), MINUTE), (at(59), MINUTE)));
    assert!(conflict((at(59), MINUTE), (at(0), MINUTE)), "both ways");
    assert!(
        !conflict((at(0), MINUTE), (at(60), MINUTE)),
        "the end is free"
    );
    // A zone without a min-time holds nobody back, but is held by another's.
    assert!(!conflict((at(0), Duration::ZERO), (at(1), Duration::ZERO)));
    assert!(conflict((at(30), Duration::ZERO), (at(0), MINUTE)));
    assert!(conflict((at(0), MINUTE), (at(30), Duration::ZERO)));
}

#[test]
fn a_ledger_accepts_a_claim_only_without_another_members_claim_within_the_min_time() {
    let a = key("cluster-a", "ingester", "u1");
    let b = key("cluster-b", "ingester", "u2");
    let first = MemberClaim::new(at(0), MINUTE, "u1");
    let ledger = with(&Ledger::default(), &a, &first);
    // cluster-b within cluster-a's minute: held, naming cluster-a and until when.
    assert_eq!(
        judged(&ledger, &b, &MemberClaim::new(at(30), MINUTE, "u2")),
        Judged::Held {
            member: "cluster-a/ingester".into(),
            until: at(90),
        }
    );
    // After it: accepted, and the other claim kept.
    let both = with(&ledger, &b, &MemberClaim::new(at(60), MINUTE, "u2"));
    assert_eq!(both.data.len(), 2);
    // The same member again, within its own minute: not held back, and its first claim
    // stays beside the new one (it still holds the others).
    let a3 = key("cluster-a", "ingester", "u3");
    let again = with(&ledger, &a3, &MemberClaim::new(at(10), MINUTE, "u3"));
    assert_eq!(again.data.len(), 2);
    // A claim judged after its lifetime is stale; an hour past its window a claim is dropped.
    let late = MemberClaim::new(at(60), MINUTE, "u2");
    assert_eq!(judge(&ledger, &b, &late, at(71), LIFETIME), Judged::Stale);
    let much_later = with(&ledger, &b, &MemberClaim::new(at(3_661), MINUTE, "u2"));
    assert_eq!(much_later.data.keys().collect::<Vec<_>>(), [&b]);
    // Other entries (the StatefulSets' own) are not claims and hold nobody back.
    let mut mixed = Ledger::default();
    mixed.data.insert("ingester".into(), "{}".into());
    mixed.data.insert("zzz".into(), "yesterday".into());
    let claim = MemberClaim::new(at(0), MINUTE, "u2");
    assert!(matches!(judged(&mixed, &b, &claim), Judged::Accepts(_)));
}

#[test]
fn an_unreadable_claim_of_another_member_holds_every_claim_back_naming_it() {
    let mut ledger = Ledger::default();
    let theirs = key("cluster-a", "ingester", "u1");
    ledger.data.insert(theirs.clone(), "yesterday".into());
    let ours = key("cluster-b", "ingester", "u2");
    let verdict = judged(&ledger, &ours, &MemberClaim::new(at(0), MINUTE, "u2"));
    let Judged::Unreadable { key: named, .. } = &verdict else {
        panic!("{verdict:?}");
    };
    assert_eq!(named, &theirs);
    assert!(matches!(Reached::of(&verdict), Reached::Refused(why) if why.contains("delete it")));
    // cluster-a's own claim does not hold cluster-a back, and stays.
    let again = key("cluster-a", "ingester", "u3");
    let kept = with(&ledger, &again, &MemberClaim::new(at(0), MINUTE, "u3"));
    assert!(kept.data.contains_key(&theirs));
}

#[test]
fn a_withdrawal_removes_only_the_requests_own_claim() {
    let a = key("cluster-a", "ingester", "u1");
    let ledger = with(
        &Ledger::default(),
        &a,
        &MemberClaim::new(at(0), MINUTE, "u1"),
    );
    assert_eq!(withdrawn(&ledger, &a, "u1").map(|l| l.data.len()), Some(0));
    assert_eq!(withdrawn(&ledger, &a, "u2"), None, "another request's");
    let absent = key("cluster-b", "x", "u1");
    assert_eq!(withdrawn(&ledger, &absent, "u1"), None, "absent");
}

#[test]
fn claims_go_to_the_own_ledger_first_then_to_the_others_named_in_order() {
    assert_eq!(
        order("cluster-b", &members()),
        ["cluster-b", "cluster-a", "cluster-c"]
    );
    let majorities = (majority(1), majority(2), majority(3), majority(4));
    assert_eq!(majorities, (1, 2, 2, 3));
}

#[test]
fn a_majority_approves_without_waiting_for_a_member_that_has_not_answered() {
    let order = order("cluster-b", &members());
    let down = || Some(Reached::Unreachable("down".into()));
    // The own ledger's claim alone, the others asked: wait
    assert_eq!(next(&order, &[Some(Reached::Accepted)], "d"), Next::Wait);
    assert_eq!(
        next(&order, &[Some(Reached::Accepted), None, None], "d"),
        Next::Wait
    );
    // The last member answering first makes the majority while cluster-a is still silent,
    // and the approval names it
    let answers = [Some(Reached::Accepted), None, Some(Reached::Accepted)];
    assert_eq!(
        next(&order, &answers, "d"),
        Next::Approved {
            warnings: vec![
                "member cluster cluster-a had not answered when a majority accepted".into()
            ]
        }
    );
    // One member out of three: the other makes the majority, the approval names the one out
    let answers = [Some(Reached::Accepted), down(), Some(Reached::Accepted)];
    let Next::Approved { warnings } = next(&order, &answers, "d") else {
        panic!("expected an approval");
    };
    assert_eq!(
        warnings,
        ["member cluster cluster-a could not be reached: down"]
    );
    let all = [(); 3].map(|()| Some(Reached::Accepted));
    assert_eq!(next(&order, &all, "d"), Next::Approved { warnings: vec![] });
}

#[test]
fn no_majority_refuses_once_all_answered_naming_each_member_and_withdraws_from_those_that_accepted()
{
    let order = order("cluster-b", &members());
    let answers = [
        Some(Reached::Accepted),
        Some(Reached::Refused(
            "holds a claim of cluster-a/ingester".into(),
        )),
        None,
    ];
    // A majority is still possible while cluster-c has not answered: wait
    assert_eq!(next(&order, &answers, "d"), Next::Wait);
    let answers = [
        Some(Reached::Accepted),
        Some(Reached::Refused(
            "holds a claim of cluster-a/ingester".into(),
        )),
        Some(Reached::Unreachable("connection refused".into())),
    ];
    let Next::Refused { withdraw, message } = next(&order, &answers, "downscale of x") else {
        panic!("expected a refusal");
    };
    assert_eq!(withdraw, ["cluster-b"]);
    assert!(
        message.starts_with("downscale of x is not allowed yet"),
        "{message}"
    );
    assert!(
        message.contains("1 of 3 member clusters, and 2 are needed"),
        "{message}"
    );
    assert!(
        message.contains("member cluster cluster-a holds a claim of cluster-a/ingester"),
        "{message}"
    );
    assert!(
        message.contains("member cluster cluster-c could not be reached: connection refused"),
        "{message}"
    );
    // Two members, one unreachable: a majority is both, so it waits (fail closed).
    let two = order_of(&["cluster-a", "cluster-b"]);
    let answers = [
        Some(Reached::Accepted),
        Some(Reached::Unreachable("down".into())),
    ];
    assert!(matches!(next(&two, &answers, "d"), Next::Refused { .. }));
    // With no majority left to make, the refusal still waits for the member in flight, whose
    // acceptance is then withdrawn too
    let five = order_of(&["a", "b", "c", "d", "e"]);
    let mut answers = vec![
        Some(Reached::Accepted),
        Some(Reached::Unreachable("x".into())),
        Some(Reached::Unreachable("y".into())),
        Some(Reached::Unreachable("z".into())),
        None,
    ];
    assert_eq!(next(&five, &answers, "d"), Next::Wait);
    answers[4] = Some(Reached::Accepted);
    let Next::Refused { withdraw, .. } = next(&five, &answers, "d") else {
        panic!("expected a refusal");
    };
    assert_eq!(withdraw, ["a", "e"]);
}
