use super::*;
use crate::devices::Access;

fn none(_: &'static str, _: &str) -> Option<String> {
    None
}

/// What kubelet asks of a Burstable container with 256 MiB, half a CPU.
fn kubelet() -> Resources {
    Resources {
        memory: Some(256 << 20),
        swap: Some(256 << 20),
        cpu_shares: Some(512),
        cpu_quota: Some(50_000),
        cpu_period: Some(100_000),
        devices: vec![Rule {
            allow: false,
            kind: None,
            major: None,
            minor: None,
            access: Access::ALL,
        }],
        ..Resources::default()
    }
}

fn files(writes: &[Write]) -> Vec<(&str, &str)> {
    writes
        .iter()
        .map(|w| (w.file.as_str(), w.value.as_str()))
        .collect()
}

#[test]
fn v1_create_writes_limits_then_the_device_list() {
    // A fresh cgroup's memory limit is the kernel's "unlimited".
    let fresh = |_: &'static str, f: &str| {
        (f == "memory.limit_in_bytes").then(|| "9223372036854771712\n".to_string())
    };
    let got = plan(&kubelet(), false, true, &fresh).expect("plan");
    let f = files(&got);
    assert_eq!(
        &f[..5],
        &[
            ("cpu.shares", "512"),
            ("cpu.cfs_period_us", "100000"),
            ("cpu.cfs_quota_us", "50000"),
            ("memory.limit_in_bytes", "268435456"),
            ("memory.memsw.limit_in_bytes", "268435456"),
        ]
    );
    assert_eq!(f[5], ("devices.deny", "a *:* rwm"));
    assert_eq!(f[6], ("devices.allow", "c 1:3 rwm"));
    assert!(f.contains(&("devices.allow", "c *:* m")));
    assert!(f.contains(&("devices.allow", "c 136:* rwm")));
    assert_eq!(got.len(), 5 + 1 + runtime_defaults().len());
    assert_eq!(got[3].controller, "memory");
    // An update writes no device list.
    let upd = plan(&kubelet(), false, false, &fresh).expect("plan");
    assert!(upd.iter().all(|w| w.controller != "devices"));
}

#[test]
fn v1_memsw_first_when_it_grows_past_the_current_limit() {
    let at = |v: &'static str| move |_: &'static str, _: &str| Some(format!("{v}\n"));
    let mut r = Resources {
        memory: Some(200),
        swap: Some(400),
        ..Resources::default()
    };
    let grow = plan(&r, false, false, &at("100")).expect("plan");
    assert_eq!(
        files(&grow),
        [
            ("memory.memsw.limit_in_bytes", "400"),
            ("memory.limit_in_bytes", "200")
        ]
    );
    let shrink = plan(&r, false, false, &at("1000")).expect("plan");
    assert_eq!(shrink[0].file, "memory.limit_in_bytes");
    // Unlimited memory without a swap figure: memsw unlimited first.
    r = Resources {
        memory: Some(-1),
        ..Resources::default()
    };
    assert_eq!(
        files(&plan(&r, false, false, &none).expect("plan")),
        [
            ("memory.memsw.limit_in_bytes", "-1"),
            ("memory.limit_in_bytes", "-1")
        ]
    );
    r.memory = Some(-2);
    assert!(plan(&r, false, false, &none).is_err());
}

#[test]
fn v1_refuses_unified_and_writes_pids_and_hugepages() {
    let r = Resources {
        pids: Some(-1),
        hugepages: vec![("2MB".into(), 4 << 20)],
        ..Resources::default()
    };
    assert_eq!(
        files(&plan(&r, false, false, &none).expect("plan")),
        [
            ("pids.max", "max"),
            ("hugetlb.2MB.limit_in_bytes", "4194304")
        ]
    );
    let u = Resources {
        unified: vec![("memory.high".into(), "1000".into())],
        ..Resources::default()
    };
    let e = plan(&u, false, false, &none).expect_err("v1").to_string();
    assert!(e.contains("unified[memory.high]"), "{e}");
}

#[test]
fn v2_converts_shares_swap_and_quota() {
    let got = plan(&kubelet(), true, true, &none).expect("plan");
    assert_eq!(
        files(&got),
        [
            ("cpu.weight", "59"),
            ("cpu.max", "50000 100000"),
            ("memory.swap.max", "0"),
            ("memory.max", "268435456"),
        ]
    );
    let mut r = Resources {
        memory: Some(100),
        swap: Some(50),
        ..Resources::default()
    };
    assert!(
        plan(&r, true, false, &none)
            .expect_err("swap < limit")
            .to_string()
            .contains("swap (50)")
    );
    r.memory = None;
    assert_eq!(
        plan(&r, true, false, &none),
        Err(PlanError::SwapWithoutLimit)
    );
    // A period alone keeps the quota in force.
    let now = |_: &'static str, f: &str| (f == "cpu.max").then(|| "25000 100000\n".to_string());
    let p = Resources {
        cpu_period: Some(50_000),
        cpu_quota: None,
        ..Resources::default()
    };
    assert_eq!(
        files(&plan(&p, true, false, &now).expect("plan")),
        [("cpu.max", "25000 50000")]
    );
    let q = Resources {
        cpu_quota: Some(-1),
        cpu_period: Some(100_000),
        ..Resources::default()
    };
    assert_eq!(
        files(&plan(&q, true, false, &none).expect("plan")),
        [("cpu.max", "max 100000")]
    );
}

#[test]
fn v2_unified_files_are_plain_names() {
    let mut r = Resources {
        unified: vec![("memory.high".into(), "max".into())],
        ..Resources::default()
    };
    assert_eq!(
        files(&plan(&r, true, false, &none).expect("plan")),
        [("memory.high", "max")]
    );
    for bad in ["../../../etc/passwd", "", ".hidden", "a/b"] {
        r.unified = vec![(bad.into(), "1".into())];
        assert!(plan(&r, true, false, &none).is_err(), "{bad:?}");
    }
}

#[test]
fn weights_as_runc_converts() {
    assert_eq!(shares_to_weight(0), 0);
    assert_eq!(shares_to_weight(2), 1);
    assert_eq!(shares_to_weight(1024), 100);
    assert_eq!(shares_to_weight(512), 59);
    assert_eq!(shares_to_weight(262_144), 10_000);
    assert_eq!(shares_to_weight(u64::MAX), 10_000);
}

#[test]
fn paths_stay_below_the_root() {
    assert!(rel("/kubepods/pod1/c1").is_ok());
    for bad in ["", "/", "/kubepods/../../etc", "/.."] {
        assert!(rel(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn v1_dirs_share_a_comount_and_cpuset_is_filled_down() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mount = |n: &str| tmp.path().join(n);
    let h = Hierarchy::V1(vec![
        ("cpu".into(), mount("cpu,cpuacct")),
        ("cpuacct".into(), mount("cpu,cpuacct")),
        ("cpuset".into(), mount("cpuset")),
    ]);
    let dirs = h.container_dirs("/k/p/c").expect("dirs");
    assert_eq!(dirs.len(), 2);
    assert_eq!(dirs[0].1, mount("cpu,cpuacct").join("k/p/c"));
    // cgroupfs makes each new directory's files, empty for cpuset.
    let cs = mount("cpuset");
    for d in ["", "k", "k/p", "k/p/c"] {
        fs::create_dir_all(cs.join(d)).expect("mkdir");
        for f in ["cpuset.cpus", "cpuset.mems"] {
            let v = if d.is_empty() { "0-1\n" } else { "" };
            fs::write(cs.join(d).join(f), v).expect("write");
        }
    }
    fs::write(cs.join("k/cpuset.mems"), "0\n").expect("write");
    fill_cpuset(&cs, Path::new("k/p/c")).expect("fill");
    let read = |p: &str| fs::read_to_string(cs.join(p)).expect("read");
    assert_eq!(read("k/p/c/cpuset.cpus"), "0-1");
    assert_eq!(read("k/cpuset.mems"), "0\n");
    assert_eq!(read("k/p/c/cpuset.mems"), "0");
}

#[test]
fn v2_enables_only_the_missing_controllers() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    fs::write(root.join("cgroup.controllers"), "cpuset cpu memory pids\n").expect("w");
    fs::write(root.join("cgroup.subtree_control"), "cpu memory pids\n").expect("w");
    fs::create_dir(root.join("k")).expect("mkdir");
    fs::write(root.join("k/cgroup.subtree_control"), "").expect("w");
    make_v2(root, Path::new("k/c")).expect("make");
    let read = |p: &str| fs::read_to_string(root.join(p)).expect("read");
    assert_eq!(read("cgroup.subtree_control"), "+cpuset");
    assert_eq!(
        read("k/cgroup.subtree_control"),
        "+cpuset +cpu +memory +pids"
    );
    assert!(root.join("k/c").is_dir());
    assert!(!root.join("k/c/cgroup.subtree_control").exists());
}

#[test]
fn write_errors_keep_the_path_the_value_and_the_io_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let h = Hierarchy::V2(tmp.path().to_path_buf());
    let r = Resources {
        pids: Some(5),
        ..Resources::default()
    };
    // No such cgroup: the open of pids.max fails.
    let e = h.update_container("/k/c", &r).expect_err("no cgroup");
    let file = tmp.path().join("k/c/pids.max");
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(
        e.to_string()
            .starts_with(&format!("{}: 5: ", file.display())),
        "{e}"
    );
    match e.get_ref().and_then(|i| i.downcast_ref::<WrappedIoError>()) {
        Some(WrappedIoError::Write {
            path,
            value,
            source,
        }) => {
            assert_eq!((path, value.as_str()), (&file, "5"));
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
        }
        other => panic!("{other:?}"),
    }
}
