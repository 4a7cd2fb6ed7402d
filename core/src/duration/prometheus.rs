//! Prometheus' duration syntax (`model.ParseDuration`): the delayed-downscale annotation is
//! written in it by users of the Go operator (`1h`, `2d`, `1w`), and messages print durations
//! back the same way (`1h30m`).

use std::time::Duration;

/// Prometheus' `model.ParseDuration`: `0`, or units in the order y w d h m s ms, each at most
/// once, with integer amounts (`1h30m`, `2d`, `1w`). A year is 365 days. No sign is accepted.
pub fn parse(text: &str) -> Result<Duration, String> {
    const UNITS: [(&str, u64); 7] = [
        ("y", 365 * 24 * 3600 * 1000),
        ("w", 7 * 24 * 3600 * 1000),
        ("d", 24 * 3600 * 1000),
        ("h", 3600 * 1000),
        ("m", 60 * 1000),
        ("s", 1000),
        ("ms", 1),
    ];
    let invalid = || format!("not a valid duration string: {text:?}");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(invalid());
    }
    let mut rest = text;
    let mut next_unit = 0;
    let mut millis: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid());
        }
        let amount: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        let after = &rest[digits..];
        let unit_len = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let unit = &after[..unit_len];
        let position = UNITS[next_unit..]
            .iter()
            .position(|(name, _)| *name == unit)
            .ok_or_else(invalid)?;
        let scale = UNITS[next_unit + position].1;
        next_unit += position + 1;
        millis = amount
            .checked_mul(scale)
            .and_then(|value| millis.checked_add(value))
            .ok_or_else(invalid)?;
        rest = &after[unit_len..];
    }
    Ok(Duration::from_millis(millis))
}

/// Prints `duration` as the annotation would be written: largest units first, milliseconds
/// last (`0s`, `90s` as `1m30s`, `1h30m`, `2d1s`, `720ms`); [`parse`] reads it back (to the
/// millisecond, the syntax's resolution).
pub fn format(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    let mut seconds = millis / 1000;
    let mut text = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if seconds >= size {
            text.push_str(&format!("{}{unit}", seconds / size));
            seconds %= size;
        }
    }
    if !millis.is_multiple_of(1000) {
        text.push_str(&format!("{}ms", millis % 1000));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prometheus_durations() {
        let cases = [
            ("0", 0),
            ("1h", 3_600_000),
            ("2d", 172_800_000),
            ("1w", 604_800_000),
            ("1y", 31_536_000_000),
            ("1h30m", 5_400_000),
            ("5s", 5_000),
            ("100ms", 100),
            ("1m1s1ms", 61_001),
            ("0s", 0),
        ];
        for (raw, millis) in cases {
            assert_eq!(parse(raw), Ok(Duration::from_millis(millis)), "{raw:?}");
        }
    }

    #[test]
    fn rejects_what_prometheus_rejects() {
        for raw in [
            "", "-1h", "+1h", "1", "1.5h", "h", "1m1h", "1h1h", "1 h", "1H", "1us", "1h ", "abc",
        ] {
            assert!(parse(raw).is_err(), "{raw:?}");
        }
    }

    #[test]
    fn formats_as_the_annotation_is_written_and_parses_back() {
        for (seconds, text) in [
            (0, "0s"),
            (5, "5s"),
            (3600, "1h"),
            (5400, "1h30m"),
            (2 * 86_400 + 1, "2d1s"),
        ] {
            assert_eq!(format(Duration::from_secs(seconds)), text);
            assert_eq!(parse(text), Ok(Duration::from_secs(seconds)));
        }
        // Milliseconds are the syntax's resolution: kept (a 720ms delay printed as "0s" before).
        for (millis, text) in [(720, "720ms"), (61_001, "1m1s1ms"), (86_400_500, "1d500ms")] {
            assert_eq!(format(Duration::from_millis(millis)), text);
            assert_eq!(parse(text), Ok(Duration::from_millis(millis)));
        }
    }
}
