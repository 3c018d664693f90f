//! docs/architecture.md "Crates" as a test: dependencies between workspace crates flow one way.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// crate → workspace crates it may depend on (normal and build deps).
const ALLOWED: &[(&str, &[&str])] = &[
    ("edge-config", &[]),
    ("cri-proto", &[]),
    ("cgroup", &["edge-config"]),
    ("images", &["edge-config"]),
    ("registry", &["images"]),
    (
        "shim",
        &["cri-proto", "cgroup", "images", "registry", "edge-config"],
    ),
    ("agent", &["cri-proto", "cgroup", "edge-config"]),
    ("xtask", &[]),
    // Benchmarks measure the agent's pure parts in process (scrape-bench).
    ("bench", &["cri-proto", "agent", "cgroup"]),
    (
        "picolet",
        &[
            "agent",
            "shim",
            "cri-proto",
            "cgroup",
            "images",
            "edge-config",
        ],
    ),
];

#[test]
fn workspace_dependencies_flow_downward() {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let members: BTreeSet<String> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect();
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("name");
        let rules = allowed
            .get(name)
            .unwrap_or_else(|| panic!("crate {name} has no rule in tests/deps.rs"));
        for d in p["dependencies"].as_array().expect("deps") {
            let dep = d["name"].as_str().expect("dep name");
            let dev = d["kind"].as_str() == Some("dev");
            if members.contains(dep) && !dev {
                assert!(rules.contains(&dep), "{name} must not depend on {dep}");
            }
        }
    }
}
