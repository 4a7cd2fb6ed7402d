//! The shapes of Kubernetes names, for values a namespace user writes that baton puts where only
//! a name belongs (an annotation naming an object, a StatefulSet's `spec.serviceName` in a pod's
//! DNS name). API servers before 1.33 do not validate `serviceName`, and annotations are never
//! validated: checked here, a value cannot add a host, a path or a query to what baton builds.

/// A DNS-1123 label: lowercase letters, digits and '-', at most 63, starting and ending with a
/// letter or digit (a Service's or a namespace's name).
pub fn is_dns_label(raw: &str) -> bool {
    raw.len() <= 63 && is_dns_subdomain(raw) && !raw.contains('.')
}

/// A DNS-1123 subdomain: labels joined by '.', at most 253 (most objects' names).
pub fn is_dns_subdomain(raw: &str) -> bool {
    !raw.is_empty()
        && raw.len() <= 253
        && raw.bytes().all(|byte| {
            byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-' || byte == b'.'
        })
        && raw.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.starts_with(|c: char| c.is_ascii_alphanumeric())
                && label.ends_with(|c: char| c.is_ascii_alphanumeric())
        })
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters
/// (letters, digits, `-`, `_`, `.`, starting and ending with a letter or digit).
pub fn is_label_key(raw: &str) -> bool {
    let (prefix, name) = match raw.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, raw),
    };
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && prefix.is_none_or(is_dns_subdomain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains_take_what_kubernetes_takes() {
        for good in ["ingester", "ingester-zone-a", "a", "0a9"] {
            assert!(is_dns_label(good), "{good}");
            assert!(is_dns_subdomain(good), "{good}");
        }
        assert!(is_dns_subdomain("ingester.mimir"));
        assert!(!is_dns_label("ingester.mimir"));
        for bad in [
            "",
            "-a",
            "a-",
            "Ingester",
            "evil.example/#",
            "a b",
            "a?x=1",
            "a@b",
            "a..b",
            ".a",
            &"a".repeat(64),
        ] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(!is_dns_subdomain("a/b"));
    }
}
