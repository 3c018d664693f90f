//! picolet's own CNI plugin, for devices that have none installed: type
//! `picolet` in a conflist, run as `picolet cni` (or as any executable
//! named by the type that is picolet's binary, called with `CNI_COMMAND`
//! set and no arguments). It speaks the CNI protocol like any plugin, so
//! the shim (and containerd) use it through the same code path as
//! Debian's reference plugins, and it does in one binary what
//! `bridge` + `host-local` + `portmap` do:
//!
//! - a bridge (`bridge`, default `picolet0`) holding the gateway address
//!   of `subnet` (default 10.42.0.0/16), IPv4 forwarding on;
//! - per pod a veth pair, the pod's end made directly inside its network
//!   namespace as `CNI_IFNAME`, its address and default route, all through
//!   rtnetlink ([`netlink`]);
//! - host-local-style leases under `dataDir` ([`ipam`]);
//! - `portMappings` (hostPort) and masquerade with iptables ([`iptables`]).
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "picolet", "plugins": [
//!   {"type": "picolet", "bridge": "picolet0", "subnet": "10.42.0.0/16",
//!    "dataDir": "/var/lib/picolet/cni", "ipMasq": true,
//!    "capabilities": {"portMappings": true}}]}
//! ```

pub mod ipam;
pub mod iptables;
pub mod netlink;

use std::fs;
use std::io::Read;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::host::InNetnsError;
use ipam::{LeaseError, Leases, Subnet};
use iptables::IptablesError;
use netlink::Netlink;

/// The plugin type that names this plugin in a conflist.
pub const TYPE: &str = "picolet";
/// Defaults of the network `picolet up` writes when there is none.
pub const DEFAULT_BRIDGE: &str = "picolet0";
pub const DEFAULT_SUBNET: &str = "10.42.0.0/16";
pub const DEFAULT_NETWORK: &str = "picolet";

const SUPPORTED: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
/// Stdin beyond this is refused (a network config is a few KiB).
const MAX_STDIN: u64 = 1 << 20;

/// The plugin's part of a network config, as the runtime hands it over.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetConf {
    #[serde(default)]
    cni_version: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    bridge: Option<String>,
    #[serde(default)]
    subnet: Option<String>,
    #[serde(default)]
    data_dir: Option<PathBuf>,
    #[serde(default)]
    ip_masq: Option<bool>,
    #[serde(default)]
    runtime_config: RuntimeConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuntimeConfig {
    #[serde(default)]
    port_mappings: Vec<PortMapping>,
}

/// One `portMappings` entry: the CNI convention's camelCase (libcni, the
/// shim), or the Go field names containerd's go-cni sends (its
/// PortMapping has no JSON tags; Go plugins match keys case-insensitively).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    #[serde(alias = "HostPort")]
    pub host_port: u16,
    #[serde(alias = "ContainerPort")]
    pub container_port: u16,
    #[serde(default = "tcp", alias = "Protocol")]
    pub protocol: String,
    #[serde(default, rename = "hostIP", alias = "HostIP", alias = "hostIp")]
    pub host_ip: String,
}

fn tcp() -> String {
    "tcp".into()
}

/// A checked config.
#[derive(Debug)]
struct Network {
    version: String,
    name: String,
    bridge: String,
    subnet: Subnet,
    data_dir: PathBuf,
    masquerade: bool,
    ports: Vec<PortMapping>,
}

/// Why setting up or tearing down a pod's link failed: each step's own
/// error, the I/O error (its kind included) kept.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// An rtnetlink call: what it did, and the kernel's answer.
    #[error("{what}: {source}")]
    Netlink {
        what: String,
        source: std::io::Error,
    },
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bridge {0} vanished")]
    BridgeVanished(String),
    /// Entering the pod's network namespace.
    #[error(transparent)]
    Netns(Box<InNetnsError<NetError>>),
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error(transparent)]
    Iptables(#[from] IptablesError),
}

/// `.map_err(link("create bridge x"))`.
fn link(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NetError {
    let what = what.into();
    move |source| NetError::Netlink { what, source }
}

/// A spec error: code and message (codes: 4 bad config, 7 bad environment,
/// 100+ this plugin's own).
#[derive(Debug)]
struct Fail(u32, String);

fn bad_config(msg: String) -> Fail {
    Fail(4, msg)
}

/// `for_del`: DEL must be able to undo an ADD that failed on a bad field,
/// so only what DEL uses (name, bridge, dataDir) is checked; it never
/// leases, so the subnet and ports may be anything.
fn parse_for(stdin: &[u8], for_del: bool) -> Result<Network, Fail> {
    let mut c: NetConf =
        serde_json::from_slice(stdin).map_err(|e| bad_config(format!("network config: {e}")))?;
    if for_del {
        c.subnet = None;
        c.runtime_config.port_mappings.clear();
    }
    if c.name.is_empty() {
        return Err(bad_config("network config: name: required".into()));
    }
    let bridge = c.bridge.unwrap_or_else(|| DEFAULT_BRIDGE.into());
    if bridge.is_empty() || bridge.len() > 15 || bridge.contains(['/', ' ']) {
        return Err(bad_config(format!(
            "network config: bridge: {bridge:?} is not a link name (1-15 characters, no / or space)"
        )));
    }
    let subnet = Subnet::parse(c.subnet.as_deref().unwrap_or(DEFAULT_SUBNET))
        .map_err(|e| bad_config(format!("network config: subnet: {e}")))?;
    let data_dir = c
        .data_dir
        .unwrap_or_else(|| PathBuf::from(edge_config::DEFAULT_ROOT).join("cni"));
    if !data_dir.is_absolute() {
        return Err(bad_config(format!(
            "network config: dataDir: {} is not an absolute path",
            data_dir.display()
        )));
    }
    for (i, p) in c.runtime_config.port_mappings.iter().enumerate() {
        if p.host_port == 0 || p.container_port == 0 {
            return Err(bad_config(format!(
                "network config: runtimeConfig.portMappings[{i}]: hostPort and containerPort must be 1-65535"
            )));
        }
        let proto = p.protocol.to_ascii_lowercase();
        if !matches!(proto.as_str(), "tcp" | "udp" | "sctp") {
            return Err(bad_config(format!(
                "network config: runtimeConfig.portMappings[{i}].protocol: {:?} is not tcp, udp or sctp",
                p.protocol
            )));
        }
        if !p.host_ip.is_empty() && p.host_ip.parse::<Ipv4Addr>().is_err() {
            return Err(bad_config(format!(
                "network config: runtimeConfig.portMappings[{i}].hostIP: {:?} is not an IPv4 address",
                p.host_ip
            )));
        }
    }
    Ok(Network {
        version: if c.cni_version.is_empty() {
            "1.0.0".into()
        } else {
            c.cni_version
        },
        name: c.name,
        bridge,
        subnet,
        data_dir,
        masquerade: c.ip_masq.unwrap_or(true),
        ports: c.runtime_config.port_mappings,
    })
}

/// The default network's conflist: the built-in plugin on `picolet0`,
/// 10.42.0.0/16, leases under `<data dir>/cni`, hostPort; masquerade when
/// the device has iptables.
pub fn default_conflist(data_dir: &Path, masquerade: bool) -> String {
    let v = json!({
        "cniVersion": "1.0.0",
        "name": DEFAULT_NETWORK,
        "plugins": [{
            "type": TYPE,
            "bridge": DEFAULT_BRIDGE,
            "subnet": DEFAULT_SUBNET,
            "dataDir": data_dir.join("cni"),
            "ipMasq": masquerade,
            "capabilities": {"portMappings": true},
        }],
    });
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

/// Writes [`default_conflist`] as `<conf_dir>/10-picolet.conflist` when
/// `conf_dir` holds no network config; the path written, if any.
pub fn write_default_network(
    conf_dir: &Path,
    data_dir: &Path,
) -> Result<Option<PathBuf>, LeaseError> {
    let files = super::config::config_files(conf_dir).map_err(ipam::io("read", conf_dir))?;
    if !files.is_empty() {
        return Ok(None);
    }
    fs::create_dir_all(conf_dir).map_err(ipam::io("create", conf_dir))?;
    let path = conf_dir.join("10-picolet.conflist");
    let text = default_conflist(data_dir, iptables::find().is_some());
    ipam::write_synced(&path, text.as_bytes()).map_err(ipam::io("write", &path))?;
    Ok(Some(path))
}

/// The host end of a pod's veth: `pl` and 12 hex digits of a hash of
/// container id and interface (link names are at most 15 bytes).
fn host_veth(id: &str, ifname: &str) -> String {
    // FNV-1a, 64 bit: stable across builds, no dependency.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes().chain([0]).chain(ifname.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("pl{:012x}", h >> 16)
}

fn result(net: &Network, ifname: &str, netns: &str, veth: &str, ip: Ipv4Addr) -> Value {
    let gw = net.subnet.gateway().to_string();
    let mut address = json!({
        "address": format!("{ip}/{}", net.subnet.prefix),
        "gateway": gw,
        "interface": 2,
    });
    if net.version.starts_with("0.") {
        address["version"] = json!("4");
    }
    json!({
        "cniVersion": net.version,
        "interfaces": [
            {"name": net.bridge},
            {"name": veth},
            {"name": ifname, "sandbox": netns},
        ],
        "ips": [address],
        "routes": [{"dst": "0.0.0.0/0", "gw": gw}],
        "dns": {},
    })
}

/// What the runtime said in `CNI_*`.
struct Env {
    command: String,
    id: String,
    netns: String,
    ifname: String,
}

/// The call's variables as `get` gives them (the process's environment,
/// or the shim's call in-process).
fn env_from(get: impl Fn(&str) -> String) -> Result<Env, Fail> {
    let e = Env {
        command: get("CNI_COMMAND"),
        id: get("CNI_CONTAINERID"),
        netns: get("CNI_NETNS"),
        ifname: get("CNI_IFNAME"),
    };
    let needs: &[(&str, &str)] = match e.command.as_str() {
        "ADD" => &[
            ("CNI_CONTAINERID", &e.id),
            ("CNI_NETNS", &e.netns),
            ("CNI_IFNAME", &e.ifname),
        ],
        "DEL" | "CHECK" => &[("CNI_CONTAINERID", &e.id), ("CNI_IFNAME", &e.ifname)],
        _ => &[],
    };
    for (k, v) in needs {
        if v.is_empty() {
            return Err(Fail(7, format!("{k} is required for {}", e.command)));
        }
    }
    if e.ifname.len() > 15 || e.ifname.contains(['/', ' ']) {
        return Err(Fail(
            7,
            format!("CNI_IFNAME {:?} is not a link name", e.ifname),
        ));
    }
    Ok(e)
}

/// Runs `work` on a thread that joined the network namespace at `netns`,
/// with an rtnetlink socket of that namespace.
fn in_netns<T: Send>(
    netns: &Path,
    work: impl FnOnce(&mut Netlink) -> std::io::Result<T> + Send,
) -> Result<T, NetError> {
    crate::host::in_netns(netns, || {
        let mut nl = Netlink::open().map_err(link("netlink in the pod"))?;
        work(&mut nl).map_err(|source| NetError::Io {
            op: "in netns",
            path: netns.to_path_buf(),
            source,
        })
    })
    .map_err(|e| match e {
        InNetnsError::Work(e) => e,
        e => NetError::Netns(Box::new(e)),
    })
}

fn add(net: &Network, e: &Env) -> Result<Value, Fail> {
    let fail = |m: String| Fail(100, m);
    let leases = Leases::new(&net.data_dir, &net.name, net.subnet);
    let firewall = match iptables::find() {
        Some(bin) => Some(iptables::Iptables::new(bin)),
        None if net.masquerade || !net.ports.is_empty() => {
            return Err(fail(
                "iptables not found in PATH, /usr/sbin or /sbin: needed for ipMasq and hostPort (set \"ipMasq\": false for a network without either)".into(),
            ));
        }
        None => None,
    };
    let ip = leases
        .allocate(&e.id, &e.ifname)
        .map_err(|why| fail(why.to_string()))?;
    let veth = host_veth(&e.id, &e.ifname);
    let done = (|| -> Result<(), NetError> {
        let mut nl = Netlink::open().map_err(link("netlink"))?;
        let bridge = ensure_bridge(&mut nl, net)?;
        // A crash between ADD and DEL may have left this pod's pair.
        if let Some(old) = nl.link_index(&veth).map_err(link(format!("link {veth}")))? {
            nl.delete_link(old)
                .map_err(link(format!("delete stale {veth}")))?;
        }
        let netns = Path::new(&e.netns);
        let ns = fs::File::open(netns).map_err(|source| NetError::Io {
            op: "open netns",
            path: netns.to_path_buf(),
            source,
        })?;
        // The pod's end is made in the netns under its final name; a
        // crashed ADD may have left one there: remove it and try once more
        // (only then is the pod's netns entered twice).
        let created = match nl.add_veth(&veth, &e.ifname, ns.as_fd()) {
            Err(err) if err.raw_os_error() == Some(libc::EEXIST) => {
                in_netns(netns, |nl| match nl.link_index(&e.ifname)? {
                    Some(i) => nl.delete_link(i),
                    None => Ok(()),
                })?;
                nl.add_veth(&veth, &e.ifname, ns.as_fd())
            }
            r => r,
        };
        created.map_err(link(format!("create veth {veth}/{}", e.ifname)))?;
        let host = nl
            .link_index(&veth)
            .and_then(|i| i.ok_or_else(|| std::io::Error::other("gone")))
            .map_err(link(format!("link {veth}")))?;
        no_ipv6(&veth);
        nl.set_master(host, bridge)
            .and_then(|()| nl.set_up(host))
            .map_err(link(format!("attach {veth} to {}", net.bridge)))?;
        let gw = net.subnet.gateway();
        in_netns(netns, |nl| {
            if let Some(lo) = nl.link_index("lo")? {
                nl.set_up(lo)?;
            }
            let pod = nl
                .link_index(&e.ifname)?
                .ok_or_else(|| std::io::Error::other(format!("{} missing", e.ifname)))?;
            no_ipv6(&e.ifname);
            nl.add_address(pod, ip, net.subnet.prefix)?;
            nl.set_up(pod)?;
            nl.add_default_route(gw)
        })?;
        if let Some(fw) = &firewall {
            if !net.ports.is_empty() {
                // A DNATed packet from the host's 127.0.0.1 may leave
                // through the bridge (then masqueraded), as portmap does.
                let localnet = PathBuf::from(format!(
                    "/proc/sys/net/ipv4/conf/{}/route_localnet",
                    net.bridge
                ));
                fs::write(&localnet, "1").map_err(|source| NetError::Io {
                    op: "write",
                    path: localnet,
                    source,
                })?;
            }
            let subnet = net.subnet.to_string();
            fw.add(&iptables::Want {
                masquerade: net.masquerade.then_some(subnet.as_str()),
                bridge: &net.bridge,
                id: &e.id,
                pod_ip: &ip.to_string(),
                ports: &net.ports,
            })?;
        }
        Ok(())
    })();
    if let Err(why) = done {
        // Undo what was done, as a DEL would, before failing.
        let _ = teardown(e, &leases);
        return Err(fail(why.to_string()));
    }
    Ok(result(net, &e.ifname, &e.netns, &veth, ip))
}

/// IPv6 off on link `name` of the calling thread's network namespace,
/// before it is up. The network is IPv4 only (as Docker does for a network
/// without IPv6); otherwise each pod's two ends got link-local addresses,
/// duplicate address detection and multicast listener reports flooded to
/// every port of the bridge: ~1.3 ms of kernel work per pod at a cold start
/// of 100. Best effort: a kernel without IPv6 has no such file.
fn no_ipv6(name: &str) {
    let _ = fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
}

/// The bridge's index, made and addressed on first use.
fn ensure_bridge(nl: &mut Netlink, net: &Network) -> Result<u32, NetError> {
    let name = &net.bridge;
    let index = match nl.link_index(name).map_err(link(format!("link {name}")))? {
        Some(i) => i,
        None => {
            match nl.add_bridge(name) {
                Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                    return Err(link(format!("create bridge {name}"))(e));
                }
                _ => {}
            }
            nl.link_index(name)
                .map_err(link(format!("link {name}")))?
                .ok_or_else(|| NetError::BridgeVanished(name.clone()))?
        }
    };
    nl.add_address(index, net.subnet.gateway(), net.subnet.prefix)
        .and_then(|()| nl.set_up(index))
        .map_err(link(format!("bridge {name}")))?;
    fs::write("/proc/sys/net/ipv4/ip_forward", "1").map_err(|source| NetError::Io {
        op: "enable IPv4 forwarding: write",
        path: PathBuf::from("/proc/sys/net/ipv4/ip_forward"),
        source,
    })?;
    Ok(index)
}

/// Everything ADD made for the pod, gone; what is already gone is fine.
fn teardown(e: &Env, leases: &Leases) -> Result<(), NetError> {
    if let Some(bin) = iptables::find() {
        iptables::Iptables::new(bin).remove(&e.id)?;
    }
    let veth = host_veth(&e.id, &e.ifname);
    let mut nl = Netlink::open().map_err(link("netlink"))?;
    if let Some(i) = nl.link_index(&veth).map_err(link(format!("link {veth}")))? {
        match nl.delete_link(i) {
            Err(err) if err.raw_os_error() != Some(libc::ENODEV) => {
                return Err(link(format!("delete {veth}"))(err));
            }
            _ => {}
        }
    }
    Ok(leases.release(&e.id, &e.ifname)?)
}

fn del(net: &Network, e: &Env) -> Result<(), Fail> {
    let leases = Leases::new(&net.data_dir, &net.name, net.subnet);
    teardown(e, &leases).map_err(|why| Fail(100, why.to_string()))
}

fn check(net: &Network, e: &Env) -> Result<(), Fail> {
    let leases = Leases::new(&net.data_dir, &net.name, net.subnet);
    if leases.find(&e.id, &e.ifname).is_none() {
        return Err(Fail(
            100,
            format!("{}/{}: no address leased", e.id, e.ifname),
        ));
    }
    let veth = host_veth(&e.id, &e.ifname);
    let mut nl = Netlink::open().map_err(|e| Fail(100, format!("netlink: {e}")))?;
    match nl.link_index(&veth) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Fail(100, format!("host link {veth} is missing"))),
        Err(err) => Err(Fail(100, format!("link {veth}: {err}"))),
    }
}

/// One plugin call: reads stdin and `CNI_*`, prints the result or a spec
/// error object, exits 0 or 1.
pub fn main() -> ExitCode {
    let mut stdin = Vec::new();
    let read = std::io::stdin()
        .take(MAX_STDIN + 1)
        .read_to_end(&mut stdin)
        .map_err(|e| Fail(4, format!("read stdin: {e}")));
    let version = serde_json::from_slice::<Value>(&stdin)
        .ok()
        .and_then(|v| {
            v.get("cniVersion")
                .and_then(Value::as_str)
                .map(String::from)
        })
        .unwrap_or_else(|| "1.0.0".into());
    let outcome = read.and_then(|_| {
        handle(
            &stdin,
            env_from(|k| std::env::var(k).unwrap_or_default()),
            &version,
        )
    });
    match outcome {
        Ok(out) => {
            if let Some(v) = out {
                println!("{v}");
            }
            ExitCode::SUCCESS
        }
        Err(Fail(code, msg)) => {
            println!(
                "{}",
                json!({"cniVersion": version, "code": code, "msg": msg})
            );
            ExitCode::FAILURE
        }
    }
}

/// One call of the plugin as the shim makes it for type `picolet`: in its
/// own process, on a blocking thread, with the variables it would have set
/// (`(name, value)`), without the fork and exec of the whole binary and
/// its page faults (~4 ms of CPU per pod at a cold start of 100 pods).
/// `Ok` is the result (ADD) or nothing; `Err` the spec's error code and
/// message, as a plugin prints them.
pub fn call(stdin: &[u8], vars: &[(&str, &str)]) -> Result<Option<Value>, (u32, String)> {
    let get = |k: &str| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_string())
            .unwrap_or_default()
    };
    handle(stdin, env_from(get), "1.0.0").map_err(|Fail(code, msg)| (code, msg))
}

/// What `main` does once stdin is read.
fn handle(stdin: &[u8], e: Result<Env, Fail>, version: &str) -> Result<Option<Value>, Fail> {
    if stdin.len() as u64 > MAX_STDIN {
        return Err(Fail(4, format!("network config over {MAX_STDIN} bytes")));
    }
    let e = e?;
    if e.command == "VERSION" {
        return Ok(Some(
            json!({"cniVersion": version, "supportedVersions": SUPPORTED}),
        ));
    }
    let net = parse_for(stdin, e.command == "DEL")?;
    if !SUPPORTED.contains(&net.version.as_str()) {
        return Err(Fail(
            1,
            format!(
                "cniVersion {:?} is not supported ({SUPPORTED:?})",
                net.version
            ),
        ));
    }
    match e.command.as_str() {
        "ADD" => add(&net, &e).map(Some),
        "DEL" => del(&net, &e).map(|()| None),
        "CHECK" => check(&net, &e).map(|()| None),
        // Ready whenever it can run: it needs nothing but the kernel.
        "STATUS" => Ok(None),
        "" => Err(Fail(7, "CNI_COMMAND is not set".into())),
        other => Err(Fail(4, format!("CNI_COMMAND {other:?} is not supported"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_gets_defaults_and_bad_fields_are_named() {
        let n = parse_for(
            br#"{"cniVersion":"1.0.0","name":"picolet","type":"picolet"}"#,
            false,
        )
        .expect("ok");
        assert_eq!(n.bridge, "picolet0");
        assert_eq!(n.subnet.to_string(), "10.42.0.0/16");
        assert!(n.masquerade);
        assert_eq!(n.data_dir, Path::new("/var/lib/picolet/cni"));
        let n = parse_for(
            br#"{"cniVersion":"0.4.0","name":"x","subnet":"10.1.2.0/24","ipMasq":false,
                "runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}"#,
            false,
        )
        .expect("ok");
        assert_eq!(n.ports.len(), 1);
        assert!(!n.masquerade);
        for (bad, why) in [
            (r#"{"name":""}"#, "name: required"),
            (
                r#"{"name":"x","subnet":"10.1.2.3/24"}"#,
                "subnet: \"10.1.2.3/24\": host bits set",
            ),
            (
                r#"{"name":"x","bridge":"a-very-long-bridge"}"#,
                "bridge: \"a-very-long-bridge\"",
            ),
            (
                r#"{"name":"x","dataDir":"rel"}"#,
                "dataDir: rel is not an absolute path",
            ),
            (
                r#"{"name":"x","runtimeConfig":{"portMappings":[{"hostPort":0,"containerPort":80}]}}"#,
                "portMappings[0]: hostPort and containerPort",
            ),
            (
                r#"{"name":"x","runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":80,"protocol":"icmp"}]}}"#,
                "portMappings[0].protocol",
            ),
            (r#"{"name":"x","subnet":7}"#, "network config: invalid type"),
        ] {
            let Fail(code, msg) = parse_for(bad.as_bytes(), false).expect_err(bad);
            assert_eq!(code, 4);
            assert!(msg.contains(why), "{bad}: {msg}");
        }
        // DEL undoes an ADD that failed on a bad subnet or port.
        let n = parse_for(br#"{"name":"x","subnet":"10.1.2.3/24"}"#, true).expect("DEL");
        assert_eq!(n.name, "x");
    }

    /// What containerd 1.6.20 (go-cni) gave the plugin on stdin for ADD in
    /// bench/cri.sh: Go field names in portMappings (dataDir shortened).
    const CONTAINERD_ADD: &str = r#"{"bridge":"picolet0","capabilities":{"portMappings":true},"cniVersion":"1.0.0","dataDir":"/var/tmp/bench/c/ipam-builtin","ipMasq":true,"name":"bench","runtimeConfig":{"portMappings":[{"HostPort":30000,"ContainerPort":80,"Protocol":"tcp","HostIP":""}]},"subnet":"10.98.0.0/16","type":"picolet"}"#;

    #[test]
    fn containerds_port_mappings_are_understood() {
        let n = parse_for(CONTAINERD_ADD.as_bytes(), false).expect("containerd's stdin");
        assert_eq!(
            n.ports,
            [PortMapping {
                host_port: 30000,
                container_port: 80,
                protocol: "tcp".into(),
                host_ip: String::new(),
            }]
        );
    }

    #[test]
    fn host_veth_names_are_short_stable_and_differ_by_pod() {
        let a = host_veth("0123456789abcdef", "eth0");
        assert_eq!(a.len(), 14);
        assert_eq!(a, host_veth("0123456789abcdef", "eth0"));
        assert_ne!(a, host_veth("0123456789abcdee", "eth0"));
        assert_ne!(a, host_veth("0123456789abcdef", "eth1"));
    }

    #[test]
    fn the_result_names_the_pods_interface_and_its_address() {
        let n = parse_for(
            br#"{"cniVersion":"1.0.0","name":"p","subnet":"10.42.0.0/16"}"#,
            false,
        )
        .expect("ok");
        let r = result(&n, "eth0", "/run/ns", "plx", Ipv4Addr::new(10, 42, 0, 9));
        assert_eq!(r["ips"][0]["address"], "10.42.0.9/16");
        assert_eq!(r["ips"][0]["gateway"], "10.42.0.1");
        let i = usize::try_from(r["ips"][0]["interface"].as_u64().expect("index")).expect("small");
        assert_eq!(r["interfaces"][i]["name"], "eth0");
        assert_eq!(r["interfaces"][i]["sandbox"], "/run/ns");
        assert!(r["ips"][0].get("version").is_none());
    }
}
