//! Node-pressure eviction, kubelet's `pkg/kubelet/eviction` as pure logic:
//! signals observed from the same readings as `/stats/summary`, hard and
//! soft thresholds (grace periods, minimum reclaim), node conditions held
//! for the pressure transition period, the ranking of pods and kubelet's
//! eviction message. Admission under pressure is [`crate::lifecycle::predicate`]'s; the
//! loop that reads, reclaims and evicts is [`crate::eviction`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use edge_config::quantity::Threshold as Amount;
use k8s_openapi::api::core::v1::Pod;

use crate::qos::quantity;
use crate::statsapi::{FsStats, MemoryStats, Summary};

/// An eviction signal (kubelet's `evictionapi.Signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    MemoryAvailable,
    NodefsAvailable,
    NodefsInodesFree,
    ImagefsAvailable,
    ImagefsInodesFree,
    PidAvailable,
}

impl Signal {
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodefsAvailable,
        Signal::NodefsInodesFree,
        Signal::ImagefsAvailable,
        Signal::ImagefsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodefsAvailable => "nodefs.available",
            Signal::NodefsInodesFree => "nodefs.inodesFree",
            Signal::ImagefsAvailable => "imagefs.available",
            Signal::ImagefsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The node condition this signal drives.
    pub fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable => Condition::MemoryPressure,
            Signal::PidAvailable => Condition::PidPressure,
            _ => Condition::DiskPressure,
        }
    }

    /// The resource reclaimed (kubelet's `signalToResource`).
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory",
            Signal::NodefsAvailable | Signal::ImagefsAvailable => "ephemeral-storage",
            Signal::NodefsInodesFree | Signal::ImagefsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    /// Whether the node itself can reclaim it (unused images and dead
    /// containers) before any pod is evicted.
    pub fn node_reclaimable(self) -> bool {
        !matches!(self, Signal::MemoryAvailable | Signal::PidAvailable)
    }
}

/// A node pressure condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl Condition {
    pub fn name(self) -> &'static str {
        match self {
            Condition::MemoryPressure => "MemoryPressure",
            Condition::DiskPressure => "DiskPressure",
            Condition::PidPressure => "PIDPressure",
        }
    }
}

/// One threshold: hard when `grace` is None.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: Amount,
    pub grace: Option<Duration>,
    pub min_reclaim: Option<Amount>,
}

impl Threshold {
    pub fn hard(&self) -> bool {
        self.grace.is_none()
    }

    fn key(&self) -> (Signal, bool) {
        (self.signal, self.hard())
    }

    /// The threshold in the signal's units, given the capacity.
    pub fn quantity(&self, capacity: u64) -> u64 {
        self.value.of(capacity)
    }
}

/// The thresholds of a config: hard, soft with their grace periods, and
/// the minimum reclaims, as kubelet's `ParseThresholdConfig`.
pub fn thresholds(c: &edge_config::Config) -> Vec<Threshold> {
    let e = &c.eviction;
    let reclaim = |s: &str| e.minimum_reclaim.get(s).copied();
    let mut out = Vec::new();
    for (s, v) in &e.hard {
        if let Some(signal) = Signal::parse(s) {
            out.push(Threshold {
                signal,
                value: *v,
                grace: None,
                min_reclaim: reclaim(s),
            });
        }
    }
    for (s, v) in &e.soft {
        if let Some(signal) = Signal::parse(s) {
            out.push(Threshold {
                signal,
                value: *v,
                grace: Some(e.soft_grace.get(s).copied().unwrap_or_default()),
                min_reclaim: reclaim(s),
            });
        }
    }
    out
}

/// What a signal reads now: available of capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observation {
    pub available: u64,
    pub capacity: u64,
}

/// A pod's usage, from its summary entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub memory: u64,
    pub ephemeral: u64,
    pub processes: u64,
    pub containers: Vec<ContainerUsage>,
}

/// A container's usage, from its summary entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    pub working_set: u64,
    /// rootfs + logs.
    pub ephemeral: u64,
}

/// The signals and each pod's usage (by UID), from a `/stats/summary`
/// (kubelet's `makeSignalObservations`). A figure the summary lacks gives
/// no signal (never "0 available").
pub fn observe(summary: &Summary) -> (BTreeMap<Signal, Observation>, HashMap<String, Usage>) {
    let node = &summary.node;
    let mut obs = BTreeMap::new();
    let mut put = |s: Signal, available: Option<u64>, capacity: Option<u64>| {
        if let (Some(available), Some(capacity)) = (available, capacity) {
            obs.insert(
                s,
                Observation {
                    available,
                    capacity,
                },
            );
        }
    };
    if let Some(mem) = &node.memory {
        put(
            Signal::MemoryAvailable,
            mem.available_bytes,
            mem.available_bytes
                .zip(mem.working_set_bytes)
                .map(|(a, w)| a + w),
        );
    }
    if let Some(fs) = &node.fs {
        put(
            Signal::NodefsAvailable,
            fs.available_bytes,
            fs.capacity_bytes,
        );
        put(Signal::NodefsInodesFree, fs.inodes_free, fs.inodes);
    }
    if let Some(img) = node.runtime.as_ref().and_then(|r| r.image_fs.as_ref()) {
        put(
            Signal::ImagefsAvailable,
            img.available_bytes,
            img.capacity_bytes,
        );
        put(Signal::ImagefsInodesFree, img.inodes_free, img.inodes);
    }
    if let Some(rl) = &node.rlimit {
        put(
            Signal::PidAvailable,
            rl.maxpid.zip(rl.curproc).map(|(m, c)| m.saturating_sub(c)),
            rl.maxpid,
        );
    }
    let used = |fs: &Option<FsStats>| fs.as_ref().and_then(|f| f.used_bytes).unwrap_or(0);
    let working_set =
        |m: &Option<MemoryStats>| m.as_ref().and_then(|m| m.working_set_bytes).unwrap_or(0);
    let mut pods = HashMap::new();
    for p in &summary.pods {
        let containers = p
            .containers
            .iter()
            .map(|c| ContainerUsage {
                name: c.name.clone(),
                working_set: working_set(&c.memory),
                ephemeral: used(&c.rootfs) + used(&c.logs),
            })
            .collect();
        pods.insert(
            p.pod_ref.uid.clone(),
            Usage {
                memory: working_set(&p.memory),
                ephemeral: used(&p.ephemeral_storage),
                processes: p
                    .process_stats
                    .as_ref()
                    .and_then(|s| s.process_count)
                    .unwrap_or(0),
                containers,
            },
        );
    }
    (obs, pods)
}

/// The thresholds met by `obs` (kubelet's `thresholdsMet`); with
/// `min_reclaim`, a threshold stays met until its minimum reclaim is
/// available beyond it.
pub fn met(
    thresholds: &[Threshold],
    obs: &BTreeMap<Signal, Observation>,
    min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(o) = obs.get(&t.signal) else {
                return false;
            };
            let mut q = t.quantity(o.capacity);
            if min_reclaim && let Some(r) = &t.min_reclaim {
                q = q.saturating_add(r.of(o.capacity));
            }
            o.available < q
        })
        .cloned()
        .collect()
}

/// What one pass of the manager decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pass {
    /// The node conditions to report (held for the transition period).
    pub conditions: BTreeSet<Condition>,
    /// The threshold to reclaim for now (its grace period over), memory first.
    pub reclaim: Option<Threshold>,
}

/// The manager's memory between passes. Times are since any fixed origin.
#[derive(Debug, Default)]
pub struct State {
    /// Thresholds met (grace over) at the last pass: they stay met until
    /// their minimum reclaim is satisfied.
    met: Vec<Threshold>,
    first_observed: HashMap<(Signal, bool), Duration>,
    condition_last_observed: HashMap<Condition, Duration>,
}

impl State {
    /// kubelet's `synchronize` up to the choice of what to reclaim.
    pub fn pass(
        &mut self,
        thresholds: &[Threshold],
        obs: &BTreeMap<Signal, Observation>,
        now: Duration,
        transition: Duration,
    ) -> Pass {
        let mut now_met = met(thresholds, obs, false);
        for t in met(&self.met, obs, true) {
            if !now_met.iter().any(|m| m.key() == t.key()) {
                now_met.push(t);
            }
        }
        self.first_observed
            .retain(|k, _| now_met.iter().any(|t| t.key() == *k));
        for t in &now_met {
            self.first_observed.entry(t.key()).or_insert(now);
            self.condition_last_observed
                .insert(t.signal.condition(), now);
        }
        self.condition_last_observed
            .retain(|_, at| now.saturating_sub(*at) < transition || *at == now);
        let conditions: BTreeSet<Condition> =
            self.condition_last_observed.keys().copied().collect();
        let mut acting: Vec<Threshold> = now_met
            .into_iter()
            .filter(|t| {
                let since = self.first_observed.get(&t.key()).copied().unwrap_or(now);
                now.saturating_sub(since) >= t.grace.unwrap_or_default()
            })
            .collect();
        // Memory first (kubelet's byEvictionPriority), then hard before soft.
        acting.sort_by_key(|t| (t.signal != Signal::MemoryAvailable, !t.hard(), t.signal));
        self.met = acting.clone();
        Pass {
            conditions,
            reclaim: acting.into_iter().next(),
        }
    }
}

/// A pod the manager may evict.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub uid: String,
    pub pod: std::sync::Arc<Pod>,
    pub usage: Option<Usage>,
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The pod's usage and request of what `signal` measures.
fn usage_and_request(signal: Signal, c: &Candidate) -> (u64, u64) {
    let r = crate::lifecycle::predicate::requests(&c.pod);
    let u = c.usage.as_ref();
    let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    match signal {
        Signal::MemoryAvailable => (u.map_or(0, |u| u.memory), clamp(r.memory)),
        Signal::PidAvailable => (u.map_or(0, |u| u.processes), 0),
        _ => (u.map_or(0, |u| u.ephemeral), clamp(r.ephemeral)),
    }
}

/// Ranks candidates for `signal`, first to evict first (kubelet's
/// `rankMemoryPressure`, `rankDiskPressureFunc`, `rankPIDPressure`):
/// pods without stats first, then those using more than they request, then
/// lower priority, then the larger usage above requests (for pids: the
/// larger process count).
pub fn rank(signal: Signal, pods: &mut [Candidate]) {
    pods.sort_by(|a, b| {
        let (ua, ra) = usage_and_request(signal, a);
        let (ub, rb) = usage_and_request(signal, b);
        let no_stats = a.usage.is_some().cmp(&b.usage.is_some());
        if signal == Signal::PidAvailable {
            return no_stats
                .then(priority(&a.pod).cmp(&priority(&b.pod)))
                .then(ub.cmp(&ua));
        }
        let exceeds = (ub > rb).cmp(&(ua > ra));
        let above = |u: u64, r: u64| i128::from(u) - i128::from(r);
        no_stats
            .then(exceeds)
            .then(priority(&a.pod).cmp(&priority(&b.pod)))
            .then(above(ub, rb).cmp(&above(ua, ra)))
    });
}

/// A byte count as a Kubernetes quantity prints it (BinarySI: the largest
/// power of 1024 that divides it).
pub fn binary_si(v: u64) -> String {
    const SUFFIX: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if v == 0 {
        return "0".into();
    }
    let mut n = v;
    let mut i = 0;
    while n.is_multiple_of(1024) && i < SUFFIX.len() {
        n /= 1024;
        i += 1;
    }
    if i == 0 {
        n.to_string()
    } else {
        format!("{n}{}", SUFFIX[i - 1])
    }
}

/// kubelet's `evictionMessage`: the resource, the threshold, what is
/// available, and each container using more than it requests.
pub fn message(t: &Threshold, obs: &BTreeMap<Signal, Observation>, c: &Candidate) -> String {
    let resource = t.signal.resource();
    let o = obs.get(&t.signal).copied().unwrap_or_default();
    let shown = |v: u64| match t.signal {
        Signal::MemoryAvailable | Signal::NodefsAvailable | Signal::ImagefsAvailable => {
            binary_si(v)
        }
        _ => v.to_string(),
    };
    let threshold = shown(t.quantity(o.capacity));
    let mut msg = format!(
        "The node was low on resource: {resource}. Threshold quantity: {threshold}, available: {}. ",
        shown(o.available)
    );
    let is_memory = t.signal == Signal::MemoryAvailable;
    if (is_memory || resource == "ephemeral-storage")
        && let Some(spec) = c.pod.spec.as_ref()
        && let Some(u) = &c.usage
    {
        for container in &spec.containers {
            let Some(cu) = u.containers.iter().find(|x| x.name == container.name) else {
                continue;
            };
            let (used, res) = if is_memory {
                (cu.working_set, "memory")
            } else {
                (cu.ephemeral, "ephemeral-storage")
            };
            let request = quantity(container, "requests", res).unwrap_or(0);
            if u128::from(used) > request {
                let req = container
                    .resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|r| r.get(res))
                    .map_or_else(|| "0".to_string(), |q| q.0.clone());
                msg.push_str(&format!(
                    "Container {} was using {}, request is {req}, has larger consumption of {resource}. ",
                    container.name,
                    binary_si(used)
                ));
            }
        }
    }
    msg
}

#[cfg(test)]
mod tests;
