//! This node as the agent reports it: name, an address, CPUs and memory
//! (kubelet's `nodestatus` setters read the same sources).

use crate::cri_config::{NodeInfo, SwapControl};

/// Facts about this node: name, an address, CPUs and memory.
pub fn info(name: &str, ip: Option<std::net::IpAddr>) -> NodeInfo {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as u128;
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u128>().ok())
        })
        .unwrap_or(0)
        * 1024;
    NodeInfo {
        name: name.into(),
        host_ip: ip
            .map(|i| i.to_string())
            .or_else(host_ip)
            .unwrap_or_else(|| "127.0.0.1".into()),
        cpu_milli: cpus * 1000,
        memory_bytes: mem,
        swap: swap_control(),
    }
}

/// Whether and how this node's cgroups limit swap (kubelet's
/// `swapControllerAvailable`): v1's `memory.memsw.*` files (the kernel's
/// swap accounting), or v2's `memory.swap.max` beside the agent's own
/// cgroup.
fn swap_control() -> SwapControl {
    let root = std::path::Path::new("/sys/fs/cgroup");
    if root.join("memory/memory.memsw.limit_in_bytes").exists() {
        return SwapControl::V1;
    }
    if root.join("cgroup.controllers").exists() {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let path = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or("/")
            .trim_start_matches('/');
        if !path.is_empty() && root.join(path).join("memory.swap.max").exists() {
            return SwapControl::V2;
        }
    }
    SwapControl::Unavailable
}

/// The first non-loopback IPv4 address of an interface that is up
/// (kubelet: the node's InternalIP).
fn host_ip() -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        if a.flags
            .contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK)
            || !a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP)
        {
            continue;
        }
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Some(sin.ip().to_string());
        }
    }
    None
}
