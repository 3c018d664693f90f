//! End-to-end: device rules. An unprivileged container may create any
//! device node (CAP_MKNOD, `c *:* m`) but only open the standard ones and
//! the devices CRI gave it, with the access CRI gave; a privileged one opens
//! anything. On this machine (cgroup v1) libcontainer writes them to the
//! devices controller; on cgroup v2 the shim attaches an eBPF program with
//! the same rules (tests/vm/run.sh checks that in a v2 guest). Also drives
//! `picolet ctl exec` and `picolet ctl logs`, and ctl's stop, rm, stopp,
//! rmp, inspect, inspectp and stats on a pod nobody else manages. CDI
//! devices from the shim's spec folders, asked for by CRI field and by
//! annotation. Root.

use crate::common;

use common::cri;
use common::{Shim, test_images};
use cri_proto::v1::{CdiDevice, Device};

/// `picolet ctl exec ID -- sh -c SCRIPT`: (exit code, stdout, stderr).
fn sh(shim: &Shim, id: &str, script: &str) -> (i32, String, String) {
    let out = shim.ctl(&[
        "exec",
        "--timeout",
        "10",
        &id[..12],
        "--",
        "sh",
        "-c",
        script,
    ]);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn device_rules_are_enforced_and_ctl_exec_and_logs_work() {
    require_root!();
    let shim = Shim::start();
    shim.import(&test_images().busybox_layout);
    let mut c = cri::client(&shim.socket()).await;
    let logs = shim.dir.path().join("pods").join("devices");
    let pod = cri::pod("devices", &logs, false, &shim.cgroup_parent("devices"));
    let pod_id = cri::run_pod(&mut c, &pod).await;

    let plain = cri::container(
        "plain",
        "busybox",
        &[
            "sh",
            "-c",
            "echo started; echo warned >&2; sleep 0.3; echo second; exec sleep 60",
        ],
    );
    let plain = cri::create(&mut c, &pod_id, &pod, plain).await;
    cri::start(&mut c, &plain).await;
    let mut granted = cri::container("granted", "busybox", &["sleep", "60"]);
    // The host's /dev/kmsg (c 1:11), write-only: writing needs no capability.
    granted.devices = vec![Device {
        container_path: "/dev/mykmsg".into(),
        host_path: "/dev/kmsg".into(),
        permissions: "w".into(),
    }];
    let granted = cri::create(&mut c, &pod_id, &pod, granted).await;
    cri::start(&mut c, &granted).await;
    let mut privileged = cri::container("privileged", "busybox", &["sleep", "60"]);
    if let Some(sc) = privileged
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
    {
        sc.privileged = true;
    }
    let privileged = cri::create(&mut c, &pod_id, &pod, privileged).await;
    cri::start(&mut c, &privileged).await;

    // Standard nodes work; mknod of any node works; opening one does not.
    assert_eq!(
        sh(
            &shim,
            &plain,
            "echo x > /dev/null && head -c 4 /dev/zero | wc -c"
        )
        .1
        .trim(),
        "4"
    );
    let (code, out, _) = sh(&shim, &plain, "mknod /tmp/kmsg c 1 11 && echo made");
    assert_eq!((code, out.as_str()), (0, "made\n"));
    let (code, _, err) = sh(&shim, &plain, "echo picolet-devices-e2e > /tmp/kmsg");
    assert_ne!(code, 0);
    assert!(err.contains("Operation not permitted"), "{err}");
    let (code, _, err) = sh(&shim, &plain, "mknod /tmp/b b 7 0 && head -c 1 /tmp/b");
    assert_ne!(code, 0);
    assert!(
        err.contains("Operation not permitted"),
        "block device opened: {err}"
    );
    // The CRI device: w granted, r not.
    let (code, _, err) = sh(&shim, &granted, "echo picolet-devices-e2e > /dev/mykmsg");
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = sh(&shim, &granted, "head -c 1 /dev/mykmsg");
    assert_ne!(code, 0);
    assert!(err.contains("Operation not permitted"), "{err}");
    // Privileged: the node it made opens.
    let (code, _, err) = sh(
        &shim,
        &privileged,
        "mknod /tmp/kmsg c 1 11 && echo picolet-devices-e2e > /tmp/kmsg",
    );
    assert_eq!(code, 0, "{err}");

    // ctl exec passes the exit code and both streams on.
    let (code, out, err) = sh(&shim, &plain, "echo out; echo err >&2; exit 7");
    assert_eq!((code, out.as_str(), err.as_str()), (7, "out\n", "err\n"));
    let bad = shim.ctl(&["exec", "nope", "--", "true"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no container \"nope\""));
    // ctl ps names the image by its tag (as crictl), not its ID.
    let ps = String::from_utf8_lossy(&shim.ctl(&["ps"]).stdout).into_owned();
    let line = ps
        .lines()
        .find(|l| l.starts_with(&plain[..13]))
        .unwrap_or_else(|| panic!("{ps}"));
    assert!(line.contains("busybox:"), "{ps}");
    // ctl logs: the text of the records, stdout and stderr apart. The
    // execs above can all finish within the container's 0.3 s sleep: wait
    // for its second line rather than race it.
    common::eventually(
        "the second log line",
        std::time::Duration::from_secs(10),
        || {
            shim.ctl(&["logs", &plain[..12]])
                .stdout
                .ends_with(b"second\n")
        },
        || shim.log(),
    );
    let out = shim.ctl(&["logs", &plain[..12]]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "started\nsecond\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "warned\n");
    let out = shim.ctl(&["logs", "--tail", "1", &plain[..12]]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "second\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");

    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}

/// ctl removes what no agent will: inspect/inspectp print the
/// status as JSON, stats a row per running container, rm refuses a running
/// container without -f, stop and rm and rmp -f leave nothing.
#[tokio::test]
async fn ctl_inspects_stops_and_removes_an_orphaned_pod() {
    require_root!();
    let shim = Shim::start();
    shim.import(&test_images().busybox_layout);
    let mut c = cri::client(&shim.socket()).await;
    let logs = shim.dir.path().join("pods").join("orphan");
    let pod = cri::pod("orphan", &logs, false, &shim.cgroup_parent("orphan"));
    let pod_id = cri::run_pod(&mut c, &pod).await;
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let spec = cri::container(
            name,
            "busybox",
            &[
                "sh",
                "-c",
                "trap 'exit 0' TERM; while :; do sleep 0.1; done",
            ],
        );
        let id = cri::create(&mut c, &pod_id, &pod, spec).await;
        cri::start(&mut c, &id).await;
        ids.push(id);
    }
    let ok = |args: &[&str]| {
        let out = shim.ctl(args);
        assert!(out.status.success(), "ctl {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", &ids[0][..12]])).expect("json");
    assert_eq!(json["status"]["id"], ids[0].as_str());
    assert_eq!(json["status"]["state"], "CONTAINER_RUNNING");
    assert_eq!(json["status"]["metadata"]["name"], "a");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspectp", &pod_id[..12]])).expect("json");
    assert_eq!(json["status"]["state"], "SANDBOX_READY");
    assert_eq!(json["status"]["metadata"]["name"], "orphan");
    // The verbose info: the config the sandbox was made from, its files.
    let info = &json["info"]["info"];
    assert_eq!(info["config"]["metadata"]["name"], "orphan", "{json}");
    assert!(
        info["runtimeDir"]
            .as_str()
            .is_some_and(|d| d.contains(pod_id.as_str())),
        "{json}"
    );
    let stats = ok(&["stats"]);
    for id in &ids {
        let row = stats
            .lines()
            .find(|l| l.starts_with(&id[..13]))
            .unwrap_or_else(|| panic!("no row for {id}: {stats}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert!(cols[2].parse::<f64>().is_ok(), "CPU %: {row}");
        assert!(cols[3].ends_with('B'), "memory: {row}");
    }

    let refused = shim.ctl(&["rm", &ids[0][..12]]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is running: stop it first"));
    assert_eq!(ok(&["stop", "-t", "5", &ids[0][..12]]).trim(), ids[0]);
    assert_eq!(ok(&["rm", &ids[0][..12]]).trim(), ids[0]);
    let refused = shim.ctl(&["rmp", &pod_id[..12]]);
    assert!(!refused.status.success(), "a ready pod");
    assert!(ok(&["rmp", "-f", &pod_id[..12]]).contains(&pod_id));
    assert!(
        !ok(&["ps", "-a"]).contains(&ids[1][..13]),
        "its containers went with it"
    );
    assert!(!ok(&["pods"]).contains(&pod_id[..13]));
    // Teardown does not warn about cgroup controllers the host lacks.
    let log = shim.log();
    assert!(!log.contains("not supported on this system"), "{log}");
}

/// CDI: a spec file in the shim's `cdiSpecDirs` names a device node the
/// test made on the host (c 1:11, /dev/kmsg's numbers, outside the default
/// rules) at a path of its own in the container, with env and a read-only
/// mount. A container that asks for it (CRI `CDI_devices`, or a
/// `cdi.k8s.io/` annotation) has the node, writable, the env and the
/// mount; one that does not has none of them and the device cgroup keeps
/// it from opening a node it makes. A device in the later folder wins; a
/// broken file is skipped with a warning naming it; an unknown device
/// fails the create as NotFound, a malformed name as InvalidArgument.
#[tokio::test]
async fn cdi_devices_come_from_the_spec_folders() {
    require_root!();
    let host = tempfile::Builder::new()
        .prefix("picolet-cdi-e2e-")
        .tempdir()
        .expect("tempdir");
    let (etc, run) = (host.path().join("etc-cdi"), host.path().join("run-cdi"));
    let share = host.path().join("share");
    for d in [&etc, &run, &share] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::write(share.join("hello"), "from the host\n").expect("write");
    let node = host.path().join("kmsg-node");
    common::rt::mknod_kmsg(&node);
    // No type or numbers: the shim takes them from the host node.
    let spec = format!(
        "cdiVersion: 0.6.0\nkind: picolet.test/kmsg\n\
         containerEdits:\n  env: [CDI_COMMON=yes]\n  mounts:\n  \
         - {{hostPath: {share}, containerPath: /cdi-share, options: [ro, rbind]}}\n\
         devices:\n- name: k0\n  containerEdits:\n    env: [CDI_DEVICE=k0]\n    \
         deviceNodes: [{{path: /dev/cdi-kmsg, hostPath: {node}}}]\n\
         - name: which\n  containerEdits:\n    env: [CDI_WHICH=etc]\n",
        share = share.display(),
        node = node.display()
    );
    std::fs::write(etc.join("kmsg.yaml"), spec).expect("spec");
    std::fs::write(
        run.join("which.json"),
        r#"{"cdiVersion": "0.8.0", "kind": "picolet.test/kmsg", "devices": [{"name": "which", "containerEdits": {"env": ["CDI_WHICH=run"]}}]}"#,
    )
    .expect("spec");
    std::fs::write(etc.join("bad.yaml"), "cdiVersion: 0.6.0\nkind: nope\n").expect("spec");

    let shim = Shim::start_with_config(&format!(
        "picolet:\n  cdiSpecDirs: [{}, {}]\n",
        etc.display(),
        run.display()
    ));
    shim.import(&test_images().busybox_layout);
    let mut c = cri::client(&shim.socket()).await;
    let logs = shim.dir.path().join("pods").join("cdi");
    let pod = cri::pod("cdi", &logs, false, &shim.cgroup_parent("cdi"));
    let pod_id = cri::run_pod(&mut c, &pod).await;

    let mut by_field = cri::container("by-field", "busybox", &["sleep", "60"]);
    by_field.cdi_devices = vec![CdiDevice {
        name: "picolet.test/kmsg=k0".into(),
    }];
    let by_field = cri::create(&mut c, &pod_id, &pod, by_field).await;
    cri::start(&mut c, &by_field).await;
    let mut by_annotation = cri::container("by-annotation", "busybox", &["sleep", "60"]);
    by_annotation.annotations.insert(
        "cdi.k8s.io/e2e_k0".into(),
        "picolet.test/kmsg=k0,picolet.test/kmsg=which".into(),
    );
    let by_annotation = cri::create(&mut c, &pod_id, &pod, by_annotation).await;
    cri::start(&mut c, &by_annotation).await;
    let plain = cri::container("plain", "busybox", &["sleep", "60"]);
    let plain = cri::create(&mut c, &pod_id, &pod, plain).await;
    cri::start(&mut c, &plain).await;

    let check = "test -c /dev/cdi-kmsg && echo picolet-cdi-e2e > /dev/cdi-kmsg && \
                 echo \"$CDI_DEVICE $CDI_COMMON ${CDI_WHICH:-none}\" && cat /cdi-share/hello";
    for (id, which) in [(&by_field, "none"), (&by_annotation, "run")] {
        let (code, out, err) = sh(&shim, id, check);
        assert_eq!(code, 0, "{id}: {err}");
        assert_eq!(out, format!("k0 yes {which}\nfrom the host\n"), "{id}");
        let (code, _, err) = sh(&shim, id, "touch /cdi-share/x");
        assert_ne!(code, 0, "the mount is read-only");
        assert!(err.contains("Read-only file system"), "{err}");
    }
    let (code, out, _) = sh(
        &shim,
        &plain,
        "test -e /dev/cdi-kmsg || test -e /cdi-share || echo \"absent ${CDI_DEVICE:-unset}\"",
    );
    assert_eq!((code, out.as_str()), (0, "absent unset\n"));
    let (code, _, err) = sh(
        &shim,
        &plain,
        "mknod /tmp/k c 1 11 && echo picolet-cdi-e2e > /tmp/k",
    );
    assert_ne!(code, 0);
    assert!(err.contains("Operation not permitted"), "{err}");

    let mut unknown = cri::container("unknown", "busybox", &["true"]);
    unknown.cdi_devices = vec![CdiDevice {
        name: "picolet.test/kmsg=k9".into(),
    }];
    let e = cri::try_create(&mut c, &pod_id, &pod, unknown)
        .await
        .expect_err("an unknown device");
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    assert!(
        e.message()
            .contains("unresolvable CDI devices picolet.test/kmsg=k9"),
        "{e:?}"
    );
    let mut malformed = cri::container("malformed", "busybox", &["true"]);
    malformed
        .annotations
        .insert("cdi.k8s.io/x".into(), "kmsg".into());
    let e = cri::try_create(&mut c, &pod_id, &pod, malformed)
        .await
        .expect_err("a malformed name");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let log = shim.log();
    assert!(
        log.contains(&format!("{}: kind:", etc.join("bad.yaml").display())),
        "the broken file is named: {log}"
    );

    cri::teardown(&mut c, &pod_id).await;
    shim.assert_host_clean();
}
