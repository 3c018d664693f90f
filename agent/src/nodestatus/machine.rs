//! This node as the agent reports it: name, an address, CPUs and memory
//! (kubelet's `nodestatus` setters read the same sources).

use crate::cri_config::NodeInfo;

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
    }
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
