//! The eviction settings of the config file (kubelet's `evictionHard`,
//! `evictionSoft`, `evictionSoftGracePeriod`, `evictionMinimumReclaim`),
//! checked as kubelet's `ParseThresholdConfig` checks them.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::quantity::{Threshold, parse_duration, parse_threshold};

/// Eviction signals kubelet knows.
pub const EVICTION_SIGNALS: [&str; 7] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
    "allocatableMemory.available",
];

/// kubelet's `evictionHard` default on Linux.
pub const DEFAULT_HARD: [(&str, &str); 4] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
];

/// The thresholds and grace periods, validated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Eviction {
    pub hard: BTreeMap<String, Threshold>,
    pub soft: BTreeMap<String, Threshold>,
    pub soft_grace: BTreeMap<String, Duration>,
    pub minimum_reclaim: BTreeMap<String, Threshold>,
}

/// The raw maps of the file: hard (None: kubelet's default), soft, soft
/// grace periods, minimum reclaims.
pub struct Raw<'a> {
    pub hard: Option<&'a BTreeMap<String, String>>,
    pub soft: Option<&'a BTreeMap<String, String>>,
    pub soft_grace: Option<&'a BTreeMap<String, String>>,
    pub minimum_reclaim: Option<&'a BTreeMap<String, String>>,
}

/// Validates the eviction maps; an error is (field, message).
pub fn parse(raw: &Raw<'_>) -> Result<Eviction, (String, String)> {
    let default_hard: BTreeMap<String, String> = DEFAULT_HARD
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let hard = thresholds("evictionHard", raw.hard.unwrap_or(&default_hard))?;
    let empty = BTreeMap::new();
    let soft = thresholds("evictionSoft", raw.soft.unwrap_or(&empty))?;
    let minimum_reclaim = thresholds(
        "evictionMinimumReclaim",
        raw.minimum_reclaim.unwrap_or(&empty),
    )?;
    let mut soft_grace = BTreeMap::new();
    for (signal, v) in raw.soft_grace.unwrap_or(&empty) {
        let field = format!("evictionSoftGracePeriod.{signal}");
        known(&field, signal)?;
        let d = parse_duration(v).ok_or_else(|| {
            (
                field.clone(),
                format!("{v:?} is not a duration (e.g. \"1m30s\")"),
            )
        })?;
        if !soft.contains_key(signal) {
            return Err((field, "no evictionSoft threshold for this signal".into()));
        }
        soft_grace.insert(signal.clone(), d);
    }
    if let Some(s) = soft.keys().find(|s| !soft_grace.contains_key(*s)) {
        return Err((
            format!("evictionSoft.{s}"),
            format!("a soft threshold needs evictionSoftGracePeriod.{s}"),
        ));
    }
    Ok(Eviction {
        hard,
        soft,
        soft_grace,
        minimum_reclaim,
    })
}

fn known(field: &str, signal: &str) -> Result<(), (String, String)> {
    if EVICTION_SIGNALS.contains(&signal) {
        Ok(())
    } else {
        Err((
            field.to_string(),
            format!(
                "unknown eviction signal (known: {})",
                EVICTION_SIGNALS.join(", ")
            ),
        ))
    }
}

fn thresholds(
    name: &str,
    map: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Threshold>, (String, String)> {
    let mut out = BTreeMap::new();
    for (signal, value) in map {
        let field = format!("{name}.{signal}");
        known(&field, signal)?;
        let t = parse_threshold(value)
            .ok_or_else(|| (field, format!("{value:?} is not a quantity or percentage")))?;
        out.insert(signal.clone(), t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn soft_thresholds_need_grace_periods_and_the_other_way_round() {
        let soft = map(&[("memory.available", "300Mi")]);
        let grace = map(&[("memory.available", "30s")]);
        let ok = parse(&Raw {
            hard: None,
            soft: Some(&soft),
            soft_grace: Some(&grace),
            minimum_reclaim: None,
        })
        .expect("valid");
        assert_eq!(ok.hard.len(), 4, "kubelet's default hard thresholds");
        assert_eq!(ok.soft_grace["memory.available"], Duration::from_secs(30));
        let e = parse(&Raw {
            hard: None,
            soft: Some(&soft),
            soft_grace: None,
            minimum_reclaim: None,
        })
        .expect_err("no grace");
        assert_eq!(e.0, "evictionSoft.memory.available");
        let e = parse(&Raw {
            hard: None,
            soft: None,
            soft_grace: Some(&grace),
            minimum_reclaim: None,
        })
        .expect_err("grace alone");
        assert_eq!(e.0, "evictionSoftGracePeriod.memory.available");
        let bad = map(&[("memory.free", "1Gi")]);
        let e = parse(&Raw {
            hard: None,
            soft: None,
            soft_grace: None,
            minimum_reclaim: Some(&bad),
        })
        .expect_err("unknown signal");
        assert_eq!(e.0, "evictionMinimumReclaim.memory.free");
        assert!(e.1.contains("unknown eviction signal"), "{}", e.1);
    }
}
