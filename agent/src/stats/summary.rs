//! `/stats/summary` in kubelet's JSON shape (statsapi `Summary`): node and
//! pods with their containers — cpu (with `usageNanoCores` over the time
//! since the previous reading), memory, network, node fs and imagefs, the
//! pids rlimit, pod process counts, container log usage. Built from the
//! same cgroup snapshot as `/metrics/cadvisor`; the JSON assembly is pure.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Value, json};

use crate::stats::cadvisor::{Entry, Snapshot};
use cgroup::procfs::NetIf;

/// Filesystem figures (`FsStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fs {
    pub capacity: u64,
    pub available: u64,
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

impl Fs {
    /// statvfs of the filesystem holding `path`.
    pub fn of(path: &Path) -> Option<Fs> {
        let s = nix::sys::statvfs::statvfs(path).ok()?;
        let frsize = s.fragment_size() as u64;
        let capacity = s.blocks() as u64 * frsize;
        let free = s.blocks_free() as u64 * frsize;
        Some(Fs {
            capacity,
            available: s.blocks_available() as u64 * frsize,
            used: capacity.saturating_sub(free),
            inodes: s.files() as u64,
            inodes_free: s.files_free() as u64,
        })
    }

    fn json(&self, time: &str) -> Value {
        json!({
            "time": time,
            "availableBytes": self.available,
            "capacityBytes": self.capacity,
            "usedBytes": self.used,
            "inodesFree": self.inodes_free,
            "inodes": self.inodes,
            "inodesUsed": self.inodes.saturating_sub(self.inodes_free),
        })
    }
}

/// What the summary needs beyond the cgroup snapshot.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    pub node_name: String,
    /// RFC 3339 times.
    pub now: String,
    pub boot_time: String,
    /// By cgroup id: CPU usage rate in nanocores, when known.
    pub nano_cores: HashMap<String, u64>,
    pub node_fs: Option<Fs>,
    pub image_fs: Option<Fs>,
    pub pid_max: u64,
    pub processes: u64,
    /// By pod UID: (name, namespace, start time RFC 3339).
    pub pods: HashMap<String, (String, String, String)>,
    /// By (pod UID, container name): log bytes and inodes.
    pub logs: HashMap<(String, String), (u64, u64)>,
    /// By container ID (the runtime's): writable layer bytes and inodes.
    pub rootfs: HashMap<String, (u64, u64)>,
    /// By pod UID: emptyDir volumes (name, bytes, inodes, memory-backed).
    pub volumes: HashMap<String, Vec<(String, u64, u64, bool)>>,
}

/// Unix seconds as [`rfc3339`] takes them (saturating).
pub fn secs(s: u64) -> i64 {
    i64::try_from(s).unwrap_or(i64::MAX)
}

/// Unix seconds → RFC 3339, as the Kubernetes API writes times.
pub fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| {
            serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t))
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

fn cpu(e: &Entry, x: &Extras) -> Value {
    let mut v = json!({
        "time": x.now,
        "usageCoreNanoSeconds": e.stats.cpu.usage_ns,
    });
    if let Some(n) = x.nano_cores.get(&e.labels.id) {
        v["usageNanoCores"] = json!(n);
    }
    v
}

fn memory(e: &Entry, x: &Extras, limit: Option<u64>) -> Value {
    let m = &e.stats.memory;
    let mut v = json!({
        "time": x.now,
        "usageBytes": m.usage,
        "workingSetBytes": m.working_set,
        "rssBytes": m.rss,
        "pageFaults": m.pgfault,
        "majorPageFaults": m.pgmajfault,
    });
    if let Some(l) = limit.or(m.limit) {
        v["availableBytes"] = json!(l.saturating_sub(m.working_set));
    }
    v
}

fn interface(n: &NetIf) -> Value {
    json!({
        "name": n.name,
        "rxBytes": n.rx_bytes,
        "rxErrors": n.rx_errors,
        "txBytes": n.tx_bytes,
        "txErrors": n.tx_errors,
    })
}

fn network(ifs: &[NetIf], x: &Extras) -> Value {
    // The default interface: eth0 when there is one (kubelet's choice).
    let mut v = ifs
        .iter()
        .find(|n| n.name == "eth0")
        .or(ifs.first())
        .map(interface)
        .unwrap_or_else(|| json!({}));
    let list: Vec<Value> = ifs.iter().map(interface).collect();
    v["time"] = json!(x.now);
    v["interfaces"] = json!(list);
    v
}

/// `FsStats` of the filesystem `fs` (when known) with this usage.
fn usage(fs: Option<Fs>, x: &Extras, (bytes, inodes): (u64, u64)) -> Value {
    let mut v = fs
        .map(|f| f.json(&x.now))
        .unwrap_or_else(|| json!({"time": x.now}));
    v["usedBytes"] = json!(bytes);
    v["inodesUsed"] = json!(inodes);
    v
}

/// Builds the summary.
pub fn build(snap: &Snapshot, x: &Extras, host_network: &[NetIf]) -> Value {
    let root = snap.entries.iter().find(|e| e.labels.id == "/");
    let mut node = json!({
        "nodeName": x.node_name,
        "startTime": x.boot_time,
        "network": network(host_network, x),
        "rlimit": {"time": x.now, "maxpid": x.pid_max, "curproc": x.processes},
    });
    if let Some(r) = root {
        node["cpu"] = cpu(r, x);
        node["memory"] = memory(r, x, Some(snap.machine.memory_bytes));
    }
    if let Some(fs) = &x.node_fs {
        node["fs"] = fs.json(&x.now);
    }
    if let Some(fs) = &x.image_fs {
        node["runtime"] = json!({"imageFs": fs.json(&x.now)});
    }
    let mut pods = Vec::new();
    let mut uids: Vec<&String> = x.pods.keys().collect();
    uids.sort();
    for uid in uids {
        let (name, namespace, start) = &x.pods[uid];
        // The pod's cgroup and its containers' entries.
        let (pod_level, mine): (Vec<&Entry>, Vec<&Entry>) = snap
            .entries
            .iter()
            .filter(|e| e.labels.pod == *name && e.labels.namespace == *namespace)
            .partition(|e| e.labels.container.is_empty());
        let pod_cg = pod_level.first();
        let mut containers = Vec::new();
        let mut log_total = (0, 0);
        let mut rootfs_total = (0, 0);
        for e in &mine {
            let mut c = json!({
                "name": e.labels.container,
                "startTime": rfc3339(
                    std::time::Duration::try_from_secs_f64(e.start_time)
                        .map_or(0, |d| secs(d.as_secs()))
                ),
                "cpu": cpu(e, x),
                "memory": memory(e, x, None),
            });
            if let Some(&(bytes, inodes)) = x.logs.get(&(uid.clone(), e.labels.container.clone())) {
                log_total.0 += bytes;
                log_total.1 += inodes;
                c["logs"] = usage(x.node_fs, x, (bytes, inodes));
            }
            if let Some(&(bytes, inodes)) = x.rootfs.get(&e.labels.name) {
                rootfs_total.0 += bytes;
                rootfs_total.1 += inodes;
                c["rootfs"] = usage(x.image_fs, x, (bytes, inodes));
            }
            containers.push(c);
        }
        let mut p = json!({
            "podRef": {"name": name, "namespace": namespace, "uid": uid},
            "startTime": start,
            "containers": containers,
        });
        if let Some(e) = pod_cg {
            p["cpu"] = cpu(e, x);
            p["memory"] = memory(e, x, None);
            p["network"] = network(&e.network, x);
            let procs: u64 = mine.iter().map(|c| c.stats.pids.current).sum();
            p["process_stats"] = json!({"process_count": procs});
        }
        let mut vol_total = (0, 0);
        let mut volumes = Vec::new();
        for (vname, bytes, inodes, memory) in x.volumes.get(uid).into_iter().flatten() {
            // Disk-backed emptyDirs count as ephemeral storage; tmpfs ones
            // are memory (kubelet does the same).
            if !memory {
                vol_total.0 += bytes;
                vol_total.1 += inodes;
            }
            let mut v = usage(x.node_fs, x, (*bytes, *inodes));
            v["name"] = json!(vname);
            volumes.push(v);
        }
        if !volumes.is_empty() {
            p["volume"] = json!(volumes);
        }
        if x.node_fs.is_some() {
            // kubelet: rootfs + logs + local (emptyDir) volumes.
            let total = (
                log_total.0 + rootfs_total.0 + vol_total.0,
                log_total.1 + rootfs_total.1 + vol_total.1,
            );
            p["ephemeral-storage"] = usage(x.node_fs, x, total);
        }
        pods.push(p);
    }
    json!({"node": node, "pods": pods})
}

/// Bytes (allocated) and inodes under `dir`.
pub fn du(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut bytes, mut inodes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            bytes += m.blocks() * 512;
            inodes += 1;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    (bytes, inodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::cadvisor::Labels;

    fn entry(id: &str, container: &str, pod: &str, cpu_ns: u64, ws: u64) -> Entry {
        let mut e = Entry {
            labels: Labels {
                name: id.rsplit('/').next().unwrap_or("").into(),
                id: id.into(),
                container: container.into(),
                pod: pod.into(),
                namespace: if pod.is_empty() { "" } else { "default" }.into(),
                ..Default::default()
            },
            ..Default::default()
        };
        e.stats.cpu.usage_ns = cpu_ns;
        e.stats.memory.working_set = ws;
        e.stats.memory.usage = ws + 10;
        e.stats.pids.current = 2;
        e
    }

    #[test]
    fn kubelet_summary_shape() {
        let mut snap = Snapshot {
            entries: vec![
                entry("/", "", "", 9_000, 1000),
                entry("/k/podu", "", "p", 5_000, 300),
                entry("/k/podu/c1", "web", "p", 4_000, 200),
            ],
            ..Default::default()
        };
        snap.machine.memory_bytes = 4000;
        snap.entries[2].stats.memory.limit = Some(1000);
        let x = Extras {
            node_name: "edge".into(),
            now: "2026-11-22T00:00:00Z".into(),
            boot_time: "2026-11-21T00:00:00Z".into(),
            nano_cores: HashMap::from([("/k/podu/c1".to_string(), 250_000_000)]),
            node_fs: Some(Fs {
                capacity: 100,
                available: 60,
                used: 40,
                inodes: 10,
                inodes_free: 4,
            }),
            pid_max: 4194304,
            processes: 99,
            pods: HashMap::from([(
                "u".to_string(),
                (
                    "p".to_string(),
                    "default".to_string(),
                    "2026-11-21T12:00:00Z".to_string(),
                ),
            )]),
            logs: HashMap::from([(("u".to_string(), "web".to_string()), (4096, 2))]),
            rootfs: HashMap::from([("c1".to_string(), (8192, 3))]),
            volumes: HashMap::from([(
                "u".to_string(),
                vec![
                    ("cache".to_string(), 1024, 1, false),
                    ("shm".to_string(), 2048, 1, true),
                ],
            )]),
            ..Default::default()
        };
        let v = build(&snap, &x, &[]);
        assert_eq!(v["node"]["nodeName"], "edge");
        assert_eq!(v["node"]["cpu"]["usageCoreNanoSeconds"], 9_000);
        assert_eq!(v["node"]["memory"]["availableBytes"], 3000);
        assert_eq!(v["node"]["fs"]["inodesUsed"], 6);
        assert_eq!(v["node"]["rlimit"]["curproc"], 99);
        let p = &v["pods"][0];
        assert_eq!(p["podRef"]["uid"], "u");
        assert_eq!(p["memory"]["workingSetBytes"], 300);
        assert_eq!(p["process_stats"]["process_count"], 2);
        assert_eq!(p["ephemeral-storage"]["usedBytes"], 4096 + 8192 + 1024);
        assert_eq!(p["volume"][1]["name"], "shm");
        assert_eq!(p["volume"][1]["usedBytes"], 2048);
        let c = &p["containers"][0];
        assert_eq!(c["name"], "web");
        assert_eq!(c["cpu"]["usageNanoCores"], 250_000_000);
        assert_eq!(c["memory"]["availableBytes"], 800);
        assert_eq!(c["logs"]["usedBytes"], 4096);
        assert_eq!(c["rootfs"]["usedBytes"], 8192);
        assert!(p["cpu"].get("usageNanoCores").is_none(), "no rate yet");
    }
}
