use super::*;

fn pod(init: &[(&str, &str, u32)], app: &[(&str, &str, u32)]) -> Pod {
    let c = |(name, res, n): &(&str, &str, u32)| {
        serde_json::json!({
            "name": name,
            "image": "busybox",
            "resources": {"limits": {*res: n.to_string(), "cpu": "1"}},
        })
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "uid": "u1"},
        "spec": {
            "initContainers": init.iter().map(c).collect::<Vec<_>>(),
            "containers": app.iter().map(c).collect::<Vec<_>>(),
        },
    }))
    .expect("pod")
}

fn serial(n: usize) -> PodDevices {
    let mut d = PodDevices::default();
    d.set_devices(
        "devices.picolet.io/serial",
        (0..n).map(|i| (format!("tty{i}"), true)).collect(),
    );
    d
}

fn hold(d: &mut PodDevices, uid: &str, container: &str, ids: &[&str]) {
    d.allocated.insert(
        (
            uid.into(),
            container.into(),
            "devices.picolet.io/serial".into(),
        ),
        Allocation {
            ids: ids.iter().map(|s| s.to_string()).collect(),
            response: Vec::new(),
        },
    );
}

#[test]
fn extended_resources_are_domain_prefixed_outside_kubernetes_io() {
    assert!(is_extended("devices.picolet.io/serial"));
    assert!(is_extended("squat.ai/serial"));
    assert!(is_extended("nvidia.com/gpu"));
    assert!(!is_extended("cpu"));
    assert!(!is_extended("hugepages-2Mi"));
    assert!(!is_extended("kubernetes.io/something"));
    assert!(!is_extended("node.kubernetes.io/x"));
    assert!(!is_extended("requests.nvidia.com/gpu"));
    assert!(!is_extended("nvidia.com/"));
}

#[test]
fn requests_come_from_limits_init_containers_first() {
    let p = pod(
        &[("setup", "devices.picolet.io/serial", 1)],
        &[("main", "devices.picolet.io/serial", 2)],
    );
    let r = requests(&p);
    assert_eq!(
        r,
        [
            Request {
                container: "setup".into(),
                init: true,
                resource: "devices.picolet.io/serial".into(),
                count: 1
            },
            Request {
                container: "main".into(),
                init: false,
                resource: "devices.picolet.io/serial".into(),
                count: 2
            },
        ]
    );
}

#[test]
fn healthy_free_devices_are_given_in_id_order_and_not_twice() {
    let mut d = serial(3);
    d.devices
        .get_mut("devices.picolet.io/serial")
        .expect("resource")
        .insert("tty1".into(), false);
    hold(&mut d, "other", "main", &["tty0"]);
    assert_eq!(d.free("devices.picolet.io/serial"), ["tty2"]);
    let p = pod(&[], &[("main", "devices.picolet.io/serial", 1)]);
    let plan = d.plan("u1", &requests(&p)).expect("fits");
    assert_eq!(plan[0].ids, ["tty2"]);
    // Two wanted, one healthy and free: kubelet's admission error.
    let p = pod(&[], &[("main", "devices.picolet.io/serial", 2)]);
    let e = d.plan("u1", &requests(&p)).expect_err("short");
    assert_eq!(e.reason(), "UnexpectedAdmissionError");
    assert_eq!(
        e.to_string(),
        "Allocate failed due to requested number of devices unavailable for devices.picolet.io/serial. Requested: 2, Available: 1, which is unexpected"
    );
    assert_eq!(d.capacity()["devices.picolet.io/serial"], (3, 2));
}

#[test]
fn a_resource_no_plugin_serves_is_out_of_it() {
    let d = serial(1);
    let p = pod(&[], &[("main", "vendor.example/fpga", 1)]);
    let e = d.plan("u1", &requests(&p)).expect_err("unknown");
    assert_eq!(e.reason(), "OutOfvendor.example/fpga");
    assert_eq!(
        e.to_string(),
        "Node didn't have enough resource: vendor.example/fpga, requested: 1, used: 0, capacity: 0"
    );
}

#[test]
fn app_containers_reuse_their_init_containers_devices() {
    let d = serial(2);
    let p = pod(
        &[
            ("a", "devices.picolet.io/serial", 1),
            ("b", "devices.picolet.io/serial", 1),
        ],
        &[
            ("main", "devices.picolet.io/serial", 1),
            ("side", "devices.picolet.io/serial", 1),
        ],
    );
    let plan = d.plan("u1", &requests(&p)).expect("fits");
    let ids: Vec<(&str, Vec<String>)> = plan
        .iter()
        .map(|p| (p.request.container.as_str(), p.ids.clone()))
        .collect();
    assert_eq!(
        ids,
        [
            ("a", vec!["tty0".to_string()]),
            ("b", vec!["tty0".to_string()]),
            ("main", vec!["tty0".to_string()]),
            ("side", vec!["tty1".to_string()]),
        ]
    );
    // One device: init and app share it, a second app container cannot.
    let d = serial(1);
    let e = d.plan("u1", &requests(&p)).expect_err("short");
    assert!(
        matches!(e, Shortage::Unavailable { available: 0, .. }),
        "{e}"
    );
}

#[test]
fn held_devices_are_kept_and_given_back_when_the_pod_goes() {
    let mut d = serial(2);
    hold(&mut d, "u1", "main", &["tty1"]);
    let p = pod(&[], &[("main", "devices.picolet.io/serial", 1)]);
    assert_eq!(d.plan("u1", &requests(&p)).expect("held"), []);
    assert_eq!(d.free("devices.picolet.io/serial"), ["tty0"]);
    assert!(d.retain_pods(&|uid| uid != "u1"));
    assert_eq!(d.free("devices.picolet.io/serial"), ["tty0", "tty1"]);
    assert!(!d.retain_pods(&|_| true));
}

#[test]
fn a_gone_plugins_devices_are_unhealthy_but_stay_held() {
    let mut d = serial(2);
    hold(&mut d, "u1", "main", &["tty0"]);
    d.mark_unhealthy("devices.picolet.io/serial");
    assert_eq!(d.capacity()["devices.picolet.io/serial"], (2, 0));
    assert!(d.free("devices.picolet.io/serial").is_empty());
    assert_eq!(d.of_container("u1", "main").len(), 1);
    d.forget_resource("devices.picolet.io/serial");
    assert!(!d.knows("devices.picolet.io/serial"));
}

#[test]
fn the_state_round_trips_through_json() {
    let mut d = serial(2);
    d.allocated.insert(
        (
            "u1".into(),
            "main".into(),
            "devices.picolet.io/serial".into(),
        ),
        Allocation {
            ids: vec!["tty0".into()],
            response: vec![0, 1, 2, 255],
        },
    );
    let text = serde_json::to_string(&Checkpoint::from(&d)).expect("encode");
    let back = PodDevices::from(serde_json::from_str::<Checkpoint>(&text).expect("decode"));
    assert_eq!(back.allocated, d.allocated);
    // Held still, but unhealthy until the plugin lists its devices again.
    assert_eq!(back.capacity()["devices.picolet.io/serial"], (2, 0));
    assert!(
        serde_json::from_str::<Checkpoint>(r#"{"version":1,"registered":{},"entries":[],"x":1}"#)
            .is_err()
    );
}
