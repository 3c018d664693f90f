//! cgroupfs: parsers of its files (pure) and live resource updates of a
//! container's cgroup (v1 controllers or the v2 unified hierarchy).

use std::path::{Path, PathBuf};

use cri_proto::v1::LinuxContainerResources;

use crate::error::Error;

const ROOT: &str = "/sys/fs/cgroup";

/// This machine's cgroup mounts, found once.
pub(crate) fn hierarchy() -> Option<&'static cgroup::Hierarchy> {
    static H: std::sync::OnceLock<Option<cgroup::Hierarchy>> = std::sync::OnceLock::new();
    H.get_or_init(|| cgroup::Hierarchy::detect().ok()).as_ref()
}

fn is_v2() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists()
}

fn write(path: PathBuf, value: String) -> Result<(), Error> {
    std::fs::write(&path, &value)
        .map_err(|e| Error::Internal(format!("write {value:?} to {}: {e}", path.display())))
}

/// Applies CRI resources to a running container's cgroup.
pub fn apply(cgroup: &str, r: &LinuxContainerResources) -> Result<(), Error> {
    let rel = cgroup.trim_start_matches('/');
    if is_v2() {
        let dir = Path::new(ROOT).join(rel);
        if r.memory_limit_in_bytes > 0 {
            write(dir.join("memory.max"), r.memory_limit_in_bytes.to_string())?;
        }
        if r.cpu_shares > 0 {
            write(
                dir.join("cpu.weight"),
                cgroup::shares_to_weight(u64::try_from(r.cpu_shares).unwrap_or(0)).to_string(),
            )?;
        }
        if r.cpu_quota != 0 || r.cpu_period > 0 {
            let quota = if r.cpu_quota > 0 {
                r.cpu_quota.to_string()
            } else {
                "max".into()
            };
            let period = if r.cpu_period > 0 {
                r.cpu_period
            } else {
                100_000
            };
            write(dir.join("cpu.max"), format!("{quota} {period}"))?;
        }
        return Ok(());
    }
    let cg = |ctrl: &str, file: &str| Path::new(ROOT).join(ctrl).join(rel).join(file);
    if r.memory_limit_in_bytes > 0 {
        write(
            cg("memory", "memory.limit_in_bytes"),
            r.memory_limit_in_bytes.to_string(),
        )?;
    }
    if r.cpu_shares > 0 {
        write(cg("cpu", "cpu.shares"), r.cpu_shares.to_string())?;
    }
    if r.cpu_period > 0 {
        write(cg("cpu", "cpu.cfs_period_us"), r.cpu_period.to_string())?;
    }
    if r.cpu_quota != 0 {
        write(cg("cpu", "cpu.cfs_quota_us"), r.cpu_quota.to_string())?;
    }
    Ok(())
}

/// The value of `key` in a flat keyed file (`key value` lines), e.g.
/// `oom_kill 1` in memory.oom_control or memory.events.
pub fn flat_key(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_counters_v1_and_v2() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        let v2 = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(flat_key(v1, "oom_kill"), Some(2));
        assert_eq!(flat_key(v2, "oom_kill"), Some(1));
        assert_eq!(flat_key(v2, "oom"), Some(1));
        assert_eq!(flat_key("", "oom_kill"), None);
    }
}
