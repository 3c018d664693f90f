//! Device rules on cgroup v2 (see `cgroup::devices`): the spec's
//! `linux.resources.devices`, then the runtime's defaults — the same list
//! `cgroup::container` writes to `devices.allow`/`devices.deny` on v1 —
//! folded and attached as an eBPF program to the container's cgroup. The
//! monitor does this between the create and the start, so the container's
//! process never runs without it.

use std::path::{Path, PathBuf};

use cgroup::devices::{self, Kind, Policy, Rule};
use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType, Spec};

use super::ChildError;

/// One OCI rule; `Ok(None)` for a rule with no cgroup meaning (type `p`).
pub(crate) fn rule(i: usize, d: &LinuxDeviceCgroup) -> Result<Option<Rule>, ChildError> {
    let field = |f: &str| format!("linux.resources.devices[{i}].{f}");
    let kind = match d.typ().unwrap_or_default() {
        LinuxDeviceType::A => None,
        LinuxDeviceType::B => Some(Kind::Block),
        LinuxDeviceType::C | LinuxDeviceType::U => Some(Kind::Char),
        LinuxDeviceType::P => return Ok(None),
    };
    let number = |v: Option<i64>, f: &str| match v {
        None => Ok(None),
        Some(n) if n < 0 => Ok(None),
        Some(n) => u32::try_from(n)
            .map(Some)
            .map_err(|_| ChildError::invalid(field(f), format!("{n} is out of range"))),
    };
    Ok(Some(Rule {
        allow: d.allow(),
        kind,
        major: number(d.major(), "major")?,
        minor: number(d.minor(), "minor")?,
        access: d.access().as_deref().unwrap_or("").parse().map_err(
            |e: devices::AccessError| ChildError::invalid(field("access"), e.to_string()),
        )?,
    }))
}

/// The policy for `spec`: its rules, then the runtime's defaults.
pub fn policy(spec: &Spec) -> Result<Policy, ChildError> {
    let mut rules = Vec::new();
    let listed = spec
        .linux()
        .as_ref()
        .and_then(|l| l.resources().as_ref())
        .and_then(|r| r.devices().as_ref());
    for (i, d) in listed.into_iter().flatten().enumerate() {
        rules.extend(rule(i, d)?);
    }
    rules.extend(devices::runtime_defaults());
    Ok(Policy::from_rules(&rules))
}

/// The container cgroup's directory when this machine is cgroup v2.
///
/// Asked once per container by its monitor, a fresh process: one statfs of
/// `/sys/fs/cgroup` (cgroup2 there is what [`cgroup::Hierarchy::V2`] means), not
/// the whole mount table, which grows by four mounts per pod (at 100 pods
/// on this VM's v1 host the monitors' reads of it were 2 % of the cold
/// start's CPU).
pub fn v2_dir(cgroup: &str) -> Option<PathBuf> {
    let root = Path::new(V2_ROOT);
    let fs = nix::sys::statfs::statfs(root).ok()?;
    (fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
        .then(|| root.join(cgroup.trim_start_matches('/')))
}

const V2_ROOT: &str = "/sys/fs/cgroup";

/// Attaches the spec's device program to `dir` (a v2 cgroup directory).
pub fn restrict(spec: &Spec, dir: &Path) -> Result<(), ChildError> {
    let policy = policy(spec)?;
    devices::attach(dir, &policy).map_err(ChildError::io("attach the device rules to", dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cgroup::devices::Access;

    fn spec(devices: serde_json::Value) -> Spec {
        serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs"},
            "linux": {"resources": {"devices": devices}}
        }))
        .expect("spec")
    }

    #[test]
    fn spec_rules_then_runtime_defaults() {
        let p = policy(&spec(serde_json::json!([
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
            {"allow": true, "type": "b", "major": 8, "minor": -1, "access": "r"},
            {"allow": true, "type": "p", "access": "rwm"}
        ])))
        .expect("policy");
        assert!(!p.default_allow);
        assert!(
            p.allows(Kind::Block, 8, 16, Access::READ),
            "minor -1 is a wildcard"
        );
        assert!(!p.allows(Kind::Block, 8, 16, Access::WRITE));
        assert!(
            p.allows(Kind::Char, 136, 0, Access::WRITE),
            "a runtime default"
        );
        assert!(!p.allows(Kind::Char, 1, 1, Access::READ));
        // Privileged: allow all.
        let p =
            policy(&spec(serde_json::json!([{"allow": true, "access": "rwm"}]))).expect("policy");
        assert!(p.default_allow && p.exceptions.is_empty());
    }

    #[test]
    fn bad_rules_name_the_field() {
        let e = policy(&spec(serde_json::json!([
            {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwx"}
        ])))
        .expect_err("a bad rule")
        .to_string();
        assert!(e.starts_with("linux.resources.devices[0].access"), "{e}");
        let e = policy(&spec(serde_json::json!([
            {"allow": true, "type": "c", "major": 5_000_000_000i64, "access": "r"}
        ])))
        .expect_err("a bad rule")
        .to_string();
        assert!(
            e.contains("devices[0].major: 5000000000 is out of range"),
            "{e}"
        );
    }
}
