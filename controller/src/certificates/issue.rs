//! The issuer loop: reads the Secret, asks the planner, makes the one write it says, and
//! sleeps until the Secret changes or the next renewal is due. Writes are conditioned on the
//! resourceVersion read, so two controllers that both believe they lead cannot both win.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use time::OffsetDateTime;
use tokio::sync::watch;

use super::pki::{self, Material, Pair};
use super::{CertificateMetrics, Settings, until};
use baton_core::certificates::{
    CertificatePlan, IssueReason, Names, ParsedSecret, SecretAction, Wanted, plan_certificates,
};
use baton_shared::kube_client::bounded;

use crate::error::{Error, Failures};
use crate::explain::{Explainer, Explanation, Severity};
use crate::leader::{Leadership, Term};
use crate::runner::Runner;

const SECRET_TYPE: &str = "kubernetes.io/tls";
/// Longest sleep between looks, whatever the planner says.
const MAX_SLEEP: Duration = Duration::from_secs(600);
/// Wait after a failed API call before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// What one round did.
enum Round {
    /// Nothing to write; look again at this time.
    Kept(Option<OffsetDateTime>),
    /// Wrote, lost a race, or is not the leader: look again soon.
    Again,
    NotLeader,
}

pub(super) async fn run(
    secrets: Api<Secret>,
    settings: &Settings,
    mut secret_changed: watch::Receiver<Option<Secret>>,
    leadership: &Leadership,
    explainer: &Explainer,
    metrics: &CertificateMetrics,
    failures: &Failures,
) {
    let config = &settings.config;
    let service_namespace = if config.service_namespace.is_empty() {
        &settings.system_namespace
    } else {
        &config.service_namespace
    };
    let wanted = Wanted {
        names: pki::wanted_names(
            &config.service_name,
            service_namespace,
            &settings.cluster_domain,
            &config.extra_dns_names,
            &config.extra_ips,
        ),
        ca_lifetime: lifetime(config.ca_lifetime.get()),
        serving_lifetime: lifetime(config.serving_lifetime.get()),
        renew_before_fraction: config.renew_before_fraction,
        ca_overlap: lifetime(config.ca_overlap.get()),
    };
    let name = config.secret_name.as_str();
    // Every new term starts a round at once (the first, and each one after an outage).
    let mut last_term: Option<Term> = None;
    let mut elector_running = true;
    let mut sleep = Duration::ZERO;
    loop {
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            changed = secret_changed.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            acquired = leadership.acquired_after(last_term), if elector_running => match acquired {
                Ok(term) => last_term = Some(term),
                Err(_) => elector_running = false,
            },
        }
        let round = round(
            &secrets,
            name,
            &wanted,
            settings.request_timeout,
            leadership,
            explainer,
            metrics,
        );
        sleep = match round.await {
            Ok(Round::Kept(next)) => until(next, MAX_SLEEP),
            Ok(Round::Again) => Duration::ZERO,
            Ok(Round::NotLeader) => MAX_SLEEP,
            // The one place a round's failure is counted.
            Err(error) => {
                failures.count(&error);
                tracing::warn!(error = %error, "certificate round failed; retrying");
                RETRY_AFTER
            }
        };
    }
}

/// One look at the Secret: read it, record its expiry, ask the planner, and make the one write
/// it says, within the term this round started in.
async fn round(
    secrets: &Api<Secret>,
    name: &str,
    wanted: &Wanted,
    request_timeout: Duration,
    leadership: &Leadership,
    explainer: &Explainer,
    metrics: &CertificateMetrics,
) -> Result<Round, Error> {
    let Some(runner) = Runner::in_current_term(leadership, request_timeout) else {
        return Ok(Round::NotLeader);
    };
    // Read from the API server, not the watch: the write must be conditioned on the latest.
    let existing = bounded(
        request_timeout,
        "reading the certificate Secret",
        secrets.get_opt(name),
    )
    .await?
    .map_err(|source| Error::ReadCertificateSecret {
        name: name.to_owned(),
        source,
    })?;
    let (parsed, material) = match &existing {
        Some(secret) => {
            let (parsed, material) = pki::parse(&secret_data(secret));
            (Some(parsed), material)
        }
        None => (None, None),
    };
    record_expiry(metrics, parsed.as_ref());
    let now = OffsetDateTime::now_utc();
    let CertificatePlan { action, next_look } = plan_certificates(parsed.as_ref(), wanted, now);
    if action == SecretAction::Keep {
        tracing::debug!(secret = name, ?next_look, "certificate current");
        return Ok(Round::Kept(next_look));
    }
    // The pki functions do not know the Secret they issue for: it is named here.
    let next = issue(&action, material, parsed.as_ref(), wanted, now).map_err(|source| {
        Error::IssueCertificate {
            name: name.to_owned(),
            source: Box::new(source),
        }
    })?;
    // The term may have ended while issuing (a later term of this replica does not count: it
    // reads again).
    let written = runner
        .step(
            "writing the certificate Secret",
            write(secrets, name, existing.as_ref(), next.to_data()),
        )
        .await;
    let Ok(written) = written else {
        return Ok(Round::NotLeader);
    };
    let written = match written? {
        Ok(secret) => secret,
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::info!(
                secret = name,
                "the Secret changed meanwhile; reading it again"
            );
            return Ok(Round::Again);
        }
        Err(source) => {
            return Err(Error::WriteCertificateSecret {
                name: name.to_owned(),
                source,
            });
        }
    };
    let label = action_label(&action);
    metrics.secret_writes.with_label_values(&[label]).inc();
    tracing::info!(
        secret = name,
        action = label,
        ?action,
        "certificate Secret written"
    );
    if let Some(explanation) = explain_write(name, &action, parsed.as_ref(), wanted) {
        let object = secret_reference(existing.as_ref().unwrap_or(&written));
        explainer.tell(&object, explanation).await;
    }
    Ok(Round::Again)
}

/// The Secret's data, key by key.
fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| (key, value.0))
        .collect()
}

/// The expiry gauges, from a usable Secret (the serving certificate's, and the newest CA's).
fn record_expiry(metrics: &CertificateMetrics, parsed: Option<&ParsedSecret>) {
    let Some(ParsedSecret::Usable(certificates)) = parsed else {
        return;
    };
    metrics
        .expiry
        .with_label_values(&["serving"])
        .set(certificates.serving.not_after.unix_timestamp() as f64);
    if let Some(newest) = certificates.cas.iter().map(|ca| ca.not_after).max() {
        metrics
            .expiry
            .with_label_values(&["ca"])
            .set(newest.unix_timestamp() as f64);
    }
}

/// The material `action` asks for, from what the Secret holds: all of it new, a serving
/// certificate reissued by one of the CAs kept, a CA added or the old ones dropped.
fn issue(
    action: &SecretAction,
    material: Option<Material>,
    parsed: Option<&ParsedSecret>,
    wanted: &Wanted,
    now: OffsetDateTime,
) -> Result<Material, Error> {
    let fresh = || -> Result<Material, Error> {
        let ca = pki::new_ca(now, wanted.ca_lifetime)?;
        let serving = pki::new_serving(
            &ca,
            now + wanted.ca_lifetime,
            &wanted.names,
            now,
            wanted.serving_lifetime,
        )?;
        Ok(Material {
            cas: vec![ca],
            serving,
        })
    };
    match (action, material, parsed) {
        (SecretAction::Create | SecretAction::Regenerate { .. }, _, _) => fresh(),
        (
            SecretAction::IssueServing { signer, .. },
            Some(mut material),
            Some(ParsedSecret::Usable(certificates)),
        ) => {
            material.serving = serving_from(
                &material.cas[*signer],
                certificates.cas[*signer].not_after,
                &wanted.names,
                now,
                wanted.serving_lifetime,
            )?;
            Ok(material)
        }
        (SecretAction::StartCaRotation, Some(mut material), _) => {
            material.cas.push(pki::new_ca(now, wanted.ca_lifetime)?);
            Ok(material)
        }
        (
            SecretAction::FinishCaRotation,
            Some(mut material),
            Some(ParsedSecret::Usable(certificates)),
        ) => {
            let newest = certificates.serving.signed_by;
            material.cas = vec![material.cas.swap_remove(newest)];
            Ok(material)
        }
        // A usable parse always comes with its material.
        _ => fresh(),
    }
}

/// The Event a write deserves: starting over (a warning: someone's Secret was unusable) and a
/// reissue for new names (the answer to "why did the certificate change?" after a Service
/// rename). Routine renewals and CA rotation steps are only logged and counted.
fn explain_write(
    name: &str,
    action: &SecretAction,
    parsed: Option<&ParsedSecret>,
    wanted: &Wanted,
) -> Option<Explanation> {
    match (action, parsed) {
        (SecretAction::Regenerate { problem }, _) => Some(Explanation {
            severity: Severity::Warning,
            reason: "CertificateRegenerated".to_owned(),
            action: "RegenerateCertificate".to_owned(),
            note: format!(
                "Secret {name} held an unusable certificate ({problem}); issued a new CA and serving certificate"
            ),
        }),
        (
            SecretAction::IssueServing {
                reason: IssueReason::NamesChanged,
                ..
            },
            Some(ParsedSecret::Usable(certificates)),
        ) => Some(Explanation {
            severity: Severity::Normal,
            reason: "CertificateReissued".to_owned(),
            action: "IssueCertificate".to_owned(),
            note: format!(
                "Secret {name}: the serving certificate named {}; reissued it for {}, signed by the same CA",
                certificates.serving.names, wanted.names
            ),
        }),
        _ => None,
    }
}

fn serving_from(
    ca: &Pair,
    ca_not_after: OffsetDateTime,
    names: &Names,
    now: OffsetDateTime,
    lifetime: time::Duration,
) -> Result<Pair, Error> {
    pki::new_serving(ca, ca_not_after, names, now, lifetime)
}

/// Creates the Secret, or replaces it conditioned on the resourceVersion read. A Secret of
/// another type (the type is immutable) is deleted, conditioned likewise, and created again.
async fn write(
    secrets: &Api<Secret>,
    name: &str,
    existing: Option<&Secret>,
    data: BTreeMap<String, Vec<u8>>,
) -> Result<Secret, kube::Error> {
    let data = Some(
        data.into_iter()
            .map(|(key, value)| (key, ByteString(value)))
            .collect(),
    );
    match existing {
        Some(existing) if existing.type_.as_deref() == Some(SECRET_TYPE) => {
            let mut secret = existing.clone();
            secret.data = data;
            secret.string_data = None;
            secrets.replace(name, &PostParams::default(), &secret).await
        }
        Some(existing) => {
            tracing::warn!(secret = name, r#type = ?existing.type_, "replacing a Secret of the wrong type");
            let preconditions = Preconditions {
                resource_version: existing.resource_version(),
                uid: existing.uid(),
            };
            secrets
                .delete(name, &DeleteParams::default().preconditions(preconditions))
                .await?;
            create(secrets, name, data).await
        }
        None => create(secrets, name, data).await,
    }
}

async fn create(
    secrets: &Api<Secret>,
    name: &str,
    data: Option<BTreeMap<String, ByteString>>,
) -> Result<Secret, kube::Error> {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "baton".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data,
        ..Secret::default()
    };
    secrets.create(&PostParams::default(), &secret).await
}

fn secret_reference(secret: &Secret) -> ObjectReference {
    let mut reference = secret.object_ref(&());
    reference.resource_version = None;
    reference
}

fn action_label(action: &SecretAction) -> &'static str {
    match action {
        SecretAction::Keep => "keep",
        SecretAction::Create => "create",
        SecretAction::Regenerate { .. } => "regenerate",
        SecretAction::IssueServing { .. } => "issue_serving",
        SecretAction::StartCaRotation => "start_ca_rotation",
        SecretAction::FinishCaRotation => "finish_ca_rotation",
    }
}

fn lifetime(duration: Duration) -> time::Duration {
    time::Duration::try_from(duration).unwrap_or(time::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use baton_core::certificates::{CaInfo, Certificates, ServingInfo};

    const T0: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);

    fn names(dns: &[&str], ips: &[&str]) -> Names {
        Names {
            dns: dns.iter().map(|name| (*name).to_owned()).collect(),
            ips: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        }
    }

    fn wanted(names: Names) -> Wanted {
        Wanted {
            names,
            ca_lifetime: time::Duration::days(360),
            serving_lifetime: time::Duration::days(90),
            renew_before_fraction: 1.0 / 3.0,
            ca_overlap: time::Duration::minutes(5),
        }
    }

    fn issued_for(names: Names) -> ParsedSecret {
        ParsedSecret::Usable(Certificates {
            cas: vec![CaInfo {
                not_before: T0,
                not_after: T0 + time::Duration::days(360),
            }],
            serving: ServingInfo {
                not_before: T0,
                not_after: T0 + time::Duration::days(90),
                names,
                signed_by: 0,
            },
        })
    }

    #[test]
    fn a_reissue_for_new_names_says_which_names_it_had_and_has() {
        let old = names(&["baton-webhook", "baton-webhook.ns"], &["127.0.0.1"]);
        let new = names(&["guard", "guard.ns"], &["127.0.0.1"]);
        let action = SecretAction::IssueServing {
            signer: 0,
            reason: IssueReason::NamesChanged,
        };
        let explanation =
            explain_write("tls", &action, Some(&issued_for(old)), &wanted(new)).unwrap();
        assert_eq!(explanation.severity, Severity::Normal);
        assert_eq!(explanation.reason, "CertificateReissued");
        assert_eq!(
            explanation.note,
            "Secret tls: the serving certificate named baton-webhook, baton-webhook.ns, 127.0.0.1; \
             reissued it for guard, guard.ns, 127.0.0.1, signed by the same CA"
        );
    }

    #[test]
    fn regenerating_an_unusable_secret_is_a_warning_naming_the_problem() {
        let action = SecretAction::Regenerate {
            problem: "tls.crt is not PEM".to_owned(),
        };
        let explanation = explain_write("tls", &action, None, &wanted(names(&["a"], &[]))).unwrap();
        assert_eq!(explanation.severity, Severity::Warning);
        assert_eq!(explanation.reason, "CertificateRegenerated");
        assert!(
            explanation.note.contains("tls.crt is not PEM"),
            "{}",
            explanation.note
        );
    }

    #[test]
    fn routine_writes_are_not_events() {
        let current = issued_for(names(&["a"], &[]));
        let wanted = wanted(names(&["a"], &[]));
        for action in [
            SecretAction::Create,
            SecretAction::StartCaRotation,
            SecretAction::FinishCaRotation,
            SecretAction::IssueServing {
                signer: 0,
                reason: IssueReason::Renewal,
            },
            SecretAction::IssueServing {
                signer: 0,
                reason: IssueReason::SwitchToNewCa,
            },
        ] {
            assert_eq!(
                explain_write("tls", &action, Some(&current), &wanted),
                None,
                "{action:?}"
            );
        }
    }
}
