//! The `picolet` command line: versions, exit codes, config errors.

use std::process::Command;

fn picolet(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_picolet"))
        .args(args)
        .output()
        .expect("run picolet")
}

#[test]
fn version_prints_the_crate_version() {
    let out = picolet(&["version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("picolet {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn bad_config_exits_2_naming_file_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("config.yaml");
    let cases = [
        (
            "evictionHard:\n  memory.available: 100Zi\n",
            "evictionHard.memory.available: \"100Zi\" is not a quantity",
        ),
        ("syncFrequncy: 1m\n", "unknown field `syncFrequncy`"),
        ("picolet:\n  nodeName: Bad_Name\n", "picolet.nodeName:"),
    ];
    for (text, want) in cases {
        std::fs::write(&cfg, text).expect("write");
        for sub in ["agent", "up", "shim"] {
            let out = picolet(&[sub, "--config", cfg.to_str().expect("utf8")]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{sub} {text:?}: {err}");
            assert!(err.contains("config.yaml: "), "{sub}: {err}");
            assert!(err.contains(want), "{sub} {text:?}: {err}");
        }
    }
    let out = picolet(&["agent", "--config", "/nonexistent/picolet.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/picolet.yaml"));
}

#[test]
fn agent_without_a_runtime_names_the_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("config.yaml");
    let sock = dir.path().join("none.sock");
    std::fs::write(
        &cfg,
        format!(
            "runtimeRequestTimeout: 1s\nstaticPodPath: {}\nhealthzPort: 0\nport: 0\npicolet:\n  criSocket: {}\n",
            dir.path().join("m").display(),
            sock.display()
        ),
    )
    .expect("write");
    let out = picolet(&["agent", "--config", cfg.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("none.sock"));
    // A flag overrides the file.
    let flag = dir.path().join("flag.sock");
    let out = picolet(&[
        "agent",
        "--config",
        cfg.to_str().expect("utf8"),
        "--cri-socket",
        flag.to_str().expect("utf8"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("flag.sock") && !err.contains("none.sock"),
        "{err}"
    );
}

#[test]
fn bad_usage_exits_2() {
    assert_eq!(picolet(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(picolet(&["shim", "--no-such-flag"]).status.code(), Some(2));
}

#[test]
fn ctl_without_a_shim_names_the_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("none.sock");
    let out = picolet(&["ctl", "--socket", sock.to_str().expect("utf8"), "images"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("none.sock"));
}

#[test]
fn ctl_api_without_the_local_ca_says_where_it_looked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_str().expect("utf8");
    let out = picolet(&[
        "ctl",
        "api",
        "/pods",
        "--config",
        "/dev/null",
        "--root",
        root,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{root}/agent/pki/picolet-local-ca.key"))
            && err.contains("picolet up"),
        "{err}"
    );
}

#[test]
fn check_validates_config_and_manifests() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = picolet(&[
        "check",
        "--config",
        &format!("{root}/examples/config.yaml"),
        "--node-name",
        "edge-1",
        &format!("{root}/examples/manifests/hello.yaml"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("config.yaml: ok"), "{stdout}");
    assert!(stdout.contains("pod default/hello-edge-1 uid "), "{stdout}");
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  restartPolicy: Sometimes\n  containers: [{name: c, image: i}]\n",
    )
    .expect("write");
    let out = picolet(&[
        "check",
        "--config",
        "/dev/null",
        bad.to_str().expect("utf8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml: spec.restartPolicy: \"Sometimes\""),
        "{err}"
    );
    // No files named: the static pod folder, as the agent reads it.
    let folder = dir.path().join("manifests");
    std::fs::create_dir(&folder).expect("mkdir");
    std::fs::copy(&bad, folder.join("bad.yaml")).expect("copy");
    std::fs::copy(
        format!("{root}/examples/manifests/hello.yaml"),
        folder.join("hello.yaml"),
    )
    .expect("copy");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, format!("staticPodPath: {}\n", folder.display())).expect("write");
    let out = picolet(&["check", "--config", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2), "the folder's bad.yaml fails it");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("hello.yaml: ok: pod default/hello-"),
        "{stdout}"
    );
    std::fs::remove_file(folder.join("bad.yaml")).expect("rm");
    let out = picolet(&["check", "--config", config.to_str().expect("utf8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sudo scripts/demo.sh` once said "cargo is missing": sudo's
/// secure_path hides ~/.cargo/bin. The scripts find rustup's cargo there.
#[test]
fn the_scripts_find_rustups_cargo_when_path_hides_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let home = tempfile::tempdir().expect("tempdir");
    let bin = home.path().join(".cargo/bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::fs::write(bin.join("cargo"), "#!/bin/sh\necho rustup-cargo\n").expect("write");
    std::fs::set_permissions(bin.join("cargo"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cargo-env.sh");
    let out = Command::new("/bin/bash")
        .arg("-c")
        .arg(format!(". {script} && cargo"))
        .env_clear()
        // sudo's secure_path on Debian and Ubuntu.
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOME", home.path())
        .output()
        .expect("bash");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "rustup-cargo",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
