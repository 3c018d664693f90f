//! Kubernetes resource quantities (`100Mi`, `1.5G`, `500m`, `1e3`) and
//! kubelet durations (`1m30s`, `300ms`), parsed as the API server and Go's
//! `time.ParseDuration` do. Pure.

use std::time::Duration;

/// Parses a quantity to its value in base units, rounded up to an integer
/// (`100Mi` → 104857600, `0.5` → 1). Milli values (`500m`) round up too.
pub fn parse_quantity(s: &str) -> Option<u128> {
    parse_scaled(s, 1)
}

/// Parses a quantity to thousandths of its base unit, rounded up: CPU
/// millicores (`100m` → 100, `1.5` → 1500, `2` → 2000).
pub fn parse_quantity_milli(s: &str) -> Option<u128> {
    parse_scaled(s, 1000)
}

fn parse_scaled(s: &str, factor: u128) -> Option<u128> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    if split == 0 {
        return None;
    }
    let (num, suffix) = s.split_at(split);
    let (mantissa, mult_num, mult_den): (&str, u128, u128) = match suffix {
        "" => (num, 1, 1),
        "m" => (num, 1, 1000),
        "k" => (num, 1000, 1),
        "M" => (num, 1000u128.pow(2), 1),
        "G" => (num, 1000u128.pow(3), 1),
        "T" => (num, 1000u128.pow(4), 1),
        "P" => (num, 1000u128.pow(5), 1),
        "E" => (num, 1000u128.pow(6), 1),
        "Ki" => (num, 1 << 10, 1),
        "Mi" => (num, 1 << 20, 1),
        "Gi" => (num, 1 << 30, 1),
        "Ti" => (num, 1 << 40, 1),
        "Pi" => (num, 1 << 50, 1),
        "Ei" => (num, 1 << 60, 1),
        e if e.starts_with(['e', 'E']) => {
            let exp: u32 = e[1..].parse().ok()?;
            (num, 10u128.checked_pow(exp)?, 1)
        }
        _ => return None,
    };
    if mantissa.starts_with('-') {
        return None;
    }
    let mantissa = mantissa.trim_start_matches('+');
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let scale = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let digits: u128 =
        format!("{int}{frac}")
            .parse()
            .ok()
            .or(if int.is_empty() && frac.is_empty() {
                Some(0)
            } else {
                None
            })?;
    let num = digits.checked_mul(mult_num)?.checked_mul(factor)?;
    let den = scale.checked_mul(mult_den)?;
    Some(num.div_ceil(den))
}

/// A threshold: an absolute quantity or a percentage of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    Quantity(u128),
    Percent(f64),
}

impl Threshold {
    /// The threshold in units of `capacity` (a percentage is of it).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn of(&self, capacity: u64) -> u64 {
        match *self {
            Threshold::Quantity(q) => u64::try_from(q).unwrap_or(u64::MAX),
            Threshold::Percent(p) => {
                // Clamped to 0..=10_000 basis points first: the cast cannot truncate.
                let bp = (p * 100.0).clamp(0.0, 10_000.0).round() as u128;
                u64::try_from(u128::from(capacity) * bp / 10_000).unwrap_or(u64::MAX)
            }
        }
    }
}

/// Parses `100Mi` or `10%`.
pub fn parse_threshold(s: &str) -> Option<Threshold> {
    match s.trim().strip_suffix('%') {
        Some(p) => p
            .parse::<f64>()
            .ok()
            .filter(|v| (0.0..=100.0).contains(v))
            .map(Threshold::Percent),
        None => parse_quantity(s).map(Threshold::Quantity),
    }
}

/// Parses a Go duration: `300ms`, `1.5h`, `1m30s`, `0`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * unit;
        rest = &rest[u..];
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milli_quantities() {
        assert_eq!(parse_quantity_milli("100m"), Some(100));
        assert_eq!(parse_quantity_milli("1.5"), Some(1500));
        assert_eq!(parse_quantity_milli("2"), Some(2000));
        assert_eq!(parse_quantity_milli("0.0001"), Some(1));
        assert_eq!(parse_quantity_milli("x"), None);
    }

    #[test]
    fn quantities() {
        for (s, want) in [
            ("100Mi", Some(100u128 << 20)),
            ("1Gi", Some(1 << 30)),
            ("1.5G", Some(1_500_000_000)),
            ("500m", Some(1)),
            ("2", Some(2)),
            ("1e3", Some(1000)),
            ("0.5Ki", Some(512)),
            ("100Zi", None),
            ("-1", None),
            ("Mi", None),
            ("", None),
            ("1..2", None),
        ] {
            assert_eq!(parse_quantity(s), want, "{s:?}");
        }
    }

    #[test]
    fn thresholds() {
        assert_eq!(parse_threshold("10%"), Some(Threshold::Percent(10.0)));
        assert_eq!(
            parse_threshold("100Mi"),
            Some(Threshold::Quantity(100 << 20))
        );
        assert_eq!(parse_threshold("120%"), None);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("20s"), Some(Duration::from_secs(20)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        for bad in ["", "10", "5x", "m", "1m-2s"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
