use super::caps::ALL_CAPS;
use super::*;
use cri_proto::v1::{
    Capability, KeyValue, LinuxContainerConfig, LinuxContainerResources,
    LinuxContainerSecurityContext,
};

fn image(entrypoint: &[&str], cmd: &[&str], env: &[&str], user: &str) -> ImageConfiguration {
    serde_json::from_value(json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Cmd": cmd, "Env": env, "User": user, "WorkingDir": "/srv"},
        "rootfs": {"type": "layers", "diff_ids": []},
    }))
    .expect("image config")
}

fn config(command: &[&str], args: &[&str]) -> ContainerConfig {
    ContainerConfig {
        command: command.iter().map(|s| s.to_string()).collect(),
        args: args.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

#[test]
fn command_and_args_follow_cri_precedence() {
    let img = image(&["/entry"], &["default-arg"], &[], "");
    let cases: [(&[&str], &[&str], &[&str]); 4] = [
        (&[], &[], &["/entry", "default-arg"]),
        (&[], &["x"], &["/entry", "x"]),
        (&["/bin/sh"], &[], &["/bin/sh"]),
        (&["/bin/sh"], &["-c", "true"], &["/bin/sh", "-c", "true"]),
    ];
    for (command, args, want) in cases {
        assert_eq!(
            process_args(&config(command, args), &img),
            want,
            "command {command:?} args {args:?}"
        );
    }
}

#[test]
fn env_image_then_cri_with_path_and_hostname() {
    let img = image(&[], &["sh"], &["A=image", "B=image"], "");
    let mut c = config(&[], &[]);
    c.envs = vec![
        KeyValue {
            key: "B".into(),
            value: "cri".into(),
        },
        KeyValue {
            key: "C".into(),
            value: "x=y".into(),
        },
    ];
    let env = process_env(&c, &img, "pod-1");
    assert_eq!(env[0], DEFAULT_PATH);
    for want in ["HOSTNAME=pod-1", "A=image", "B=cri", "C=x=y"] {
        assert!(
            env.contains(&want.to_string()),
            "{want} missing from {env:?}"
        );
    }
    assert!(!env.contains(&"B=image".to_string()));
}

#[test]
fn capabilities_add_drop_and_all() {
    let caps = capabilities(
        &["NET_ADMIN".into()],
        &["CAP_KILL".into(), "mknod".into()],
        false,
        u64::MAX,
    )
    .expect("ok");
    assert!(caps.contains(&"CAP_NET_ADMIN".to_string()));
    assert!(!caps.contains(&"CAP_KILL".to_string()) && !caps.contains(&"CAP_MKNOD".to_string()));
    assert_eq!(
        capabilities(&[], &["ALL".into()], false, u64::MAX).expect("ok"),
        Vec::<String>::new()
    );
    assert_eq!(
        capabilities(&["ALL".into()], &[], false, u64::MAX)
            .expect("ok")
            .len(),
        ALL_CAPS.len()
    );
    assert_eq!(
        capabilities(&[], &[], true, u64::MAX).expect("ok").len(),
        ALL_CAPS.len()
    );
    // Privileged gets what the shim holds: here all but CAP_SYS_RESOURCE (24).
    let held = capabilities(&[], &[], true, ((1 << 41) - 1) & !(1 << 24)).expect("ok");
    assert_eq!(held.len(), ALL_CAPS.len() - 1);
    assert!(!held.contains(&"CAP_SYS_RESOURCE".to_string()));
    assert!(held.contains(&"CAP_CHECKPOINT_RESTORE".to_string()));
    assert!(capabilities(&["CAP_FLY".into()], &[], false, u64::MAX).is_err());
}

fn spec_for(c: &ContainerConfig, img: &ImageConfiguration, min_oom: i64) -> Result<Spec, Error> {
    spec_on_host(c, img, min_oom, true)
}

fn spec_on_host(
    c: &ContainerConfig,
    img: &ImageConfiguration,
    min_oom: i64,
    hugetlb: bool,
) -> Result<Spec, Error> {
    let sb = SandboxView {
        hostname: "h".into(),
        shm: "/dev/shm".into(),
        ..Default::default()
    };
    spec_in(c, img, &sb, min_oom, hugetlb)
}

/// The spec of `c` in the sandbox `sb`, the image's users and groups those
/// of the tests' passwd and group files.
fn spec_in(
    c: &ContainerConfig,
    img: &ImageConfiguration,
    sb: &SandboxView,
    min_oom: i64,
    hugetlb: bool,
) -> Result<Spec, Error> {
    build(&SpecInput {
        id: "abc",
        config: c,
        image: img,
        sandbox: sb,
        rootfs: Path::new("/r"),
        passwd: Some("root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/:/bin/sh\n"),
        group: Some("root:x:0:\napp:x:1000:\nextra:x:7:app\n"),
        devices: &[],
        min_oom_score_adj: min_oom,
        cap_bounding: u64::MAX,
        localhost_seccomp: None,
        hugetlb,
        cdi: None,
    })
}

/// critest 1.36's SupplementalGroupsPolicy specs, as a table: user 1000 is
/// in group 7 by the image's /etc/group; the pod adds 1234.
#[test]
fn supplemental_groups_merge_or_strict() {
    let img = image(&[], &["sh"], &[], "");
    let gids = |policy: i32| {
        let mut c = config(&[], &[]);
        c.linux = Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                run_as_user: Some(cri_proto::v1::Int64Value { value: 1000 }),
                supplemental_groups: vec![1234],
                supplemental_groups_policy: policy,
                ..Default::default()
            }),
            ..Default::default()
        });
        spec_for(&c, &img, 0).map(|s| {
            serde_json::to_value(&s).expect("json")["process"]["user"]["additionalGids"].clone()
        })
    };
    // The primary group is always one; Merge adds the image's groups.
    assert_eq!(
        gids(SupplementalGroupsPolicy::Merge as i32).expect("merge"),
        json!([7, 1000, 1234])
    );
    assert_eq!(
        gids(SupplementalGroupsPolicy::Strict as i32).expect("strict"),
        json!([1000, 1234])
    );
    let e = gids(7).expect_err("no such policy");
    assert!(e.to_string().contains("supplemental_groups_policy"), "{e}");
}

#[test]
fn recursive_read_only_needs_read_only_and_private() {
    let img = image(&[], &["sh"], &[], "");
    let with = |readonly: bool, propagation: MountPropagation| {
        let mut c = config(&[], &[]);
        c.mounts = vec![cri_proto::v1::Mount {
            container_path: "/mnt".into(),
            host_path: "/srv".into(),
            readonly,
            recursive_read_only: true,
            propagation: propagation as i32,
            ..Default::default()
        }];
        spec_for(&c, &img, 0)
    };
    let spec = with(true, MountPropagation::PropagationPrivate).expect("rro");
    let v = serde_json::to_value(&spec).expect("json");
    let mnt = v["mounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["destination"] == "/mnt")
        .expect("the volume");
    assert_eq!(mnt["options"], json!(["rbind", "rprivate", "ro", "rro"]));
    for (readonly, p) in [
        (false, MountPropagation::PropagationPrivate),
        (true, MountPropagation::PropagationHostToContainer),
        (true, MountPropagation::PropagationBidirectional),
    ] {
        let e = with(readonly, p).expect_err("refused");
        assert!(
            e.to_string().contains("mounts[0].recursive_read_only"),
            "{e}"
        );
    }
}

#[test]
fn spec_user_oom_clamp_paths_and_cgroup() {
    let img = image(&[], &["sh"], &[], "app");
    let mut c = config(&[], &[]);
    c.linux = Some(LinuxContainerConfig {
        resources: Some(LinuxContainerResources {
            oom_score_adj: -997,
            memory_limit_in_bytes: 1 << 20,
            ..Default::default()
        }),
        security_context: Some(LinuxContainerSecurityContext {
            readonly_rootfs: true,
            capabilities: Some(Capability {
                drop_capabilities: vec!["ALL".into()],
                ..Default::default()
            }),
            ..Default::default()
        }),
    });
    let spec = spec_for(&c, &img, 0).expect("spec");
    let v = serde_json::to_value(&spec).expect("json");
    assert_eq!(v["process"]["user"]["uid"], 1000);
    assert_eq!(v["process"]["user"]["additionalGids"], json!([7, 1000]));
    assert_eq!(v["process"]["cwd"], "/srv");
    assert_eq!(
        v["process"]["oomScoreAdj"], 0,
        "clamped to the runtime's own value"
    );
    assert_eq!(v["root"]["readonly"], true);
    assert_eq!(v["linux"]["cgroupsPath"], "/picolet/abc");
    assert_eq!(v["linux"]["resources"]["memory"]["limit"], 1 << 20);
    assert_eq!(
        v["linux"]["maskedPaths"].as_array().map(Vec::len),
        Some(MASKED_PATHS.len())
    );
    assert_eq!(v["process"]["capabilities"]["bounding"], json!([]));
    assert!(v["linux"]["seccomp"].is_null());
}

#[test]
fn runtime_default_seccomp_lands_in_the_spec_but_not_for_privileged() {
    use cri_proto::v1::{SecurityProfile, security_profile::ProfileType};
    let img = image(&[], &["sh"], &[], "");
    let mut c = config(&[], &[]);
    let sc = LinuxContainerSecurityContext {
        seccomp: Some(SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        }),
        ..Default::default()
    };
    c.linux = Some(LinuxContainerConfig {
        security_context: Some(sc.clone()),
        ..Default::default()
    });
    let v = serde_json::to_value(spec_for(&c, &img, -1000).expect("spec")).expect("json");
    assert_eq!(v["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
    c.linux = Some(LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            privileged: true,
            ..sc
        }),
        ..Default::default()
    });
    let v = serde_json::to_value(spec_for(&c, &img, -1000).expect("spec")).expect("json");
    assert!(v["linux"]["seccomp"].is_null());
    assert_eq!(v["linux"]["maskedPaths"], json!([]));
}

#[test]
fn no_command_at_all_is_invalid() {
    let img = image(&[], &[], &[], "");
    let err = spec_for(&config(&[], &[]), &img, 0).expect_err("no command");
    assert!(err.to_string().contains("command"), "{err}");
}

#[test]
fn run_as_group_needs_a_user() {
    // critest "runtime should return error if RunAsGroup is set without
    // RunAsUser": containerd refuses it; we ran the image's user with gid 1002.
    let img = image(&[], &["sh"], &[], "app");
    let group = Some(cri_proto::v1::Int64Value { value: 1002 });
    let with = |sc: LinuxContainerSecurityContext| {
        let mut c = config(&[], &[]);
        c.linux = Some(LinuxContainerConfig {
            security_context: Some(sc),
            ..Default::default()
        });
        spec_for(&c, &img, 0)
    };
    let err = with(LinuxContainerSecurityContext {
        run_as_group: group,
        ..Default::default()
    })
    .expect_err("group without user");
    assert!(
        err.to_string()
            .contains("linux.security_context.run_as_group"),
        "{err}"
    );
    let spec = with(LinuxContainerSecurityContext {
        run_as_group: group,
        run_as_user: Some(cri_proto::v1::Int64Value { value: 1000 }),
        ..Default::default()
    })
    .expect("group with user");
    let v = serde_json::to_value(&spec).expect("json");
    assert_eq!(
        (
            v["process"]["user"]["uid"].clone(),
            v["process"]["user"]["gid"].clone()
        ),
        (json!(1000), json!(1002))
    );
    with(LinuxContainerSecurityContext {
        run_as_group: group,
        run_as_username: "app".into(),
        ..Default::default()
    })
    .expect("group with user name");
}

#[test]
fn hugepage_limits_are_dropped_without_the_hugetlb_controller() {
    // The kubelet sends one per page size the kernel offers; libcontainer
    // refused the container where the controller is missing.
    use cri_proto::v1::HugepageLimit;
    let img = image(&[], &["sh"], &[], "");
    let mut c = config(&[], &[]);
    c.linux = Some(LinuxContainerConfig {
        resources: Some(LinuxContainerResources {
            hugepage_limits: vec![
                HugepageLimit {
                    page_size: "2MB".into(),
                    limit: 0,
                },
                HugepageLimit {
                    page_size: "1GB".into(),
                    limit: 0,
                },
            ],
            ..Default::default()
        }),
        ..Default::default()
    });
    let with = serde_json::to_value(spec_on_host(&c, &img, 0, true).expect("spec")).expect("json");
    assert_eq!(
        with["linux"]["resources"]["hugepageLimits"],
        json!([{"pageSize": "2MB", "limit": 0}, {"pageSize": "1GB", "limit": 0}])
    );
    let without =
        serde_json::to_value(spec_on_host(&c, &img, 0, false).expect("spec")).expect("json");
    assert!(without["linux"]["resources"]["hugepageLimits"].is_null());
}

#[test]
fn cdi_edits_come_last_env_devices_rules_and_mounts() {
    let img = image(&[], &["sh"], &["A=image"], "");
    let mut c = config(&[], &[]);
    c.envs = vec![KeyValue {
        key: "A".into(),
        value: "pod".into(),
    }];
    let sb = SandboxView {
        shm: "/dev/shm".into(),
        ..Default::default()
    };
    let edits = cdi::ContainerEdits {
        env: vec!["A=cdi".into()],
        device_nodes: vec![cdi::DeviceNode {
            path: "/dev/gpu0".into(),
            host_path: "/dev/nvidia0".into(),
            kind: "c".into(),
            major: 195,
            minor: 0,
            ..Default::default()
        }],
        mounts: vec![cdi::Mount {
            host_path: "/usr/lib/libcuda.so".into(),
            container_path: "/usr/lib/libcuda.so".into(),
            options: vec!["ro".into(), "bind".into()],
            ..Default::default()
        }],
        additional_gids: vec![44],
        ..Default::default()
    };
    let spec = build(&SpecInput {
        id: "abc",
        config: &c,
        image: &img,
        sandbox: &sb,
        rootfs: Path::new("/r"),
        passwd: None,
        group: None,
        devices: &[],
        min_oom_score_adj: -1000,
        cap_bounding: u64::MAX,
        localhost_seccomp: None,
        hugetlb: true,
        cdi: Some(&edits),
    })
    .expect("spec");
    let v = serde_json::to_value(&spec).expect("json");
    assert!(
        v["process"]["env"]
            .as_array()
            .expect("env")
            .contains(&json!("A=cdi"))
    );
    assert!(!v["process"]["env"].to_string().contains("A=pod"));
    assert_eq!(v["process"]["user"]["additionalGids"], json!([0, 44]));
    assert_eq!(v["linux"]["devices"][0]["path"], "/dev/gpu0");
    let rules = v["linux"]["resources"]["devices"]
        .as_array()
        .expect("rules");
    assert_eq!(
        rules.last(),
        Some(&json!({"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm"}))
    );
    assert_eq!(rules[0]["allow"], false, "deny-all stays first");
    let mounts = v["mounts"].as_array().expect("mounts");
    assert_eq!(
        mounts.last().map(|m| &m["destination"]),
        Some(&json!("/usr/lib/libcuda.so"))
    );
}

#[test]
fn a_pod_user_namespace_is_joined_first_with_its_ranges() {
    let img = image(&[], &["sh"], &[], "");
    let maps = userns::PodUserns {
        uids: userns::IdMap {
            container: 0,
            host: 3_000_000,
            len: 65536,
        },
        gids: userns::IdMap {
            container: 0,
            host: 4_000_000,
            len: 65536,
        },
    };
    let sb = SandboxView {
        hostname: "h".into(),
        shm: "/dev/shm".into(),
        netns: Some("/run/p/net".into()),
        userns: Some(("/run/p/user".into(), maps)),
        ..Default::default()
    };
    let build_with = |c: &ContainerConfig| spec_in(c, &img, &sb, 0, true);
    let v = serde_json::to_value(build_with(&config(&[], &[])).expect("spec")).expect("json");
    // procMount Unmasked (kubelet sends no paths): none masked.
    assert_eq!(v["linux"]["maskedPaths"], json!([]));
    assert_eq!(
        v["linux"]["namespaces"][0],
        json!({"type": "user", "path": "/run/p/user"})
    );
    assert_eq!(
        v["linux"]["gidMappings"],
        json!([{"containerID": 0, "hostID": 4_000_000, "size": 65536}])
    );
    let mut privileged = config(&[], &[]);
    privileged.linux = Some(LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    let e = build_with(&privileged).expect_err("privileged in a user namespace");
    assert!(e.to_string().contains("privileged"), "{e}");
    // A volume's mappings: the pod's are fine (kubelet 1.36 sends them),
    // others refused.
    let with_mount = |host_id: u32| {
        let mut c = config(&[], &[]);
        c.mounts = vec![cri_proto::v1::Mount {
            container_path: "/v".into(),
            host_path: "/srv/v".into(),
            uid_mappings: vec![cri_proto::v1::IdMapping {
                host_id,
                container_id: 0,
                length: 65536,
            }],
            ..Default::default()
        }];
        c
    };
    build_with(&with_mount(3_000_000)).expect("the pod's ranges");
    let e = build_with(&with_mount(5_000_000)).expect_err("other ranges");
    assert!(e.to_string().contains("mounts[0].uid_mappings"), "{e}");
}
