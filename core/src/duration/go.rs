//! Go's `time.ParseDuration` and `Duration.String()`: the min-time label is written in Go
//! syntax by users of the Go operator (`12h`, `1h30m`, `1.5h`), and messages print durations
//! the way they did (`1h0m0s`).

/// Nanoseconds, signed like Go's `time.Duration`.
pub type Nanos = i64;

/// Parses `[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+`, or `0`.
pub fn parse(text: &str) -> Result<Nanos, String> {
    let invalid = || format!("invalid duration {text:?}");
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (whole, after) = rest.split_at(digits_end);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after) => {
                let end = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                after.split_at(end)
            }
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("missing unit in duration {text:?}")),
            other => return Err(format!("unknown unit {other:?} in duration {text:?}")),
        };
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid())?
        };
        let mut value = whole.checked_mul(scale).ok_or_else(invalid)?;
        let mut place = scale;
        for digit in fraction.bytes() {
            place /= 10;
            if place == 0 {
                break;
            }
            value += u128::from(digit - b'0') * place;
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        if total > i64::MAX as u128 + u128::from(negative) {
            return Err(invalid());
        }
        rest = after;
    }
    if negative {
        Ok((total as i128).wrapping_neg() as i64)
    } else {
        Ok(total as i64)
    }
}

/// Formats like Go's `Duration.String()`: `1h0m0s`, `2m3.5s`, `1.5ms`, `0s`.
pub fn format(nanos: Nanos) -> String {
    if nanos == 0 {
        return "0s".to_owned();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let magnitude = nanos.unsigned_abs();
    if magnitude < 1_000_000_000 {
        let (unit, scale) = match magnitude {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{sign}{}{unit}", fixed(magnitude, scale));
    }
    let hours = magnitude / 3_600_000_000_000;
    let minutes = magnitude / 60_000_000_000 % 60;
    let seconds = magnitude % 60_000_000_000;
    let mut text = String::from(sign);
    if hours > 0 {
        text.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        text.push_str(&format!("{minutes}m"));
    }
    text.push_str(&format!("{}s", fixed(seconds, 1_000_000_000)));
    text
}

/// `value / scale` with the fraction's trailing zeros dropped.
fn fixed(value: u64, scale: u64) -> String {
    let whole = value / scale;
    let fraction = value % scale;
    if fraction == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn parses_go_durations() {
        let cases: &[(&str, Result<Nanos, ()>)] = &[
            ("0", Ok(0)),
            ("12h", Ok(12 * 3600 * S)),
            ("30m", Ok(30 * 60 * S)),
            ("1h30m", Ok(5400 * S)),
            ("1.5h", Ok(5400 * S)),
            ("2h45m10.5s", Ok((2 * 3600 + 45 * 60 + 10) * S + S / 2)),
            ("500ms", Ok(S / 2)),
            ("10us", Ok(10_000)),
            ("10µs", Ok(10_000)),
            ("7ns", Ok(7)),
            (".5s", Ok(S / 2)),
            ("1.s", Ok(S)),
            ("-5m", Ok(-300 * S)),
            ("+5m", Ok(300 * S)),
            ("2562047h47m16.854775807s", Ok(i64::MAX)),
            ("2562047h47m16.854775808s", Err(())),
            ("-2562047h47m16.854775808s", Ok(i64::MIN)),
            ("", Err(())),
            ("-", Err(())),
            ("5", Err(())),
            ("h", Err(())),
            (".h", Err(())),
            ("5d", Err(())),
            ("1h 30m", Err(())),
            ("12H", Err(())),
            ("99999999999999999999999h", Err(())),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text).map_err(|_| ()), *expected, "{text:?}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(Nanos, &str)] = &[
            (0, "0s"),
            (3600 * S, "1h0m0s"),
            (59 * 60 * S + 58 * S, "59m58s"),
            (S + S / 2, "1.5s"),
            (S / 2, "500ms"),
            (1_500_000, "1.5ms"),
            (1_500, "1.5µs"),
            (7, "7ns"),
            (-90 * S, "-1m30s"),
            (12 * 3600 * S, "12h0m0s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for (nanos, expected) in cases {
            assert_eq!(format(*nanos), *expected, "{nanos}");
        }
    }

    #[test]
    fn format_and_parse_round_trip() {
        for nanos in [
            1,
            999,
            1_000_001,
            S,
            61 * S + 7,
            3600 * S + 1,
            i64::MAX,
            -42 * S,
        ] {
            assert_eq!(parse(&format(nanos)), Ok(nanos));
        }
    }
}
