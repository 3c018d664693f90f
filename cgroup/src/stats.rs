//! Resource usage of one cgroup, read as cAdvisor reads it, for v1 and v2.
//! Each file has a pure parser (unit-tested on real kernel text); the
//! reader only opens files. Missing files (a controller not mounted, an
//! older kernel) leave their fields at zero / `None` rather than failing:
//! stats are best effort, as in cAdvisor.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::Hierarchy;

/// Clock ticks per second of `cpuacct.stat` (USER_HZ is 100 on Linux).
const USER_HZ: u64 = 100;

/// CPU usage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cpu {
    /// Total CPU time consumed, ns.
    pub usage_ns: u64,
    pub user_ns: u64,
    pub system_ns: u64,
    /// Per CPU usage, ns (v1 only: `cpuacct.usage_percpu`).
    pub per_cpu_ns: Vec<u64>,
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_ns: u64,
    /// The cgroup's CPU settings, as cAdvisor's `spec`: shares (v2's weight
    /// converted back), CFS quota (`None`: unlimited) and period, µs.
    pub spec: CpuSpec,
}

/// CPU settings of a cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuSpec {
    pub shares: u64,
    pub quota: Option<u64>,
    pub period: u64,
}

/// v1 `cpu.shares`, `cpu.cfs_quota_us` (-1: none), `cpu.cfs_period_us`.
pub fn cpu_spec_v1(shares: &str, quota: &str, period: &str) -> CpuSpec {
    CpuSpec {
        shares: num(shares),
        quota: quota
            .trim()
            .parse::<i64>()
            .ok()
            .and_then(|q| u64::try_from(q).ok())
            .filter(|q| *q > 0),
        period: num(period),
    }
}

/// v2 `cpu.weight` (→ shares, the inverse of runc's conversion) and
/// `cpu.max` (`max 100000` or `50000 100000`).
pub fn cpu_spec_v2(weight: &str, max: &str) -> CpuSpec {
    let w = num(weight);
    let mut f = max.split_whitespace();
    let quota = f.next().and_then(|q| q.parse().ok());
    let period = f.next().map(num).unwrap_or(0);
    CpuSpec {
        shares: if w == 0 {
            0
        } else {
            2 + (w - 1) * 262_142 / 9_999
        },
        quota,
        period,
    }
}

/// Memory usage, with cAdvisor's field meanings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    pub usage: u64,
    /// usage − inactive_file (never below 0): what the OOM killer sees.
    pub working_set: u64,
    /// v1 `total_rss`, v2 `anon`.
    pub rss: u64,
    /// v1 `total_cache`, v2 `file`.
    pub cache: u64,
    /// v1 `total_mapped_file`, v2 `file_mapped`.
    pub mapped_file: u64,
    pub swap: u64,
    /// v1 `max_usage_in_bytes`, v2 `memory.peak` (kernels ≥ 5.19).
    pub max_usage: u64,
    /// v1 `failcnt`, v2 `memory.events` `max`.
    pub failcnt: u64,
    pub pgfault: u64,
    pub pgmajfault: u64,
    /// OOM kills in this cgroup (v1 `memory.oom_control` `oom_kill`,
    /// kernels ≥ 4.13; v2 `memory.events` `oom_kill`).
    pub oom_kill: u64,
    /// `None`: unlimited.
    pub limit: Option<u64>,
    pub active_file: u64,
    pub inactive_file: u64,
    /// Kernel memory (v2 `kernel`; v1 `memory.kmem.usage_in_bytes` is not
    /// read: 0).
    pub kernel: u64,
    /// v2 `memory.events` `high` (0 on v1).
    pub events_high: u64,
}

/// Process counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pids {
    pub current: u64,
    /// `None`: unlimited.
    pub limit: Option<u64>,
}

/// Block I/O per device (`major:minor`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Io {
    pub devices: BTreeMap<(u32, u32), DeviceIo>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceIo {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub reads: u64,
    pub writes: u64,
}

/// Pressure stall totals of one resource (µs): `some` — at least one task
/// waited; `full` — no task could run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Psi {
    pub some_us: u64,
    pub full_us: u64,
}

/// PSI of a cgroup (v2 `cpu.pressure`, `memory.pressure`, `io.pressure`);
/// `None` where the kernel has no such file (cgroup v1, no CONFIG_PSI).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    pub cpu: Option<Psi>,
    pub memory: Option<Psi>,
    pub io: Option<Psi>,
}

/// Parses a `*.pressure` file: `some avg10=… total=N` and (mostly) a `full`
/// line. `None` for an empty or unreadable file.
pub fn psi(text: &str) -> Option<Psi> {
    let mut out = None;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let kind = words.next()?;
        let total = words
            .find_map(|w| w.strip_prefix("total="))
            .and_then(|v| v.parse::<u64>().ok())?;
        let p: &mut Psi = out.get_or_insert_with(Psi::default);
        match kind {
            "some" => p.some_us = total,
            "full" => p.full_us = total,
            _ => {}
        }
    }
    out
}

/// Everything for one cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub cpu: Cpu,
    pub memory: Memory,
    pub pids: Pids,
    pub io: Io,
    pub pressure: Pressure,
}

fn num(s: &str) -> u64 {
    s.trim().parse().unwrap_or(0)
}

/// `max` or a number (v2 limits, v1 `pids.max`).
fn limit(s: &str) -> Option<u64> {
    let t = s.trim();
    if t == "max" || t.is_empty() {
        None
    } else {
        t.parse().ok()
    }
}

/// `key value` lines (memory.stat, cpu.stat, cpuacct.stat, memory.events,
/// memory.oom_control).
pub fn parse_flat_keyed(text: &str) -> BTreeMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k, v.trim().parse().ok()?))
        })
        .collect()
}

/// v1 memory limit: the kernel's "unlimited" is a page-rounded i64::MAX.
fn v1_limit(s: &str) -> Option<u64> {
    let v: u64 = s.trim().parse().ok()?;
    (v < (1 << 62)).then_some(v)
}

fn working_set(usage: u64, inactive_file: u64) -> u64 {
    usage.saturating_sub(inactive_file)
}

/// v1 memory from its files' text (missing files as "").
pub fn memory_v1(
    usage: &str,
    max_usage: &str,
    failcnt: &str,
    limit: &str,
    stat: &str,
    memsw_usage: &str,
    oom_control: &str,
) -> Memory {
    let st = parse_flat_keyed(stat);
    let get = |k: &str| st.get(k).copied().unwrap_or(0);
    // Hierarchical totals when present (they include child cgroups).
    let pick = |k: &str| {
        st.get(format!("total_{k}").as_str())
            .copied()
            .unwrap_or_else(|| get(k))
    };
    let usage = num(usage);
    let memsw = num(memsw_usage);
    Memory {
        usage,
        working_set: working_set(usage, pick("inactive_file")),
        rss: pick("rss"),
        cache: pick("cache"),
        mapped_file: pick("mapped_file"),
        swap: memsw.saturating_sub(usage),
        max_usage: num(max_usage),
        failcnt: num(failcnt),
        pgfault: pick("pgfault"),
        pgmajfault: pick("pgmajfault"),
        oom_kill: parse_flat_keyed(oom_control)
            .get("oom_kill")
            .copied()
            .unwrap_or(0),
        limit: v1_limit(limit),
        active_file: pick("active_file"),
        inactive_file: pick("inactive_file"),
        kernel: 0,
        events_high: 0,
    }
}

/// v2 memory from its files' text (missing files as "").
pub fn memory_v2(
    current: &str,
    peak: &str,
    max: &str,
    stat: &str,
    swap: &str,
    events: &str,
) -> Memory {
    let st = parse_flat_keyed(stat);
    let get = |k: &str| st.get(k).copied().unwrap_or(0);
    let ev = parse_flat_keyed(events);
    let usage = num(current);
    Memory {
        usage,
        working_set: working_set(usage, get("inactive_file")),
        rss: get("anon"),
        cache: get("file"),
        mapped_file: get("file_mapped"),
        swap: num(swap),
        max_usage: num(peak),
        failcnt: ev.get("max").copied().unwrap_or(0),
        pgfault: get("pgfault"),
        pgmajfault: get("pgmajfault"),
        oom_kill: ev.get("oom_kill").copied().unwrap_or(0),
        limit: limit(max),
        active_file: get("active_file"),
        inactive_file: get("inactive_file"),
        kernel: get("kernel"),
        events_high: ev.get("high").copied().unwrap_or(0),
    }
}

/// v1 CPU: `cpuacct.usage`, `cpuacct.stat` (USER_HZ ticks),
/// `cpuacct.usage_percpu`, `cpu.stat`.
pub fn cpu_v1(usage: &str, stat: &str, percpu: &str, cpu_stat: &str) -> Cpu {
    let st = parse_flat_keyed(stat);
    let cs = parse_flat_keyed(cpu_stat);
    let tick_ns = 1_000_000_000 / USER_HZ;
    Cpu {
        usage_ns: num(usage),
        user_ns: st.get("user").copied().unwrap_or(0) * tick_ns,
        system_ns: st.get("system").copied().unwrap_or(0) * tick_ns,
        per_cpu_ns: percpu.split_whitespace().map(num).collect(),
        periods: cs.get("nr_periods").copied().unwrap_or(0),
        throttled_periods: cs.get("nr_throttled").copied().unwrap_or(0),
        throttled_ns: cs.get("throttled_time").copied().unwrap_or(0),
        spec: CpuSpec::default(),
    }
}

/// v2 CPU: `cpu.stat` in microseconds.
pub fn cpu_v2(cpu_stat: &str) -> Cpu {
    let cs = parse_flat_keyed(cpu_stat);
    let us = |k: &str| cs.get(k).copied().unwrap_or(0) * 1000;
    Cpu {
        usage_ns: us("usage_usec"),
        user_ns: us("user_usec"),
        system_ns: us("system_usec"),
        per_cpu_ns: Vec::new(),
        periods: cs.get("nr_periods").copied().unwrap_or(0),
        throttled_periods: cs.get("nr_throttled").copied().unwrap_or(0),
        throttled_ns: us("throttled_usec"),
        spec: CpuSpec::default(),
    }
}

fn dev(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// v1 `blkio.throttle.io_service_bytes` + `blkio.throttle.io_serviced`
/// (`8:0 Read 4096` lines; the `Total` lines are ignored).
pub fn io_v1(service_bytes: &str, serviced: &str) -> Io {
    let mut io = Io::default();
    for (text, bytes) in [(service_bytes, true), (serviced, false)] {
        for l in text.lines() {
            let mut f = l.split_whitespace();
            let (Some(d), Some(op), Some(v)) = (f.next().and_then(dev), f.next(), f.next()) else {
                continue;
            };
            let v = num(v);
            let e = io.devices.entry(d).or_default();
            match (op, bytes) {
                ("Read", true) => e.read_bytes += v,
                ("Write", true) => e.write_bytes += v,
                ("Read", false) => e.reads += v,
                ("Write", false) => e.writes += v,
                _ => {}
            }
        }
    }
    io
}

/// v2 `io.stat`: `8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0`.
pub fn io_v2(stat: &str) -> Io {
    let mut io = Io::default();
    for l in stat.lines() {
        let mut f = l.split_whitespace();
        let Some(d) = f.next().and_then(dev) else {
            continue;
        };
        let e = io.devices.entry(d).or_default();
        for kv in f {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let v = num(v);
            match k {
                "rbytes" => e.read_bytes = v,
                "wbytes" => e.write_bytes = v,
                "rios" => e.reads = v,
                "wios" => e.writes = v,
                _ => {}
            }
        }
    }
    io
}

fn read(dir: &Path, file: &str) -> String {
    fs::read_to_string(dir.join(file)).unwrap_or_default()
}

impl Hierarchy {
    /// The processes directly in cgroup `path` (not in its children).
    pub fn procs(&self, path: &str) -> Vec<u32> {
        let rel = path.trim_start_matches('/');
        let dir = match self {
            Hierarchy::V2(root) => Some(root.join(rel)),
            Hierarchy::V1(mounts) => mounts
                .iter()
                .find(|(c, _)| c == "pids" || c == "memory")
                .map(|(_, m)| m.join(rel)),
        };
        dir.map(|d| {
            read(&d, "cgroup.procs")
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
    }

    /// The stats of cgroup `path` (relative to the hierarchy, e.g.
    /// `/kubepods/pod<uid>/<id>`). `None` when the cgroup does not exist.
    pub fn stats(&self, path: &str) -> Option<Stats> {
        let rel = path.trim_start_matches('/');
        match self {
            Hierarchy::V2(root) => {
                let d = root.join(rel);
                if !d.is_dir() {
                    return None;
                }
                Some(Stats {
                    cpu: Cpu {
                        spec: cpu_spec_v2(&read(&d, "cpu.weight"), &read(&d, "cpu.max")),
                        ..cpu_v2(&read(&d, "cpu.stat"))
                    },
                    memory: memory_v2(
                        &read(&d, "memory.current"),
                        &read(&d, "memory.peak"),
                        &read(&d, "memory.max"),
                        &read(&d, "memory.stat"),
                        &read(&d, "memory.swap.current"),
                        &read(&d, "memory.events"),
                    ),
                    pids: Pids {
                        current: num(&read(&d, "pids.current")),
                        limit: limit(&read(&d, "pids.max")),
                    },
                    io: io_v2(&read(&d, "io.stat")),
                    pressure: Pressure {
                        cpu: psi(&read(&d, "cpu.pressure")),
                        memory: psi(&read(&d, "memory.pressure")),
                        io: psi(&read(&d, "io.pressure")),
                    },
                })
            }
            Hierarchy::V1(mounts) => {
                let dir = |ctrl: &str| {
                    mounts
                        .iter()
                        .find(|(c, _)| c == ctrl)
                        .map(|(_, m)| m.join(rel))
                };
                let mem = dir("memory")?;
                if !mem.is_dir() {
                    return None;
                }
                let cpuacct = dir("cpuacct").unwrap_or_default();
                let cpu = dir("cpu").unwrap_or_default();
                let pids = dir("pids").unwrap_or_default();
                let blkio = dir("blkio").unwrap_or_default();
                Some(Stats {
                    cpu: Cpu {
                        spec: cpu_spec_v1(
                            &read(&cpu, "cpu.shares"),
                            &read(&cpu, "cpu.cfs_quota_us"),
                            &read(&cpu, "cpu.cfs_period_us"),
                        ),
                        ..cpu_v1(
                            &read(&cpuacct, "cpuacct.usage"),
                            &read(&cpuacct, "cpuacct.stat"),
                            &read(&cpuacct, "cpuacct.usage_percpu"),
                            &read(&cpu, "cpu.stat"),
                        )
                    },
                    memory: memory_v1(
                        &read(&mem, "memory.usage_in_bytes"),
                        &read(&mem, "memory.max_usage_in_bytes"),
                        &read(&mem, "memory.failcnt"),
                        &read(&mem, "memory.limit_in_bytes"),
                        &read(&mem, "memory.stat"),
                        &read(&mem, "memory.memsw.usage_in_bytes"),
                        &read(&mem, "memory.oom_control"),
                    ),
                    pids: Pids {
                        current: num(&read(&pids, "pids.current")),
                        limit: limit(&read(&pids, "pids.max")),
                    },
                    io: io_v1(
                        &read(&blkio, "blkio.throttle.io_service_bytes"),
                        &read(&blkio, "blkio.throttle.io_serviced"),
                    ),
                    pressure: Pressure::default(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_files() {
        // Recorded from Linux 6.18 (cgroup v2 cpu.pressure, io.pressure).
        let cpu = "some avg10=0.00 avg60=0.12 avg300=0.05 total=1234567\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=89012\n";
        assert_eq!(
            psi(cpu),
            Some(Psi {
                some_us: 1_234_567,
                full_us: 89_012
            })
        );
        // Older kernels' system-wide cpu file has no full line.
        assert_eq!(
            psi("some avg10=1.00 avg60=0.50 avg300=0.10 total=42\n"),
            Some(Psi {
                some_us: 42,
                full_us: 0
            })
        );
        assert_eq!(psi(""), None);
        assert_eq!(psi("some avg10=x\n"), None);
    }

    // Recorded from Linux 6.1 (cgroup v1, a busybox container).
    const V1_MEMORY_STAT: &str = "cache 1216512\nrss 413696\nrss_huge 0\nshmem 0\nmapped_file 0\n\
dirty 0\nwriteback 0\npgpgin 1175\npgpgout 777\npgfault 1650\npgmajfault 0\n\
inactive_anon 409600\nactive_anon 0\ninactive_file 1216512\nactive_file 0\nunevictable 0\n\
hierarchical_memory_limit 16777216\ntotal_cache 1216512\ntotal_rss 413696\ntotal_rss_huge 0\n\
total_shmem 0\ntotal_mapped_file 0\ntotal_dirty 0\ntotal_writeback 0\ntotal_pgpgin 1175\n\
total_pgpgout 777\ntotal_pgfault 1650\ntotal_pgmajfault 0\ntotal_inactive_anon 409600\n\
total_active_anon 0\ntotal_inactive_file 1216512\ntotal_active_file 0\ntotal_unevictable 0\n";
    const V1_OOM_CONTROL: &str = "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n";

    // Recorded from Linux 6.1 (cgroup v2).
    const V2_MEMORY_STAT: &str = "anon 4096000\nfile 8192000\nkernel 385024\nkernel_stack 16384\n\
pagetables 45056\nsec_pagetables 0\npercpu 0\nsock 0\nvmalloc 0\nshmem 0\nzswap 0\nzswapped 0\n\
file_mapped 2048000\nfile_dirty 0\nfile_writeback 0\nswapcached 0\nanon_thp 0\nfile_thp 0\n\
shmem_thp 0\ninactive_anon 4096000\nactive_anon 0\ninactive_file 6144000\nactive_file 2048000\n\
unevictable 0\nslab_reclaimable 102400\nslab_unreclaimable 153600\nslab 256000\n\
workingset_refault_anon 0\nworkingset_refault_file 0\npgscan 0\npgsteal 0\npgfault 3300\n\
pgmajfault 7\npgrefill 0\npgactivate 0\npgdeactivate 0\npglazyfree 0\npglazyfreed 0\n";
    const V2_MEMORY_EVENTS: &str = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
    const V2_CPU_STAT: &str = "usage_usec 1520000\nuser_usec 1020000\nsystem_usec 500000\n\
core_sched.force_idle_usec 0\nnr_periods 40\nnr_throttled 7\nthrottled_usec 350000\n\
nr_bursts 0\nburst_usec 0\n";

    #[test]
    fn v1_memory_as_cadvisor_reads_it() {
        let m = memory_v1(
            "1630208\n",
            "2000000\n",
            "3\n",
            "16777216\n",
            V1_MEMORY_STAT,
            "",
            V1_OOM_CONTROL,
        );
        assert_eq!(m.usage, 1_630_208);
        assert_eq!(m.working_set, 1_630_208 - 1_216_512);
        assert_eq!((m.rss, m.cache, m.mapped_file), (413_696, 1_216_512, 0));
        assert_eq!(
            (m.max_usage, m.failcnt, m.pgfault, m.oom_kill),
            (2_000_000, 3, 1650, 1)
        );
        assert_eq!(m.limit, Some(16 << 20));
        assert_eq!(m.swap, 0, "no memsw file: no swap accounting");
        let unlimited = memory_v1("1", "", "", "9223372036854771712\n", "", "", "");
        assert_eq!(unlimited.limit, None);
    }

    #[test]
    fn v2_memory_as_cadvisor_reads_it() {
        let m = memory_v2(
            "12288000\n",
            "13000000\n",
            "max\n",
            V2_MEMORY_STAT,
            "4096\n",
            V2_MEMORY_EVENTS,
        );
        assert_eq!(m.working_set, 12_288_000 - 6_144_000);
        assert_eq!(
            (m.rss, m.cache, m.mapped_file),
            (4_096_000, 8_192_000, 2_048_000)
        );
        assert_eq!(
            (m.swap, m.max_usage, m.failcnt, m.oom_kill),
            (4096, 13_000_000, 12, 1)
        );
        assert_eq!((m.pgfault, m.pgmajfault), (3300, 7));
        assert_eq!(m.limit, None);
        assert_eq!(
            (m.active_file, m.inactive_file, m.kernel),
            (2_048_000, 6_144_000, 385_024)
        );
        assert_eq!(
            memory_v2("", "", "16777216\n", "", "", "").limit,
            Some(16 << 20)
        );
        // inactive_file above usage (racy reads): never negative.
        assert_eq!(
            memory_v2("100", "", "", "inactive_file 200\n", "", "").working_set,
            0
        );
    }

    #[test]
    fn cpu_v1_and_v2() {
        let c = cpu_v1(
            "2500000000\n",
            "user 150\nsystem 100\n",
            "1500000000 1000000000 \n",
            "nr_periods 10\nnr_throttled 2\nthrottled_time 30000000\n",
        );
        assert_eq!(c.usage_ns, 2_500_000_000);
        assert_eq!((c.user_ns, c.system_ns), (1_500_000_000, 1_000_000_000));
        assert_eq!(c.per_cpu_ns, [1_500_000_000, 1_000_000_000]);
        assert_eq!(
            (c.periods, c.throttled_periods, c.throttled_ns),
            (10, 2, 30_000_000)
        );
        let c = cpu_v2(V2_CPU_STAT);
        assert_eq!(
            (c.usage_ns, c.user_ns, c.system_ns),
            (1_520_000_000, 1_020_000_000, 500_000_000)
        );
        assert_eq!(
            (c.periods, c.throttled_periods, c.throttled_ns),
            (40, 7, 350_000_000)
        );
    }

    #[test]
    fn cpu_specs() {
        assert_eq!(
            cpu_spec_v1("614\n", "60000\n", "100000\n"),
            CpuSpec {
                shares: 614,
                quota: Some(60_000),
                period: 100_000
            }
        );
        assert_eq!(cpu_spec_v1("2\n", "-1\n", "100000\n").quota, None);
        // runc: weight = 1 + (shares - 2) * 9999 / 262142; 1024 → 39.
        assert_eq!(
            cpu_spec_v2("39\n", "max 100000\n"),
            CpuSpec {
                shares: 998,
                quota: None,
                period: 100_000
            }
        );
        assert_eq!(cpu_spec_v2("100\n", "50000 100000\n").quota, Some(50_000));
    }

    #[test]
    fn io_v1_and_v2() {
        let io = io_v1(
            "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:0 Async 12288\n8:0 Discard 0\n8:0 Total 12288\nTotal 12288\n",
            "8:0 Read 1\n8:0 Write 2\n8:0 Total 3\nTotal 3\n",
        );
        assert_eq!(
            io.devices[&(8, 0)],
            DeviceIo {
                read_bytes: 4096,
                write_bytes: 8192,
                reads: 1,
                writes: 2
            }
        );
        let io = io_v2("254:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n");
        assert_eq!(
            io.devices[&(254, 0)],
            DeviceIo {
                read_bytes: 4096,
                write_bytes: 8192,
                reads: 1,
                writes: 2
            }
        );
    }

    #[test]
    fn reads_a_v2_tree() {
        let d = tempfile::tempdir().expect("tmp");
        let c = d.path().join("kubepods/podu/c1");
        fs::create_dir_all(&c).expect("mkdir");
        for (f, t) in [
            ("cpu.stat", V2_CPU_STAT),
            ("memory.current", "12288000\n"),
            ("memory.max", "16777216\n"),
            ("memory.stat", V2_MEMORY_STAT),
            ("memory.events", V2_MEMORY_EVENTS),
            ("pids.current", "3\n"),
            ("pids.max", "max\n"),
        ] {
            fs::write(c.join(f), t).expect("write");
        }
        let h = Hierarchy::V2(d.path().to_path_buf());
        let s = h.stats("/kubepods/podu/c1").expect("stats");
        assert_eq!(s.cpu.usage_ns, 1_520_000_000);
        assert_eq!(s.memory.oom_kill, 1);
        assert_eq!(s.memory.limit, Some(16 << 20));
        assert_eq!(
            s.pids,
            Pids {
                current: 3,
                limit: None
            }
        );
        assert!(h.stats("/kubepods/podu/gone").is_none());
    }
}
