//! Value types whose parse errors carry the rejected text, so an error can name it.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A span of time written as `30s`, `5m`, `1h30m` or `250ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    pub const fn from_secs(secs: u64) -> Self {
        Self(std::time::Duration::from_secs(secs))
    }
    pub const fn from_millis(millis: u64) -> Self {
        Self(std::time::Duration::from_millis(millis))
    }
    pub const fn is_zero(&self) -> bool {
        self.0.is_zero()
    }
    pub const fn get(&self) -> std::time::Duration {
        self.0
    }
}

impl From<Duration> for std::time::Duration {
    fn from(value: Duration) -> Self {
        value.0
    }
}

/// Printed as one amount of one unit, as a person would write it: humantime's own word when it
/// needs only one (`1year`), else the largest unit that divides it exactly (`90d`, `90m`,
/// `1500ms`); either parses back to the same value. humantime alone splits by its calendar
/// units: 90 days would print as `2months 29days 2h 52m 48s`.
impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u128); 7] = [
            ("d", 86_400_000_000_000),
            ("h", 3_600_000_000_000),
            ("m", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
            ("us", 1_000),
            ("ns", 1),
        ];
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        let human = humantime::format_duration(self.0).to_string();
        if !human.contains(' ') {
            return f.write_str(&human);
        }
        let (unit, size) = UNITS
            .iter()
            .find(|(_, size)| nanos.is_multiple_of(*size))
            .expect("every duration is a whole number of nanoseconds");
        write!(f, "{}{unit}", nanos / size)
    }
}

impl FromStr for Duration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim();
        if trimmed == "0" {
            return Ok(Self(std::time::Duration::ZERO));
        }
        // humantime: the syntax people write (`30s`, `1h30m`, `90d`, `250ms`).
        humantime::parse_duration(trimmed)
            .map(Self)
            .map_err(|err| format!("{err}"))
    }
}

/// An address to listen on, `host:port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenAddress(pub SocketAddr);

impl ListenAddress {
    pub const fn all_interfaces(port: u16) -> Self {
        Self(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for ListenAddress {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim()
            .parse::<SocketAddr>()
            .map(Self)
            .map_err(|err| err.to_string())
    }
}

/// A size in bytes, written as a number of bytes or with a unit: `512KiB`, `3MiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (unit, size) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        let number: u64 = digits.parse().map_err(|_| {
            "expected a number of bytes, optionally with KiB, MiB or GiB".to_owned()
        })?;
        let multiplier = match unit.trim() {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            other => return Err(format!("unknown unit {other:?}; use B, KiB, MiB or GiB")),
        };
        number
            .checked_mul(multiplier)
            .map(Self)
            .ok_or_else(|| "too large".to_owned())
    }
}

/// An address the leader may call, as a URL prefix: `http` or `https`, a host, optionally a port
/// and a path; no user, query or fragment. A URL falls under it when scheme, host and port
/// (the scheme's default when absent) are the same and its path is the prefix's path or below
/// it (segment by segment: `/hooks` covers `/hooks/a`, not `/hooksmith`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination(url::Url);

impl Destination {
    /// The prefix, parsed.
    pub fn url(&self) -> &url::Url {
        &self.0
    }

    /// Whether `url` falls under this prefix.
    pub fn covers(&self, url: &url::Url) -> bool {
        let prefix = &self.0;
        let segments = |url: &url::Url| -> Vec<String> {
            url.path_segments()
                .map(|segments| {
                    segments
                        .filter(|segment| !segment.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let (prefix_path, path) = (segments(prefix), segments(url));
        prefix.scheme() == url.scheme()
            && prefix.host() == url.host()
            && prefix.port_or_known_default() == url.port_or_known_default()
            && path.starts_with(&prefix_path)
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl FromStr for Destination {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let url = url::Url::parse(s.trim()).map_err(|err| err.to_string())?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "the scheme {:?} is not http or https",
                url.scheme()
            ));
        }
        if url.host().is_none() {
            return Err("it has no host".to_owned());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("it names a user; credentials do not belong in an address".to_owned());
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(
                "it has a query or fragment; a prefix is scheme, host, port and path".to_owned(),
            );
        }
        Ok(Self(url))
    }
}

/// Serializes as the display string and deserializes from a string (or, for numbers written
/// without quotes in YAML or an environment variable, from their text), keeping the rejected
/// text in the error.
macro_rules! string_value {
    ($type:ty, $expecting:literal, $example:literal) => {
        impl Serialize for $type {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $type {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct TextVisitor;
                impl Visitor<'_> for TextVisitor {
                    type Value = $type;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                        text.parse().map_err(|reason| {
                            E::custom(format!(
                                "{text:?} is not {}: {reason}; e.g. {}",
                                $expecting, $example
                            ))
                        })
                    }
                    fn visit_u64<E: de::Error>(self, number: u64) -> Result<Self::Value, E> {
                        self.visit_str(&number.to_string())
                    }
                    fn visit_i64<E: de::Error>(self, number: i64) -> Result<Self::Value, E> {
                        self.visit_str(&number.to_string())
                    }
                }
                deserializer.deserialize_any(TextVisitor)
            }
        }

        impl JsonSchema for $type {
            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($type))
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({ "type": "string", "description": $expecting })
            }
            fn inline_schema() -> bool {
                true
            }
        }
    };
}

string_value!(Duration, "a duration", "\"30s\", \"5m\", \"1h30m\"");
string_value!(
    ListenAddress,
    "a listen address",
    "\"0.0.0.0:8443\" or \"[::]:8443\""
);
string_value!(ByteSize, "a size in bytes", "\"3MiB\"");
string_value!(
    Destination,
    "an http(s) URL prefix",
    "\"https://prometheus.monitoring.svc:9090\""
);

const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// Accepts what `tracing_subscriber::filter::Targets` accepts (baton's log filter):
/// `level`, `target` or `target=level`, separated by commas.
pub(crate) fn is_log_filter(filter: &str) -> bool {
    let is_level = |s: &str| LEVELS.contains(&s.to_ascii_lowercase().as_str());
    let is_target = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '-')
    };
    !filter.trim().is_empty()
        && filter
            .split(',')
            .all(|directive| match directive.trim().split_once('=') {
                Some((target, level)) => is_target(target) && is_level(level),
                None => is_level(directive.trim()) || is_target(directive.trim()),
            })
}

/// A list, written as a sequence (`[a, b]` in YAML or an environment variable) or as one string
/// of comma-separated items (`a,b`: the form people write in an environment variable, where a
/// plain `BATON_GATES__PROMETHEUS_ADDRESSES=http://…` is one item). Each item keeps its own
/// parser and its error.
pub(crate) fn list<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: de::DeserializeOwned,
{
    struct ListVisitor<T>(std::marker::PhantomData<T>);
    impl<'de, T: de::DeserializeOwned> Visitor<'de> for ListVisitor<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list: [a, b], or a,b")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(item) = seq.next_element()? {
                items.push(item);
            }
            Ok(items)
        }
        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            use de::IntoDeserializer;
            text.split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| T::deserialize(item.into_deserializer()))
                .collect()
        }
    }
    deserializer.deserialize_any(ListVisitor(std::marker::PhantomData))
}
