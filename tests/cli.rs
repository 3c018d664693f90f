//! The `picolet` command line: versions, exit codes, honest "not yet".

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
fn unfinished_subcommands_say_so_and_fail() {
    for cmd in [&["agent"][..], &["up"], &["ctl", "ps"], &["ctl", "pods"]] {
        let out = picolet(cmd);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("not implemented"),
            "{cmd:?}"
        );
    }
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
