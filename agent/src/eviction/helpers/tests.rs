use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::lifecycle::predicate::{SYSTEM_CRITICAL_PRIORITY, is_critical, under_pressure};

fn pod(name: &str, requests_memory: Option<&str>, priority: Option<i32>) -> Pod {
    let resources = requests_memory.map(|m| json!({"requests": {"memory": m}}));
    let mut c = json!({"name": "app", "image": "busybox"});
    if let Some(r) = resources {
        c["resources"] = r;
    }
    let mut p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {"containers": [c]},
    }))
    .expect("pod");
    if let Some(s) = p.spec.as_mut() {
        s.priority = priority;
    }
    p
}

fn cand(p: Pod, memory: Option<u64>) -> Candidate {
    Candidate {
        uid: p.metadata.uid.clone().unwrap_or_default(),
        usage: memory.map(|m| Usage {
            memory: m,
            containers: vec![ContainerUsage {
                name: "app".into(),
                working_set: m,
                ephemeral: 0,
            }],
            ..Default::default()
        }),
        pod: Arc::new(p),
    }
}

fn mem(available: u64) -> BTreeMap<Signal, Observation> {
    BTreeMap::from([(
        Signal::MemoryAvailable,
        Observation {
            available,
            capacity: 1000 << 20,
        },
    )])
}

fn hard(signal: Signal, value: Amount) -> Threshold {
    Threshold {
        signal,
        value,
        grace: None,
        min_reclaim: None,
    }
}

const MI: u64 = 1 << 20;
const MIB: u128 = 1 << 20;

#[test]
fn signals_come_from_the_summary() {
    let summary = json!({
        "node": {
            "memory": {"availableBytes": 300, "workingSetBytes": 700},
            "fs": {"availableBytes": 10, "capacityBytes": 100, "inodesFree": 5, "inodes": 50},
            "runtime": {"imageFs": {"availableBytes": 20, "capacityBytes": 200, "inodesFree": 6, "inodes": 60}},
            "rlimit": {"maxpid": 4096, "curproc": 96},
        },
        "pods": [{
            "podRef": {"uid": "u1"},
            "memory": {"workingSetBytes": 42},
            "ephemeral-storage": {"usedBytes": 7},
            "process_stats": {"process_count": 3},
            "containers": [{"name": "app", "memory": {"workingSetBytes": 40}, "rootfs": {"usedBytes": 2}, "logs": {"usedBytes": 1}}],
        }],
    });
    let summary: Summary = serde_json::from_value(summary).expect("kubelet's shape");
    let (obs, pods) = observe(&summary);
    let o = |s| obs[&s];
    assert_eq!(
        o(Signal::MemoryAvailable),
        Observation {
            available: 300,
            capacity: 1000
        }
    );
    assert_eq!(
        o(Signal::NodefsAvailable),
        Observation {
            available: 10,
            capacity: 100
        }
    );
    assert_eq!(
        o(Signal::NodefsInodesFree),
        Observation {
            available: 5,
            capacity: 50
        }
    );
    assert_eq!(
        o(Signal::ImagefsAvailable),
        Observation {
            available: 20,
            capacity: 200
        }
    );
    assert_eq!(
        o(Signal::ImagefsInodesFree),
        Observation {
            available: 6,
            capacity: 60
        }
    );
    assert_eq!(
        o(Signal::PidAvailable),
        Observation {
            available: 4000,
            capacity: 4096
        }
    );
    let u = &pods["u1"];
    assert_eq!((u.memory, u.ephemeral, u.processes), (42, 7, 3));
    assert_eq!(
        u.containers,
        vec![ContainerUsage {
            name: "app".into(),
            working_set: 40,
            ephemeral: 3
        }]
    );
    // A summary without a section has no such signal (never "0 available").
    let (obs, _) = observe(&Summary::default());
    assert!(obs.is_empty());
}

#[test]
fn thresholds_in_bytes_and_percent_and_minimum_reclaim() {
    let t = hard(Signal::MemoryAvailable, Amount::Quantity(100 * MIB));
    assert_eq!(met(std::slice::from_ref(&t), &mem(99 * MI), false).len(), 1);
    assert!(met(std::slice::from_ref(&t), &mem(100 * MI), false).is_empty());
    let pct = hard(Signal::MemoryAvailable, Amount::Percent(10.0));
    assert_eq!(
        met(std::slice::from_ref(&pct), &mem(99 * MI), false).len(),
        1,
        "10 % of 1000Mi"
    );
    assert!(met(&[pct], &mem(101 * MI), false).is_empty());
    let with_reclaim = Threshold {
        min_reclaim: Some(Amount::Quantity(50 * MIB)),
        ..t
    };
    assert!(met(std::slice::from_ref(&with_reclaim), &mem(120 * MI), false).is_empty());
    assert_eq!(
        met(&[with_reclaim], &mem(120 * MI), true).len(),
        1,
        "until 150Mi"
    );
}

#[test]
fn grace_periods_transition_period_and_min_reclaim_across_passes() {
    let s = |secs| Duration::from_secs(secs);
    let soft = Threshold {
        signal: Signal::MemoryAvailable,
        value: Amount::Quantity(200 * MIB),
        grace: Some(s(30)),
        min_reclaim: Some(Amount::Quantity(100 * MIB)),
    };
    let list = [soft];
    let mut st = State::default();
    // Met at 0 s: the condition at once, no eviction before the grace period.
    let p = st.pass(&list, &mem(150 * MI), s(0), s(60));
    assert_eq!(p.conditions, BTreeSet::from([Condition::MemoryPressure]));
    assert_eq!(p.reclaim, None);
    assert_eq!(st.pass(&list, &mem(150 * MI), s(20), s(60)).reclaim, None);
    let p = st.pass(&list, &mem(150 * MI), s(30), s(60));
    assert_eq!(p.reclaim.map(|t| t.signal), Some(Signal::MemoryAvailable));
    // Above the threshold but short of the minimum reclaim: still reclaiming.
    let p = st.pass(&list, &mem(250 * MI), s(40), s(60));
    assert!(p.reclaim.is_some(), "250Mi < 200Mi + 100Mi");
    // Reclaimed: nothing to do, the condition stays for the transition period.
    let p = st.pass(&list, &mem(400 * MI), s(50), s(60));
    assert_eq!(p.reclaim, None);
    assert_eq!(p.conditions, BTreeSet::from([Condition::MemoryPressure]));
    let p = st.pass(&list, &mem(400 * MI), s(100), s(60));
    assert!(p.conditions.is_empty(), "60 s after it was last met");
    // Met again: the grace period starts over.
    assert_eq!(st.pass(&list, &mem(150 * MI), s(110), s(60)).reclaim, None);
}

#[test]
fn memory_is_reclaimed_before_disk_and_hard_before_soft() {
    let mut obs = mem(10 * MI);
    obs.insert(
        Signal::NodefsAvailable,
        Observation {
            available: 1,
            capacity: 100,
        },
    );
    let list = [
        hard(Signal::NodefsAvailable, Amount::Percent(10.0)),
        hard(Signal::MemoryAvailable, Amount::Quantity(100 * MIB)),
    ];
    let p = State::default().pass(&list, &obs, Duration::ZERO, Duration::ZERO);
    assert_eq!(p.reclaim.map(|t| t.signal), Some(Signal::MemoryAvailable));
    assert_eq!(
        p.conditions,
        BTreeSet::from([Condition::MemoryPressure, Condition::DiskPressure])
    );
}

#[test]
fn ranking_under_memory_pressure_is_kubelets() {
    let uids = |v: &[Candidate]| v.iter().map(|c| c.uid.clone()).collect::<Vec<_>>();
    // BestEffort using 10Mi (above its zero request) before a Burstable
    // using 300Mi within its 500Mi request.
    let mut v = vec![
        cand(pod("burstable", Some("500Mi"), None), Some(300 * MI)),
        cand(pod("besteffort", None, None), Some(10 * MI)),
    ];
    rank(Signal::MemoryAvailable, &mut v);
    assert_eq!(uids(&v), ["besteffort", "burstable"]);
    // Both above requests: lower priority first, then more above requests.
    let mut v = vec![
        cand(pod("big", None, Some(10)), Some(900 * MI)),
        cand(pod("low-small", None, Some(0)), Some(10 * MI)),
        cand(pod("low-big", Some("100Mi"), Some(0)), Some(400 * MI)),
    ];
    rank(Signal::MemoryAvailable, &mut v);
    assert_eq!(uids(&v), ["low-big", "low-small", "big"]);
    // No stats: first.
    let mut v = vec![
        cand(pod("measured", None, None), Some(10 * MI)),
        cand(pod("unknown", None, None), None),
    ];
    rank(Signal::MemoryAvailable, &mut v);
    assert_eq!(uids(&v), ["unknown", "measured"]);
}

#[test]
fn the_message_is_kubelets() {
    let t = hard(Signal::MemoryAvailable, Amount::Quantity(100 * MIB));
    let c = cand(pod("p", Some("64Mi"), None), Some(200 * MI));
    assert_eq!(
        message(&t, &mem(50 * MI), &c),
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
         Container app was using 200Mi, request is 64Mi, has larger consumption of memory. "
    );
    let within = cand(pod("p", Some("512Mi"), None), Some(200 * MI));
    assert_eq!(
        message(&t, &mem(51_200 * 1024 + 1), &within),
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 52428801. "
    );
    assert_eq!(binary_si(1536), "1536");
    assert_eq!(binary_si(2048), "2Ki");
    assert_eq!(binary_si(0), "0");
}

#[test]
fn admission_under_pressure_is_kubelets_and_critical_pods_are_spared() {
    let set = |v: &[&str]| {
        v.iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<String>>()
    };
    let memory = set(&["MemoryPressure"]);
    let disk = set(&["DiskPressure"]);
    let best = pod("be", None, None);
    let burst = pod("bu", Some("10Mi"), None);
    assert_eq!(under_pressure(&BTreeSet::new(), &best), None);
    let e = under_pressure(&memory, &best).expect("BestEffort under memory pressure");
    assert_eq!(e.reason, "Evicted");
    assert_eq!(e.message, "The node had condition: [MemoryPressure]. ");
    assert_eq!(under_pressure(&memory, &burst), None);
    let mut tolerant = best.clone();
    if let Some(s) = tolerant.spec.as_mut() {
        s.tolerations = Some(vec![serde_json::from_value(json!({
            "key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"
        }))
        .expect("toleration")]);
    }
    assert_eq!(under_pressure(&memory, &tolerant), None);
    assert!(
        under_pressure(&disk, &burst).is_some(),
        "disk pressure refuses every pod"
    );
    let both = set(&["MemoryPressure", "DiskPressure"]);
    assert_eq!(
        under_pressure(&both, &burst).expect("both").message,
        "The node had condition: [DiskPressure MemoryPressure]. "
    );
    // Static and system-critical pods: always admitted, never evicted.
    let mut stat = best.clone();
    stat.metadata.annotations = Some(BTreeMap::from([(
        crate::config::manifest::CONFIG_SOURCE.to_string(),
        "file".to_string(),
    )]));
    assert!(is_critical(&stat));
    assert_eq!(under_pressure(&disk, &stat), None);
    let critical = pod("c", None, Some(SYSTEM_CRITICAL_PRIORITY));
    assert!(is_critical(&critical));
    assert!(!is_critical(&best));
}
