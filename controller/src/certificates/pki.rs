//! Reading and writing the certificate Secret's contents: parsing PEM into what the planner
//! needs (lifetimes, names, who signed what) and issuing new certificates with rcgen.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PublicKeyData,
};
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use baton_core::certificates::{CaInfo, Certificates, Names, ParsedSecret, ServingInfo};

use crate::error::Error;

/// Keys of the Secret. `tls.crt`, `tls.key` and `ca.crt` are what `kubernetes.io/tls` and
/// cert-manager use; `ca.key` holds the CA keys, in the order of the certificates in `ca.crt`.
pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";

/// The PEM texts of one certificate and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Everything the Secret holds, as PEM: the CAs oldest first, and the serving pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    pub cas: Vec<Pair>,
    pub serving: Pair,
}

impl Material {
    /// The Secret's data.
    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        let join = |pick: fn(&Pair) -> &str| {
            self.cas
                .iter()
                .map(pick)
                .collect::<Vec<_>>()
                .concat()
                .into_bytes()
        };
        BTreeMap::from([
            (
                TLS_CRT.to_owned(),
                self.serving.cert_pem.clone().into_bytes(),
            ),
            (
                TLS_KEY.to_owned(),
                self.serving.key_pem.clone().into_bytes(),
            ),
            (CA_CRT.to_owned(), join(|pair| &pair.cert_pem)),
            (CA_KEY.to_owned(), join(|pair| &pair.key_pem)),
        ])
    }
}

/// Parses the Secret's data. Anything unusable is `Garbage` with the reason, never an error:
/// the answer to garbage is to regenerate.
pub fn parse(data: &BTreeMap<String, Vec<u8>>) -> (ParsedSecret, Option<Material>) {
    match parse_usable(data) {
        Ok((certificates, material)) => (ParsedSecret::Usable(certificates), Some(material)),
        Err(problem) => (ParsedSecret::Garbage { problem }, None),
    }
}

fn parse_usable(data: &BTreeMap<String, Vec<u8>>) -> Result<(Certificates, Material), String> {
    let field = |key: &str| {
        data.get(key)
            .ok_or_else(|| format!("{key} is missing"))
            .map(Vec::as_slice)
    };
    let ca_certs = pem_blocks(field(CA_CRT)?, CA_CRT, "CERTIFICATE")?;
    let ca_keys = pem_blocks(field(CA_KEY)?, CA_KEY, "PRIVATE KEY")?;
    if ca_certs.is_empty() || ca_certs.len() != ca_keys.len() {
        return Err(format!(
            "{CA_CRT} holds {} certificates but {CA_KEY} {} keys",
            ca_certs.len(),
            ca_keys.len()
        ));
    }
    let serving_certs = pem_blocks(field(TLS_CRT)?, TLS_CRT, "CERTIFICATE")?;
    let serving_keys = pem_blocks(field(TLS_KEY)?, TLS_KEY, "PRIVATE KEY")?;
    let ([serving_cert], [serving_key]) = (serving_certs.as_slice(), serving_keys.as_slice())
    else {
        return Err(format!(
            "{TLS_CRT} and {TLS_KEY} must hold one certificate and one key"
        ));
    };

    let mut cas = Vec::new();
    let mut ca_pairs = Vec::new();
    let mut parsed_cas = Vec::new();
    for (index, (cert, key)) in ca_certs.iter().zip(&ca_keys).enumerate() {
        let x509 = parse_x509(
            &cert.contents,
            &format!("CA certificate {index} in {CA_CRT}"),
        )?;
        matching_key(&x509, &key.contents, &format!("key {index} in {CA_KEY}"))?;
        cas.push(CaInfo {
            not_before: x509.validity().not_before.to_datetime(),
            not_after: x509.validity().not_after.to_datetime(),
        });
        ca_pairs.push(Pair {
            cert_pem: to_pem("CERTIFICATE", &cert.contents),
            key_pem: to_pem("PRIVATE KEY", &key.contents),
        });
        parsed_cas.push(x509);
    }
    let serving = parse_x509(&serving_cert.contents, TLS_CRT)?;
    matching_key(&serving, &serving_key.contents, TLS_KEY)?;
    let signed_by = parsed_cas
        .iter()
        .position(|ca| serving.verify_signature(Some(ca.public_key())).is_ok())
        .ok_or_else(|| format!("{TLS_CRT} is not signed by any CA in {CA_CRT}"))?;
    let certificates = Certificates {
        cas,
        serving: ServingInfo {
            not_before: serving.validity().not_before.to_datetime(),
            not_after: serving.validity().not_after.to_datetime(),
            names: names_of(&serving)?,
            signed_by,
        },
    };
    let material = Material {
        cas: ca_pairs,
        serving: Pair {
            cert_pem: to_pem("CERTIFICATE", &serving_cert.contents),
            key_pem: to_pem("PRIVATE KEY", &serving_key.contents),
        },
    };
    Ok((certificates, material))
}

fn pem_blocks(bytes: &[u8], key: &str, label: &str) -> Result<Vec<Pem>, String> {
    let blocks = Pem::iter_from_buffer(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("{key} is not PEM: {error}"))?;
    if blocks.is_empty() {
        return Err(format!("{key} holds no PEM block"));
    }
    if let Some(other) = blocks.iter().find(|block| block.label != label) {
        return Err(format!(
            "{key} holds a {} where a {label} was expected",
            other.label
        ));
    }
    Ok(blocks)
}

fn parse_x509<'a>(der: &'a [u8], what: &str) -> Result<X509Certificate<'a>, String> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, certificate)| certificate)
        .map_err(|error| format!("{what} is not an X.509 certificate: {error}"))
}

fn matching_key(
    certificate: &X509Certificate<'_>,
    key_der: &[u8],
    what: &str,
) -> Result<(), String> {
    let key = KeyPair::try_from(key_der)
        .map_err(|error| format!("{what} is not a usable private key: {error}"))?;
    if key.subject_public_key_info() != certificate.public_key().raw {
        return Err(format!("{what} does not match its certificate"));
    }
    Ok(())
}

fn names_of(certificate: &X509Certificate<'_>) -> Result<Names, String> {
    let mut names = Names::default();
    let extension = certificate
        .subject_alternative_name()
        .map_err(|error| format!("{TLS_CRT} has a bad subjectAltName: {error}"))?;
    for name in extension.iter().flat_map(|san| &san.value.general_names) {
        match name {
            GeneralName::DNSName(dns) => {
                names.dns.insert((*dns).to_owned());
            }
            GeneralName::IPAddress(bytes) => {
                let ip = match bytes.len() {
                    4 => <[u8; 4]>::try_from(*bytes).map(IpAddr::from).ok(),
                    16 => <[u8; 16]>::try_from(*bytes).map(IpAddr::from).ok(),
                    _ => None,
                };
                names.ips.extend(ip);
            }
            _ => {}
        }
    }
    Ok(names)
}

fn to_pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = encoded
        .as_bytes()
        .chunks(64)
        .map(|line| std::str::from_utf8(line).unwrap_or_default())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

/// A new self-signed CA valid from `now` for `lifetime`.
pub fn new_ca(now: OffsetDateTime, lifetime: time::Duration) -> Result<Pair, Error> {
    let rcgen = |source| Error::GenerateCertificate { what: "CA", source };
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(rcgen)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rcgen)?;
    // A distinct name per CA, so the old and the new one are told apart during a rotation.
    params.distinguished_name.push(
        DnType::CommonName,
        format!("baton webhook CA {}", now.unix_timestamp()),
    );
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now;
    params.not_after = now + lifetime;
    let cert = params.self_signed(&key).map_err(rcgen)?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A new serving certificate for `names`, signed by `ca`, valid from `now` for `lifetime` but
/// never beyond `ca_not_after` (a certificate outliving its CA would fail verification early).
pub fn new_serving(
    ca: &Pair,
    ca_not_after: OffsetDateTime,
    names: &Names,
    now: OffsetDateTime,
    lifetime: time::Duration,
) -> Result<Pair, Error> {
    let rcgen = |source| Error::GenerateCertificate {
        what: "serving certificate",
        source,
    };
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(rcgen)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).map_err(rcgen)?;
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(rcgen)?;
    // rcgen turns the names that parse as IP addresses into IP SANs.
    let sans: Vec<String> = names
        .dns
        .iter()
        .cloned()
        .chain(names.ips.iter().map(IpAddr::to_string))
        .collect();
    let mut params = CertificateParams::new(sans).map_err(rcgen)?;
    let common_name = names
        .dns
        .iter()
        .next()
        .cloned()
        .unwrap_or_else(|| "baton-webhook".into());
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now;
    params.not_after = (now + lifetime).min(ca_not_after);
    let cert = params.signed_by(&key, &issuer).map_err(rcgen)?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The names wanted on the serving certificate.
pub fn wanted_names(
    service: &str,
    namespace: &str,
    cluster_domain: &str,
    extra_dns: &[String],
    extra_ips: &[IpAddr],
) -> Names {
    let mut dns: BTreeSet<String> = [
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.{cluster_domain}"),
    ]
    .into();
    dns.extend(extra_dns.iter().cloned());
    Names {
        dns,
        ips: extra_ips.iter().copied().collect(),
    }
}
