use time::macros::datetime;

use super::*;

const T0: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);

fn wanted() -> Wanted {
    Wanted {
        names: names(&["baton-webhook", "baton-webhook.ns"]),
        ca_lifetime: Duration::days(360),
        serving_lifetime: Duration::days(90),
        renew_before_fraction: 1.0 / 3.0,
        ca_overlap: Duration::minutes(5),
    }
}

fn names(dns: &[&str]) -> Names {
    Names {
        dns: dns.iter().map(|name| (*name).to_owned()).collect(),
        ips: BTreeSet::new(),
    }
}

fn ca(from: OffsetDateTime, days: i64) -> CaInfo {
    CaInfo {
        not_before: from,
        not_after: from + Duration::days(days),
    }
}

fn serving(from: OffsetDateTime, days: i64, signed_by: usize) -> ServingInfo {
    ServingInfo {
        not_before: from,
        not_after: from + Duration::days(days),
        names: wanted().names,
        signed_by,
    }
}

fn usable(cas: Vec<CaInfo>, serving: ServingInfo) -> ParsedSecret {
    ParsedSecret::Usable(Certificates { cas, serving })
}

fn plan(secret: &ParsedSecret, now: OffsetDateTime) -> CertificatePlan {
    plan_certificates(Some(secret), &wanted(), now)
}

#[test]
fn no_secret_creates_everything() {
    assert_eq!(
        plan_certificates(None, &wanted(), T0),
        CertificatePlan {
            action: SecretAction::Create,
            next_look: None
        }
    );
}

#[test]
fn garbage_is_regenerated_with_its_problem() {
    let garbage = ParsedSecret::Garbage {
        problem: "tls.key does not match its certificate".to_owned(),
    };
    assert_eq!(
        plan(&garbage, T0).action,
        SecretAction::Regenerate {
            problem: "tls.key does not match its certificate".to_owned()
        }
    );
}

#[test]
fn a_fresh_secret_is_kept_until_the_serving_renewal_time() {
    let secret = usable(vec![ca(T0, 360)], serving(T0, 90, 0));
    let plan = plan(&secret, T0 + Duration::days(1));
    assert_eq!(plan.action, SecretAction::Keep);
    assert_eq!(plan.next_look, Some(T0 + Duration::days(60)));
}

#[test]
fn the_serving_certificate_is_renewed_when_a_third_of_its_life_is_left() {
    let secret = usable(vec![ca(T0, 360)], serving(T0, 90, 0));
    assert_eq!(
        plan(&secret, T0 + Duration::days(60) - Duration::seconds(1)).action,
        SecretAction::Keep
    );
    assert_eq!(
        plan(&secret, T0 + Duration::days(60)).action,
        SecretAction::IssueServing {
            signer: 0,
            reason: IssueReason::Renewal
        }
    );
}

#[test]
fn an_expired_serving_certificate_is_reissued() {
    let secret = usable(vec![ca(T0, 360)], serving(T0, 90, 0));
    assert_eq!(
        plan(&secret, T0 + Duration::days(91)).action,
        SecretAction::IssueServing {
            signer: 0,
            reason: IssueReason::Expired
        }
    );
}

#[test]
fn changed_names_are_reissued_at_once() {
    let mut renamed = serving(T0, 90, 0);
    renamed.names = names(&["old-webhook", "old-webhook.ns"]);
    let secret = usable(vec![ca(T0, 360)], renamed);
    assert_eq!(
        plan(&secret, T0 + Duration::days(1)).action,
        SecretAction::IssueServing {
            signer: 0,
            reason: IssueReason::NamesChanged
        }
    );
}

#[test]
fn an_extra_ip_counts_as_a_name_change() {
    let secret = usable(vec![ca(T0, 360)], serving(T0, 90, 0));
    let mut wanted = wanted();
    wanted.names.ips.insert("127.0.0.1".parse().unwrap());
    assert!(matches!(
        plan_certificates(Some(&secret), &wanted, T0).action,
        SecretAction::IssueServing {
            reason: IssueReason::NamesChanged,
            ..
        }
    ));
}

#[test]
fn the_ca_starts_rotating_when_a_third_of_its_life_is_left() {
    // A serving certificate issued late enough not to be due itself.
    let secret = usable(vec![ca(T0, 360)], serving(T0 + Duration::days(200), 90, 0));
    let before = plan(&secret, T0 + Duration::days(239));
    assert_eq!(before.action, SecretAction::Keep);
    assert_eq!(before.next_look, Some(T0 + Duration::days(240)));
    assert_eq!(
        plan(&secret, T0 + Duration::days(240)).action,
        SecretAction::StartCaRotation
    );
}

#[test]
fn the_serving_certificate_switches_to_the_new_ca_only_after_the_overlap() {
    let new_ca_at = T0 + Duration::days(240);
    let secret = usable(
        vec![ca(T0, 360), ca(new_ca_at, 360)],
        serving(T0 + Duration::days(200), 90, 0),
    );
    let waiting = plan(&secret, new_ca_at + Duration::minutes(4));
    assert_eq!(waiting.action, SecretAction::Keep);
    assert_eq!(waiting.next_look, Some(new_ca_at + Duration::minutes(5)));
    assert_eq!(
        plan(&secret, new_ca_at + Duration::minutes(5)).action,
        SecretAction::IssueServing {
            signer: 1,
            reason: IssueReason::SwitchToNewCa
        }
    );
}

#[test]
fn a_renewal_during_the_overlap_is_still_signed_by_the_old_ca() {
    let new_ca_at = T0 + Duration::days(240);
    let mut old = serving(new_ca_at - Duration::days(1), 90, 0);
    old.names = names(&["renamed"]);
    let secret = usable(vec![ca(T0, 360), ca(new_ca_at, 360)], old);
    assert_eq!(
        plan(&secret, new_ca_at + Duration::minutes(1)).action,
        SecretAction::IssueServing {
            signer: 0,
            reason: IssueReason::NamesChanged
        }
    );
}

#[test]
fn the_old_ca_is_dropped_one_overlap_after_the_switch() {
    let switched_at = T0 + Duration::days(240) + Duration::minutes(5);
    let secret = usable(
        vec![ca(T0, 360), ca(T0 + Duration::days(240), 360)],
        serving(switched_at, 90, 1),
    );
    let waiting = plan(&secret, switched_at + Duration::minutes(4));
    assert_eq!(waiting.action, SecretAction::Keep);
    assert_eq!(waiting.next_look, Some(switched_at + Duration::minutes(5)));
    assert_eq!(
        plan(&secret, switched_at + Duration::minutes(5)).action,
        SecretAction::FinishCaRotation
    );
}

#[test]
fn an_expired_ca_starts_over() {
    let secret = usable(vec![ca(T0, 360)], serving(T0, 90, 0));
    assert!(matches!(
        plan(&secret, T0 + Duration::days(361)).action,
        SecretAction::Regenerate { .. }
    ));
}

#[test]
fn the_newest_ca_is_found_whatever_its_position() {
    let new_ca_at = T0 + Duration::days(240);
    let secret = usable(
        vec![ca(new_ca_at, 360), ca(T0, 360)],
        serving(T0 + Duration::days(200), 90, 1),
    );
    assert_eq!(
        plan(&secret, new_ca_at + Duration::minutes(5)).action,
        SecretAction::IssueServing {
            signer: 0,
            reason: IssueReason::SwitchToNewCa
        }
    );
}

/// Applies `action` the way the I/O loop does, at `now`.
fn apply(secret: Option<Certificates>, action: &SecretAction, now: OffsetDateTime) -> Certificates {
    let wanted = wanted();
    let fresh_ca = CaInfo {
        not_before: now,
        not_after: now + wanted.ca_lifetime,
    };
    let serving_from = |cas: &[CaInfo], signer: usize| ServingInfo {
        not_before: now,
        not_after: (now + wanted.serving_lifetime).min(cas[signer].not_after),
        names: wanted.names.clone(),
        signed_by: signer,
    };
    match (action, secret) {
        (SecretAction::Create | SecretAction::Regenerate { .. }, _) => {
            let cas = vec![fresh_ca];
            let serving = serving_from(&cas, 0);
            Certificates { cas, serving }
        }
        (SecretAction::IssueServing { signer, .. }, Some(mut secret)) => {
            secret.serving = serving_from(&secret.cas, *signer);
            secret
        }
        (SecretAction::StartCaRotation, Some(mut secret)) => {
            secret.cas.push(fresh_ca);
            secret
        }
        (SecretAction::FinishCaRotation, Some(mut secret)) => {
            let newest = secret.cas.len() - 1;
            secret.cas = vec![secret.cas[newest].clone()];
            secret.serving.signed_by = 0;
            secret
        }
        (action, secret) => panic!("{action:?} cannot apply to {secret:?}"),
    }
}

/// Three years of the loop, waking exactly when told: the serving certificate is never
/// expired, is always signed by a CA that every bundle has trusted for at least one overlap,
/// and every CA it used stays trusted one overlap after the switch.
#[test]
fn three_years_of_renewals_never_leave_a_gap() {
    let wanted = wanted();
    let mut now = T0;
    let mut secret: Option<Certificates> = None;
    let mut rotations = 0;
    while now < T0 + Duration::days(3 * 365) {
        let parsed = secret.clone().map(ParsedSecret::Usable);
        let plan = plan_certificates(parsed.as_ref(), &wanted, now);
        if plan.action == SecretAction::Keep {
            let next = plan
                .next_look
                .expect("a kept secret says when to look again");
            assert!(next > now, "next look {next} is in the future of {now}");
            now = next;
            continue;
        }
        assert!(
            !matches!(plan.action, SecretAction::Regenerate { .. }),
            "never regenerates on its own: {plan:?} at {now}"
        );
        let before = secret.clone();
        if plan.action == SecretAction::StartCaRotation {
            rotations += 1;
        }
        let after = apply(secret, &plan.action, now);
        if let Some(before) = &before {
            let old_signer = &before.cas[before.serving.signed_by];
            // The serving certificate in use before the write is still trusted after it,
            // unless it had been replaced at least one overlap ago.
            let still_trusted = after.cas.contains(old_signer)
                || now >= before.serving.not_before + wanted.ca_overlap;
            assert!(
                still_trusted,
                "{:?} at {now} drops a CA in use",
                plan.action
            );
            assert!(
                before.serving.not_after > now,
                "serving expired before {now}"
            );
        }
        if let Some(before) = &before {
            let old_signer = &before.cas[before.serving.signed_by];
            let new_signer = &after.cas[after.serving.signed_by];
            // A new CA signs only once it has been trusted for one overlap (it was published
            // at its notBefore).
            assert!(
                new_signer == old_signer || now >= new_signer.not_before + wanted.ca_overlap,
                "{:?} at {now} signs with a CA published at {}",
                plan.action,
                new_signer.not_before
            );
        }
        secret = Some(after);
    }
    assert!(
        rotations >= 2,
        "the CA rotated {rotations} times in three years"
    );
}
