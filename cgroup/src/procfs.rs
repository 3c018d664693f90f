//! procfs readers for container metrics: network counters of a process's
//! network namespace (`/proc/<pid>/net/dev`) and thread, fd and socket
//! counts. Parsers are pure.

use std::path::Path;

/// Counters of one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetIf {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// Interfaces cAdvisor leaves out (loopback, the host ends of veth pairs).
fn ignored(name: &str) -> bool {
    name == "lo" || name.starts_with("veth") || name.starts_with("docker")
}

/// Parses `/proc/<pid>/net/dev`.
pub fn parse_net_dev(text: &str) -> Vec<NetIf> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            if ignored(name) {
                return None;
            }
            let v: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            if v.len() < 16 {
                return None;
            }
            Some(NetIf {
                name: name.to_string(),
                rx_bytes: v[0],
                rx_packets: v[1],
                rx_errors: v[2],
                rx_dropped: v[3],
                tx_bytes: v[8],
                tx_packets: v[9],
                tx_errors: v[10],
                tx_dropped: v[11],
            })
        })
        .collect()
}

/// `Threads:` of `/proc/<pid>/status`.
pub fn parse_threads(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Threads, open file descriptors and sockets of these processes.
pub fn process_counts(pids: &[u32]) -> (u64, u64, u64) {
    let (mut threads, mut fds, mut sockets) = (0, 0, 0);
    for pid in pids {
        let dir = Path::new("/proc").join(pid.to_string());
        threads += parse_threads(&std::fs::read_to_string(dir.join("status")).unwrap_or_default());
        for e in std::fs::read_dir(dir.join("fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            fds += 1;
            if std::fs::read_link(e.path())
                .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
            {
                sockets += 1;
            }
        }
    }
    (threads, fds, sockets)
}

/// The network counters of `pid`'s network namespace.
pub fn net_dev(pid: u32) -> Vec<NetIf> {
    parse_net_dev(&std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap_or_default())
}

/// (physical cores, sockets) from `/proc/cpuinfo`: distinct
/// (physical id, core id) pairs and distinct physical ids. Kernels that do
/// not print them (some arm64 ones) count each processor as a core on one
/// socket.
pub fn parse_cpuinfo(text: &str) -> (u64, u64) {
    let mut cores = std::collections::BTreeSet::new();
    let mut sockets = std::collections::BTreeSet::new();
    let mut processors = 0;
    for block in text.split("\n\n") {
        let field = |k: &str| {
            block.lines().find_map(|l| {
                let (key, v) = l.split_once(':')?;
                (key.trim() == k).then(|| v.trim().to_string())
            })
        };
        if field("processor").is_none() {
            continue;
        }
        processors += 1;
        if let (Some(p), Some(c)) = (field("physical id"), field("core id")) {
            cores.insert((p.clone(), c));
            sockets.insert(p);
        }
    }
    if cores.is_empty() {
        return (processors, u64::from(processors > 0));
    }
    (cores.len() as u64, sockets.len() as u64)
}

/// A `/proc/meminfo` field in bytes.
pub fn meminfo_bytes(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    // The kernel's format (net/core/net-procfs.c), values written for the test.
    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     840      10    0    0    0     0          0         0      840      10    0    0    0     0       0          0
  eth0: 1048576     812    1    2    0     0          0         3   524288     640    4    5    0     0       0          0
veth1a2b3c:  100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0
";

    #[test]
    fn net_dev_skips_loopback_and_veth() {
        assert_eq!(
            parse_net_dev(NET_DEV),
            [NetIf {
                name: "eth0".into(),
                rx_bytes: 1_048_576,
                rx_packets: 812,
                rx_errors: 1,
                rx_dropped: 2,
                tx_bytes: 524_288,
                tx_packets: 640,
                tx_errors: 4,
                tx_dropped: 5,
            }]
        );
        assert!(parse_net_dev("").is_empty());
    }

    #[test]
    fn cpuinfo_cores_and_sockets() {
        let x86 = "processor\t: 0\nphysical id\t: 0\ncore id\t\t: 0\n\n\
                   processor\t: 1\nphysical id\t: 0\ncore id\t\t: 0\n\n\
                   processor\t: 2\nphysical id\t: 0\ncore id\t\t: 1\n\n\
                   processor\t: 3\nphysical id\t: 1\ncore id\t\t: 0\n";
        assert_eq!(parse_cpuinfo(x86), (3, 2));
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\n\nprocessor\t: 1\nBogoMIPS\t: 50.00\n\nHardware\t: x\n";
        assert_eq!(parse_cpuinfo(arm), (2, 1));
        assert_eq!(
            meminfo_bytes("MemTotal:  2048 kB\nSwapTotal:   1024 kB\n", "SwapTotal"),
            1 << 20
        );
    }

    #[test]
    fn threads_from_status() {
        assert_eq!(parse_threads("Name:\tsh\nThreads:\t3\nSigQ:\t0/1\n"), 3);
        assert_eq!(parse_threads(""), 0);
    }
}
