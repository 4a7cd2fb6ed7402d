//! The webhook's serving certificate and CA decided: given what the Secret holds, what is wanted
//! and the time, what to write next and when to look again. No I/O, so every case is a unit
//! test; the controller's `certificates` module issues, writes and injects.
//!
//! A CA rotation has three steps, each a separate write so that every reader (webhook
//! configurations, webhook pods via kubelet) catches up before the next:
//! 1. publish a new CA next to the old one (`ca.crt` and every `caBundle` trust both);
//! 2. after `ca_overlap`, issue the serving certificate from the new CA;
//! 3. after another `ca_overlap`, drop the old CA.

use std::collections::BTreeSet;
use std::net::IpAddr;

use time::{Duration, OffsetDateTime};

/// Names a serving certificate is valid for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    pub dns: BTreeSet<String>,
    pub ips: BTreeSet<IpAddr>,
}

/// `a.example, b.example, 127.0.0.1`: DNS names, then IPs, each sorted.
impl std::fmt::Display for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dns = self.dns.iter().cloned();
        let ips = self.ips.iter().map(|ip| ip.to_string());
        let all: Vec<String> = dns.chain(ips).collect();
        f.write_str(&all.join(", "))
    }
}

/// One CA found in the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaInfo {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
}

/// The serving certificate found in the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingInfo {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub names: Names,
    /// Index in [`Certificates::cas`] of the CA that signed it.
    pub signed_by: usize,
}

/// A Secret whose every part parsed and fits together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificates {
    /// Oldest first, as in `ca.crt`; never empty.
    pub cas: Vec<CaInfo>,
    pub serving: ServingInfo,
}

/// What the Secret holds, as far as the planner cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedSecret {
    Usable(Certificates),
    /// Unparseable, incomplete, or parts that do not belong together.
    Garbage {
        problem: String,
    },
}

/// What the configuration asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub names: Names,
    pub ca_lifetime: Duration,
    pub serving_lifetime: Duration,
    /// Renew when less than this fraction of a certificate's life is left.
    pub renew_before_fraction: f64,
    pub ca_overlap: Duration,
}

/// Why a new serving certificate is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueReason {
    Renewal,
    Expired,
    NamesChanged,
    SwitchToNewCa,
}

/// The one write to make now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretAction {
    /// Nothing to write.
    Keep,
    /// No Secret yet: a new CA and serving certificate.
    Create,
    /// Unusable Secret: start over with a new CA, and warn.
    Regenerate { problem: String },
    /// A new serving certificate signed by `cas[signer]`; the CAs stay.
    IssueServing { signer: usize, reason: IssueReason },
    /// Add a new CA after the existing one; the serving certificate stays.
    StartCaRotation,
    /// Keep only the newest CA: nothing in use is signed by the others any more.
    FinishCaRotation,
}

/// The decision and, when nothing is to be written, when to decide again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificatePlan {
    pub action: SecretAction,
    /// `None` after a write: the loop plans again from what it wrote.
    pub next_look: Option<OffsetDateTime>,
}

impl CertificatePlan {
    fn act(action: SecretAction) -> Self {
        Self {
            action,
            next_look: None,
        }
    }
}

/// When a certificate valid over `[not_before, not_after]` is due for renewal.
pub fn renewal_time(
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    fraction: f64,
) -> OffsetDateTime {
    not_after - (not_after - not_before) * fraction
}

/// Decides the next write. See the module documentation for the CA rotation steps.
pub fn plan_certificates(
    current: Option<&ParsedSecret>,
    wanted: &Wanted,
    now: OffsetDateTime,
) -> CertificatePlan {
    let certificates = match current {
        None => return CertificatePlan::act(SecretAction::Create),
        Some(ParsedSecret::Garbage { problem }) => {
            return CertificatePlan::act(SecretAction::Regenerate {
                problem: problem.clone(),
            });
        }
        Some(ParsedSecret::Usable(certificates)) => certificates,
    };
    let Some((newest, newest_ca)) = certificates
        .cas
        .iter()
        .enumerate()
        .max_by_key(|(_, ca)| ca.not_before)
    else {
        return CertificatePlan::act(SecretAction::Regenerate {
            problem: "the Secret holds no CA".to_owned(),
        });
    };
    if newest_ca.not_after <= now {
        return CertificatePlan::act(SecretAction::Regenerate {
            problem: format!("the CA expired at {}", newest_ca.not_after),
        });
    }
    let serving = &certificates.serving;
    let rotating = certificates.cas.len() > 1;
    let mut looks = Vec::new();

    // Step 3: the serving certificate comes from the newest CA; retire the others once the
    // webhook pods have had time to load it.
    if rotating && serving.signed_by == newest {
        let retire_at = serving.not_before + wanted.ca_overlap;
        if now >= retire_at {
            return CertificatePlan::act(SecretAction::FinishCaRotation);
        }
        looks.push(retire_at);
    }

    // Step 2: the newest CA has been published long enough to sign.
    let switch_at = newest_ca.not_before + wanted.ca_overlap;
    let signer = if serving.signed_by != newest && now < switch_at {
        serving.signed_by
    } else {
        newest
    };
    if serving.signed_by != newest {
        if now >= switch_at {
            return issue(newest, IssueReason::SwitchToNewCa);
        }
        looks.push(switch_at);
    }

    if serving.names != wanted.names {
        return issue(signer, IssueReason::NamesChanged);
    }
    if serving.not_after <= now {
        return issue(signer, IssueReason::Expired);
    }
    let serving_renewal = renewal_time(
        serving.not_before,
        serving.not_after,
        wanted.renew_before_fraction,
    );
    if now >= serving_renewal {
        return issue(signer, IssueReason::Renewal);
    }
    looks.push(serving_renewal);

    // Step 1: the only CA is due.
    if !rotating {
        let ca_renewal = renewal_time(
            newest_ca.not_before,
            newest_ca.not_after,
            wanted.renew_before_fraction,
        );
        if now >= ca_renewal {
            return CertificatePlan::act(SecretAction::StartCaRotation);
        }
        looks.push(ca_renewal);
    }

    CertificatePlan {
        action: SecretAction::Keep,
        next_look: looks.into_iter().min(),
    }
}

fn issue(signer: usize, reason: IssueReason) -> CertificatePlan {
    CertificatePlan::act(SecretAction::IssueServing { signer, reason })
}

#[cfg(test)]
mod tests;
