use std::path::{Path, PathBuf};

use cri_proto::v1::{CdiDevice, ContainerConfig};
use serde_json::json;

use super::*;

/// The shape `nvidia-ctk cdi generate` writes (trimmed): per-GPU devices
/// with their nodes, common nodes, env, library mounts and hooks.
const NVIDIA_YAML: &str = r#"---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/dri/card1
- name: GPU-6f8e2a3c-1b2d-4e5f-8a9b-0c1d2e3f4a5b
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
    hostPath: /dev/nvidia-uvm
    type: c
    major: 510
    minor: 0
    permissions: rw
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
    env:
    - NVIDIA_CTK_DEBUG=false
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    options:
    - ro
    - nosuid
    - nodev
    - bind
"#;

fn yaml() -> &'static Path {
    Path::new("/etc/cdi/nvidia.yaml")
}

#[test]
fn an_nvidia_ctk_spec_parses_as_yaml_and_as_json() {
    let spec = parse_spec(NVIDIA_YAML.as_bytes(), yaml()).expect("valid");
    assert_eq!(
        (spec.cdi_version.as_str(), spec.kind.as_str()),
        ("0.5.0", "nvidia.com/gpu")
    );
    assert_eq!(spec.devices.len(), 3);
    assert_eq!(spec.devices[0].name, "0");
    assert_eq!(
        spec.devices[0].container_edits.device_nodes[1].path,
        "/dev/dri/card1"
    );
    let common = &spec.container_edits;
    assert_eq!(common.env, ["NVIDIA_VISIBLE_DEVICES=void"]);
    assert_eq!(
        common.device_nodes[1],
        DeviceNode {
            path: "/dev/nvidia-uvm".into(),
            host_path: "/dev/nvidia-uvm".into(),
            kind: "c".into(),
            major: 510,
            minor: 0,
            permissions: "rw".into(),
            ..Default::default()
        }
    );
    assert_eq!(common.hooks[0].hook_name, "createContainer");
    assert_eq!(common.hooks[0].args[1], "update-ldcache");
    assert_eq!(common.mounts[0].options, ["ro", "nosuid", "nodev", "bind"]);

    // The same spec as JSON (nvidia-ctk --format=json), nulls as Go writes
    // empty lists.
    let mut v: serde_json::Value = serde_yaml::from_str(NVIDIA_YAML).expect("yaml");
    v["devices"][2]["annotations"] = serde_json::Value::Null;
    v["containerEdits"]["additionalGids"] = json!([44]);
    let text = serde_json::to_vec(&v).expect("json");
    let json = parse_spec(&text, Path::new("/var/run/cdi/nvidia.json")).expect("valid");
    assert_eq!(json.devices, spec.devices);
    assert_eq!(json.container_edits.additional_gids, [44]);
}

#[test]
fn errors_name_the_file_and_the_field() {
    let ok = "cdiVersion: 0.6.0\nkind: vendor.com/class\ndevices:\n- name: a\n  containerEdits:\n    env: [A=1]\n";
    assert!(parse_spec(ok.as_bytes(), yaml()).is_ok());
    let cases: &[(&str, &str, &str)] = &[
        (
            "cdiVersion: 0.6.0",
            "cdiVersion: 0.2.0",
            "/etc/cdi/nvidia.yaml: cdiVersion: \"0.2.0\" is not supported",
        ),
        (
            "vendor.com/class",
            "vendor.com",
            "/etc/cdi/nvidia.yaml: kind: \"vendor.com\" is not vendor/class",
        ),
        (
            "vendor.com/class",
            "1vendor.com/class",
            "kind: vendor \"1vendor.com\" should start with a letter",
        ),
        (
            "vendor.com/class",
            "vendor.com/cl@ss",
            "kind: invalid character '@' in class \"cl@ss\"",
        ),
        (
            "name: a",
            "name: a/b",
            "devices[0].name: invalid character '/' in device name \"a/b\"",
        ),
        (
            "name: a",
            "name: -a",
            "devices[0].name: device name \"-a\" should start with a letter or digit",
        ),
        (
            "env: [A=1]",
            "env: [A]",
            "devices[0].containerEdits.env[0]: \"A\" is not KEY=value",
        ),
        (
            "env: [A=1]",
            "env: [=1]",
            "devices[0].containerEdits.env[0]",
        ),
        (
            "env: [A=1]",
            "envs: [A=1]",
            "devices[0].containerEdits: unknown field `envs`",
        ),
        (
            "env: [A=1]",
            "deviceNodes: [{path: dev/x}]",
            "devices[0].containerEdits.deviceNodes[0].path: \"dev/x\" is not an absolute path",
        ),
        (
            "env: [A=1]",
            "deviceNodes: [{path: /dev/x, type: z}]",
            "deviceNodes[0].type: \"z\" (want b, c, u or p)",
        ),
        (
            "env: [A=1]",
            "deviceNodes: [{path: /dev/x, major: -1}]",
            "deviceNodes[0].major: -1:0 is negative",
        ),
        (
            "env: [A=1]",
            "deviceNodes: [{path: /dev/x, permissions: rx}]",
            "deviceNodes[0].permissions: \"rx\" (want r, w, m)",
        ),
        (
            "env: [A=1]",
            "deviceNodes: [{path: /dev/x, major: lots}]",
            "devices[0].containerEdits.deviceNodes[0].major: invalid type",
        ),
        (
            "env: [A=1]",
            "hooks: [{hookName: prestop, path: /x}]",
            "hooks[0].hookName: \"prestop\" (want one of prestart",
        ),
        (
            "env: [A=1]",
            "mounts: [{hostPath: '', containerPath: /x}]",
            "mounts[0].hostPath: empty",
        ),
        (
            "env: [A=1]",
            "mounts: [{hostPath: /x, containerPath: x}]",
            "mounts[0].containerPath: \"x\" is not an absolute path",
        ),
        (
            "env: [A=1]",
            "{}",
            "devices[0].containerEdits: empty: a device must edit something",
        ),
        (
            "devices:\n- name: a\n  containerEdits:\n    env: [A=1]\n",
            "devices: []\n",
            "devices: no devices",
        ),
    ];
    for (from, to, want) in cases {
        let text = ok.replacen(from, to, 1);
        assert_ne!(text, ok, "{from}");
        let e = parse_spec(text.as_bytes(), yaml())
            .expect_err(to)
            .to_string();
        assert!(e.contains(want), "{to}: {e}");
    }
    let twice = format!("{ok}- name: a\n  containerEdits:\n    env: [B=1]\n");
    let e = parse_spec(twice.as_bytes(), yaml())
        .expect_err("twice")
        .to_string();
    assert!(e.contains("devices[1].name: \"a\" named twice"), "{e}");
    let e = parse_spec(
        b"{\"cdiVersion\": \"0.6.0\", \"kind\": 7}",
        Path::new("/x.json"),
    )
    .expect_err("json")
    .to_string();
    assert!(e.starts_with("/x.json: kind: invalid type"), "{e}");
    let e = parse_spec(b"", Path::new("/x.json"))
        .expect_err("empty")
        .to_string();
    assert!(e.starts_with("/x.json: (document): EOF"), "{e}");
}

#[test]
fn qualified_names() {
    assert_eq!(
        parse_qualified_name("nvidia.com/gpu=a-").map_err(|e| e.to_string()),
        Err("device name \"a-\" should end with a letter or digit".into())
    );
    assert_eq!(
        parse_qualified_name("nvidia.com/gpu=0"),
        Ok(("nvidia.com/gpu", "0"))
    );
    assert_eq!(
        parse_qualified_name("vendor.com/class=GPU-1:mig.2"),
        Ok(("vendor.com/class", "GPU-1:mig.2"))
    );
    for bad in [
        "nvidia.com/gpu",
        "gpu=0",
        "/dev/x",
        "nvidia.com/gpu=",
        "nvidia.com/=0",
        "nvidia.com/gpu=a b",
    ] {
        assert!(parse_qualified_name(bad).is_err(), "{bad}");
    }
}

fn spec(kind: &str, names: &[&str], env: &str) -> Spec {
    Spec {
        cdi_version: "0.6.0".into(),
        kind: kind.into(),
        devices: names
            .iter()
            .map(|n| Device {
                name: (*n).into(),
                container_edits: ContainerEdits {
                    env: vec![format!("DEV={n}{env}")],
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect(),
        container_edits: ContainerEdits {
            env: vec![format!("COMMON={kind}{env}")],
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn a_later_folder_wins_and_two_files_of_one_folder_lose_the_device() {
    let (reg, warnings) = Registry::new(vec![
        (
            PathBuf::from("/etc/cdi/a.yaml"),
            0,
            spec("v.com/c", &["x", "y"], "-etc"),
        ),
        (
            PathBuf::from("/var/run/cdi/a.yaml"),
            1,
            spec("v.com/c", &["x"], "-run"),
        ),
        // Earlier folder after a later one: still the later wins.
        (
            PathBuf::from("/etc/cdi/b.yaml"),
            0,
            spec("v.com/c", &["x"], "-etc-b"),
        ),
        (
            PathBuf::from("/etc/cdi/c.json"),
            0,
            spec("v.com/d", &["z"], ""),
        ),
        (
            PathBuf::from("/etc/cdi/d.json"),
            0,
            spec("v.com/d", &["z"], ""),
        ),
    ]);
    assert_eq!(
        reg.device_names().collect::<Vec<_>>(),
        ["v.com/c=x", "v.com/c=y"]
    );
    assert_eq!(
        reg.file_of("v.com/c=x"),
        Some(Path::new("/var/run/cdi/a.yaml"))
    );
    assert_eq!(
        warnings,
        ["CDI device v.com/d=z is in both /etc/cdi/c.json and /etc/cdi/d.json: neither is used"]
    );
    let e = reg.resolve(&["v.com/c=x".into()]).expect("resolves");
    assert_eq!(e.env, ["COMMON=v.com/c-run", "DEV=x-run"]);
    // Two devices of two specs: each spec's common edits once, before its
    // first device's.
    let e = reg
        .resolve(&["v.com/c=y".into(), "v.com/c=x".into()])
        .expect("resolves");
    assert_eq!(
        e.env,
        [
            "COMMON=v.com/c-etc",
            "DEV=y-etc",
            "COMMON=v.com/c-run",
            "DEV=x-run"
        ]
    );
    let e = reg
        .resolve(&["v.com/c=x".into(), "v.com/d=z".into(), "v.com/c=q".into()])
        .expect_err("unknown");
    assert_eq!(
        e.to_string(),
        "unresolvable CDI devices v.com/d=z, v.com/c=q"
    );
    assert!(matches!(
        crate::error::Error::from(e),
        crate::error::Error::NotFound(_)
    ));
}

#[test]
fn devices_needing_hooks_or_rdt_are_refused_by_name() {
    let spec = parse_spec(NVIDIA_YAML.as_bytes(), yaml()).expect("valid");
    let (reg, _) = Registry::new(vec![(yaml().to_path_buf(), 0, spec)]);
    let e = reg
        .resolve(&["nvidia.com/gpu=0".into()])
        .expect_err("hooks");
    assert_eq!(
        e.to_string(),
        "CDI device nvidia.com/gpu=0 (/etc/cdi/nvidia.yaml): OCI hooks (containerEdits.hooks) are not supported by picolet's runtime"
    );
    assert!(matches!(
        crate::error::Error::from(e),
        crate::error::Error::FailedPrecondition(_)
    ));
    let mut rdt = self::spec("v.com/c", &["x"], "");
    rdt.devices[0].container_edits.intel_rdt = Some(json!({"closID": "gpu"}));
    let (reg, _) = Registry::new(vec![(PathBuf::from("/etc/cdi/r.yaml"), 0, rdt)]);
    let e = reg
        .resolve(&["v.com/c=x".into()])
        .expect_err("rdt")
        .to_string();
    assert!(
        e.contains("Intel RDT (containerEdits.intelRdt) is not supported"),
        "{e}"
    );
}

#[test]
fn requests_come_from_the_cri_field_and_cdi_annotations() {
    let mut c = ContainerConfig {
        cdi_devices: vec![
            CdiDevice {
                name: "v.com/c=b".into(),
            },
            CdiDevice {
                name: "v.com/c=a".into(),
            },
            CdiDevice {
                name: "v.com/c=b".into(),
            },
        ],
        ..Default::default()
    };
    c.annotations
        .insert("cdi.k8s.io/z_plugin".into(), "v.com/c=z".into());
    c.annotations
        .insert("cdi.k8s.io/dp_gpu0".into(), "v.com/c=a,v.com/d=y".into());
    c.annotations
        .insert("example.com/other".into(), "not a device".into());
    assert_eq!(
        requested(&c).expect("valid"),
        ["v.com/c=b", "v.com/c=a", "v.com/d=y", "v.com/c=z"]
    );
    c.annotations
        .insert("cdi.k8s.io/bad".into(), "v.com/c=a,,v.com/c=b".into());
    let e = requested(&c).expect_err("empty name");
    assert_eq!(
        e.to_string(),
        "invalid CDI device name \"\" in annotation cdi.k8s.io/bad: not vendor.com/class=name"
    );
    assert!(matches!(
        crate::error::Error::from(e),
        crate::error::Error::InvalidArgument(_)
    ));
    let c = ContainerConfig {
        cdi_devices: vec![CdiDevice {
            name: "gpu0".into(),
        }],
        ..Default::default()
    };
    let e = requested(&c).expect_err("unqualified").to_string();
    assert!(e.contains("\"gpu0\" in CDI_devices[0]"), "{e}");
    assert_eq!(
        requested(&ContainerConfig::default()).expect("none"),
        Vec::<String>::new()
    );
}

#[test]
fn edits_apply_as_the_cdi_library_applies_them() {
    let mut spec = json!({
        "ociVersion": "1.0.2",
        "process": {"cwd": "/", "env": ["PATH=/bin", "A=container"], "user": {"uid": 1000, "gid": 0, "additionalGids": [7]}},
        "mounts": [
            {"destination": "/proc", "type": "proc"},
            {"destination": "/etc/hosts", "source": "/h"},
            {"destination": "/dev", "type": "tmpfs"},
        ],
        "linux": {"devices": [{"path": "/dev/x", "type": "c", "major": 9, "minor": 9}], "resources": {"devices": [{"allow": false, "access": "rwm"}]}},
    });
    let edits = ContainerEdits {
        env: vec!["A=cdi".into(), "B=1".into()],
        device_nodes: vec![
            DeviceNode {
                path: "/dev/x".into(),
                kind: "c".into(),
                major: 1,
                minor: 3,
                ..Default::default()
            },
            DeviceNode {
                path: "/dev/y".into(),
                kind: "b".into(),
                major: 7,
                minor: 0,
                permissions: "r".into(),
                file_mode: Some(0o600),
                uid: Some(0),
                ..Default::default()
            },
        ],
        mounts: vec![
            Mount {
                host_path: "/lib/x.so".into(),
                container_path: "/usr/lib/x.so".into(),
                options: vec!["ro".into(), "bind".into()],
                ..Default::default()
            },
            Mount {
                host_path: "/h2".into(),
                container_path: "/etc/hosts".into(),
                kind: "bind".into(),
                ..Default::default()
            },
        ],
        additional_gids: vec![0, 7, 44],
        ..Default::default()
    };
    apply(&mut spec, &edits);
    assert_eq!(spec["process"]["env"], json!(["PATH=/bin", "A=cdi", "B=1"]));
    assert_eq!(
        spec["linux"]["devices"],
        json!([
            {"path": "/dev/x", "type": "c", "major": 1, "minor": 3, "uid": 1000},
            {"path": "/dev/y", "type": "b", "major": 7, "minor": 0, "fileMode": 0o600, "uid": 0},
        ])
    );
    assert_eq!(
        spec["linux"]["resources"]["devices"],
        json!([
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
            {"allow": true, "type": "b", "major": 7, "minor": 0, "access": "r"},
        ])
    );
    let dests: Vec<&str> = spec["mounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .map(|m| m["destination"].as_str().expect("dest"))
        .collect();
    assert_eq!(dests, ["/proc", "/dev", "/etc/hosts", "/usr/lib/x.so"]);
    assert_eq!(
        spec["mounts"][2],
        json!({"destination": "/etc/hosts", "source": "/h2", "type": "bind", "options": []})
    );
    assert_eq!(spec["process"]["user"]["additionalGids"], json!([7, 44]));
    // The result is a valid OCI spec.
    let typed: oci_spec::runtime::Spec = serde_json::from_value(spec).expect("typed");
    assert_eq!(
        typed
            .linux()
            .as_ref()
            .and_then(|l| l.devices().as_ref())
            .map(Vec::len),
        Some(2)
    );
}
