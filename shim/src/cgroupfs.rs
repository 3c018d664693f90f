//! cgroupfs: parsers of its files (pure) and live resource updates of a
//! container's cgroup (v1 controllers or the v2 unified hierarchy).

use std::path::{Path, PathBuf};

use cri_proto::v1::LinuxContainerResources;

use crate::error::Error;

const ROOT: &str = "/sys/fs/cgroup";

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
                shares_to_weight(r.cpu_shares as u64).to_string(),
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

/// cpu.shares (2..262144) → cpu.weight (1..10000), as runc converts.
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + ((shares.clamp(2, 262_144) - 2) * 9999) / 262_142
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

    #[test]
    fn weights_like_runc() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
    }
}

/// A point-in-time sample of a container cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Total CPU time, nanoseconds.
    pub cpu_ns: u64,
    pub memory_usage: u64,
    /// usage − inactive_file, as cAdvisor and kubelet compute it.
    pub working_set: u64,
    pub rss: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// Memory limit, if any (for available bytes).
    pub memory_limit: Option<u64>,
}

fn read(path: PathBuf) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Builds a sample from cgroup v1 files (pure; the texts are the files).
pub fn sample_v1(cpuacct_usage: &str, mem_usage: &str, mem_limit: &str, mem_stat: &str) -> Sample {
    let usage: u64 = mem_usage.trim().parse().unwrap_or(0);
    let inactive = flat_key(mem_stat, "total_inactive_file").unwrap_or(0);
    let limit: u64 = mem_limit.trim().parse().unwrap_or(u64::MAX);
    Sample {
        cpu_ns: cpuacct_usage.trim().parse().unwrap_or(0),
        memory_usage: usage,
        working_set: usage.saturating_sub(inactive),
        rss: flat_key(mem_stat, "total_rss").unwrap_or(0),
        page_faults: flat_key(mem_stat, "total_pgfault").unwrap_or(0),
        major_page_faults: flat_key(mem_stat, "total_pgmajfault").unwrap_or(0),
        // v1 reports "no limit" as a huge page-aligned number.
        memory_limit: (limit < (1u64 << 62)).then_some(limit),
    }
}

/// Builds a sample from cgroup v2 files (pure).
pub fn sample_v2(cpu_stat: &str, mem_current: &str, mem_max: &str, mem_stat: &str) -> Sample {
    let usage: u64 = mem_current.trim().parse().unwrap_or(0);
    let inactive = flat_key(mem_stat, "inactive_file").unwrap_or(0);
    Sample {
        cpu_ns: flat_key(cpu_stat, "usage_usec").unwrap_or(0) * 1000,
        memory_usage: usage,
        working_set: usage.saturating_sub(inactive),
        rss: flat_key(mem_stat, "anon").unwrap_or(0),
        page_faults: flat_key(mem_stat, "pgfault").unwrap_or(0),
        major_page_faults: flat_key(mem_stat, "pgmajfault").unwrap_or(0),
        memory_limit: mem_max.trim().parse().ok(),
    }
}

/// Reads a container cgroup; `None` when it does not exist (any more).
pub fn sample(cgroup: &str) -> Option<Sample> {
    let rel = cgroup.trim_start_matches('/');
    if is_v2() {
        let d = Path::new(ROOT).join(rel);
        return Some(sample_v2(
            &read(d.join("cpu.stat"))?,
            &read(d.join("memory.current"))?,
            &read(d.join("memory.max")).unwrap_or_default(),
            &read(d.join("memory.stat")).unwrap_or_default(),
        ));
    }
    let cg = |ctrl: &str, file: &str| Path::new(ROOT).join(ctrl).join(rel).join(file);
    Some(sample_v1(
        &read(cg("cpuacct", "cpuacct.usage"))?,
        &read(cg("memory", "memory.usage_in_bytes"))?,
        &read(cg("memory", "memory.limit_in_bytes")).unwrap_or_default(),
        &read(cg("memory", "memory.stat")).unwrap_or_default(),
    ))
}

#[cfg(test)]
mod sample_tests {
    use super::*;

    #[test]
    fn v1_working_set_subtracts_inactive_file() {
        let stat = "cache 4096\nrss 8192\ntotal_rss 8192\ntotal_inactive_file 4096\ntotal_pgfault 10\ntotal_pgmajfault 1\n";
        let s = sample_v1("123456789\n", "20480\n", "9223372036854771712\n", stat);
        assert_eq!(s.cpu_ns, 123_456_789);
        assert_eq!((s.memory_usage, s.working_set, s.rss), (20480, 16384, 8192));
        assert_eq!((s.page_faults, s.major_page_faults), (10, 1));
        assert_eq!(s.memory_limit, None);
        assert_eq!(
            sample_v1("1", "1", "67108864", "").memory_limit,
            Some(64 << 20)
        );
    }

    #[test]
    fn v2_reads_usage_usec_and_anon() {
        let cpu = "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n";
        let stat = "anon 8192\nfile 4096\ninactive_file 1024\npgfault 7\npgmajfault 0\n";
        let s = sample_v2(cpu, "16384\n", "max\n", stat);
        assert_eq!(s.cpu_ns, 2_500_000);
        assert_eq!((s.memory_usage, s.working_set, s.rss), (16384, 15360, 8192));
        assert_eq!(s.memory_limit, None);
    }
}
