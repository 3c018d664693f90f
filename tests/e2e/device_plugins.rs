//! End-to-end: the built-in generic device plugin through the device
//! plugin API. A static pod asking for `devices.picolet.io/serial: 1`
//! gets one of the device nodes the test made, unprivileged, and can
//! write to it; its neighbour without the request cannot open such a
//! node even after making one; a pod asking for more than is left is
//! refused with kubelet's reason; a node that appears or goes changes the
//! capacity within seconds; the pod keeps its device across an agent
//! restart; `picolet ctl devices` (the pod-resources API) shows who holds
//! which. The nodes are c 1:11 (/dev/kmsg, write-only for the test: a
//! write needs no capability). Root.

use std::time::Duration;

use crate::common;

use common::agent::{Agent, container, phase, running};

const T: Duration = Duration::from_secs(60);

/// A static pod whose container `main` runs `script` (the host dir at
/// /out), asking for `serial` devices when `serial` > 0.
fn pod(agent: &Agent, name: &str, serial: u32, script: &str) -> String {
    let limits = if serial > 0 {
        format!("    resources:\n      limits: {{devices.picolet.io/serial: {serial}}}\n")
    } else {
        String::new()
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 2\n  \
         volumes:\n  - name: out\n    hostPath: {{path: {host}, type: Directory}}\n  containers:\n  \
         - name: main\n    image: busybox:latest\n    imagePullPolicy: IfNotPresent\n    \
         command: [sh, -c, '{script}']\n    volumeMounts:\n    - {{name: out, mountPath: /out}}\n{limits}",
        host = agent.host_dir().display()
    )
}

fn capacity(agent: &Agent) -> (String, String) {
    let node: serde_json::Value = agent
        .get("/node")
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let of = |k: &str| {
        node["status"][k]["devices.picolet.io/serial"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    (of("capacity"), of("allocatable"))
}

#[test]
fn a_pod_gets_the_serial_port_it_asks_for_and_its_neighbour_cannot_open_one() {
    require_root!();
    let mut agent = Agent::prepare("");
    let devs = agent.dir().join("devs");
    std::fs::create_dir_all(&devs).expect("mkdir");
    for n in 0..2 {
        common::rt::mknod_kmsg(&devs.join(format!("ttyFAKE{n}")));
    }
    agent.picolet_extra = format!(
        "  devices:\n  - name: serial\n    groups:\n    - paths: [{{path: {}/ttyFAKE*, mountPath: /dev/serial/}}]\n",
        devs.display()
    );
    agent.spawn();
    agent.wait("two serial devices", T, || {
        capacity(&agent) == ("2".into(), "2".into())
    });

    agent.write_manifest(
        "granted.yaml",
        &pod(
            &agent,
            "granted",
            1,
            "ls /dev/serial > /out/granted-ls; echo picolet-device-e2e > /dev/serial/ttyFAKE0 && echo wrote > /out/granted; exec sleep 600",
        ),
    );
    let p = agent.wait_pod("granted", "running", T, running);
    let id = container(&p, "main")["containerID"].clone();
    let host = agent.host_dir();
    agent.wait("granted wrote", T, || host.join("granted").exists());
    assert_eq!(
        std::fs::read_to_string(host.join("granted-ls")).expect("ls"),
        "ttyFAKE0\n",
        "exactly its one device"
    );

    agent.write_manifest(
        "neighbour.yaml",
        &pod(
            &agent,
            "neighbour",
            0,
            "ls /dev/serial > /out/neighbour-ls 2>&1; mknod /tmp/k c 1 11; (echo picolet-device-e2e > /tmp/k) 2> /out/neighbour-err && echo wrote > /out/neighbour || echo denied > /out/neighbour; exec sleep 600",
        ),
    );
    agent.wait("neighbour tried", T, || host.join("neighbour").exists());
    assert_eq!(
        std::fs::read_to_string(host.join("neighbour")).expect("neighbour"),
        "denied\n"
    );
    let err = std::fs::read_to_string(host.join("neighbour-err")).expect("err");
    assert!(err.contains("Operation not permitted"), "{err}");
    let ls = std::fs::read_to_string(host.join("neighbour-ls")).expect("ls");
    assert!(ls.contains("No such file"), "{ls}");

    // `ctl devices` (the pod-resources API): one held by granted, one free.
    let socket = agent.shim.root().join("pod-resources").join("kubelet.sock");
    let out = std::process::Command::new(common::picolet())
        .args(["ctl", "devices", "--pod-resources"])
        .arg(&socket)
        .output()
        .expect("ctl devices");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let held: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("granted-e2e"))
        .collect();
    assert_eq!(held.len(), 1, "{table}");
    assert!(
        held[0].contains("ttyFAKE0") && held[0].ends_with("main"),
        "{table}"
    );
    let free: Vec<&str> = table.lines().filter(|l| l.ends_with(" -")).collect();
    assert_eq!(free.len(), 1, "{table}");
    assert!(free[0].contains("ttyFAKE1"), "{table}");

    // Two wanted, one left: refused, nothing run.
    agent.write_manifest("greedy.yaml", &pod(&agent, "greedy", 2, "exec sleep 600"));
    let g = agent.wait_pod("greedy", "refused", T, |p| phase(p) == "Failed");
    assert_eq!(g["status"]["reason"], "UnexpectedAdmissionError", "{g}");
    assert!(
        g["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Requested: 2, Available: 1")),
        "{g}"
    );

    // Hotplug: a third node appears, then goes.
    let third = devs.join("ttyFAKE2");
    common::rt::mknod_kmsg(&third);
    agent.wait("three devices", T, || capacity(&agent).0 == "3");
    std::fs::remove_file(&third).expect("rm");
    agent.wait("two devices again", T, || capacity(&agent).0 == "2");

    // A restarted agent: the pod keeps its container and its device.
    agent.kill9();
    agent.spawn();
    agent.wait("devices again", T, || {
        capacity(&agent) == ("2".into(), "2".into())
    });
    common::consistently(
        "granted keeps its container",
        Duration::from_secs(2),
        || {
            agent
                .pod("granted")
                .is_some_and(|p| running(&p) && container(&p, "main")["containerID"] == id)
        },
        || agent.log(),
    );
    let checkpoint = agent
        .shim
        .root()
        .join("device-plugins")
        .join("picolet_checkpoint");
    let text = std::fs::read_to_string(&checkpoint).expect("checkpoint");
    assert!(text.contains("ttyFAKE0"), "{text}");
}
