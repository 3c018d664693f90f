//! End-to-end: what survives and what must not survive a killed or
//! restarted `picolet up`, shim or agent: one owner per state
//! root, children that die with `up`, a replaced pod's ordering and
//! restart back-off across agent restarts. Root only.

use crate::common;

use std::time::Duration;

use common::agent::{Agent, container, pod, running};

const T: Duration = Duration::from_secs(30);

/// One shim per state root and one agent per data dir: a second
/// of either fails within `owner::WAIT` naming the holder's pid, touches
/// nothing (no second socket), and the first keeps serving.
#[test]
fn a_second_shim_or_agent_on_the_same_root_is_refused() {
    require_root!();
    let agent = Agent::start("");
    let shim_pid = agent.shim.child.as_ref().expect("shim").id();
    let agent_pid = agent.child.as_ref().expect("agent").id();
    let second_socket = agent.dir().join("second.sock");
    let out = std::process::Command::new(common::picolet())
        .arg("shim")
        .arg("--root")
        .arg(agent.shim.root())
        .arg("--socket")
        .arg(&second_socket)
        .arg("--run-dir")
        .arg(agent.dir().join("run-second"))
        .arg("--images-dir")
        .arg(agent.shim.images_dir())
        .output()
        .expect("run a second shim");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second shim ran: {err}");
    assert!(err.contains(&format!("locked by pid {shim_pid}")), "{err}");
    assert!(!second_socket.exists(), "the second shim served");
    let out = std::process::Command::new(common::picolet())
        .arg("agent")
        .arg("--config")
        .arg(agent.config_path())
        .output()
        .expect("run a second agent");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second agent ran: {err}");
    assert!(
        err.contains("picolet agent owns this state root")
            && err.contains(&format!("locked by pid {agent_pid}")),
        "{err}"
    );
    assert!(agent.get("/healthz").is_some(), "the first agent serves");
    agent.write_manifest("p.yaml", &pod(&agent, "still", "sleep 1000", ""));
    agent.wait_pod("still", "Running", T, running);
}

/// `kill -9` of `picolet up` alone (a split brain): its shim and
/// agent end with it (parent-death signal), the container keeps running,
/// and a new `up` takes over the same pod: one sandbox, the same container.
#[test]
fn killing_up_ends_its_shim_and_agent_and_a_new_up_takes_over() {
    require_root!();
    let mut up = Agent::prepare("");
    up.shim.stop();
    up.command = "up";
    up.spawn();
    up.write_manifest("p.yaml", &pod(&up, "solo", "sleep 1000", ""));
    let p = up.wait_pod("solo", "Running", T, running);
    let id = container(&p, "main")["containerID"].clone();
    let children = up.children();
    assert_eq!(children.len(), 2, "shim and agent: {children:?}");
    up.kill9();
    let gone = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
    };
    up.wait("the children of the killed up to end", T, || {
        children.iter().all(|(pid, _)| gone(*pid))
    });
    up.spawn();
    let p = up.wait_pod("solo", "Running under the new up", T, running);
    assert_eq!(
        container(&p, "main")["containerID"],
        id,
        "the same container"
    );
    assert_eq!(container(&p, "main")["restartCount"], 0);
    let out = std::process::Command::new(common::picolet())
        .args(["ctl", "--socket"])
        .arg(up.shim.socket())
        .arg("pods")
        .output()
        .expect("ctl pods");
    let list = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        list.lines().filter(|l| l.contains("solo")).count(),
        1,
        "one sandbox for the pod:\n{list}"
    );
}

/// A manifest replaced while the agent was down: the
/// restarted agent terminates the old version (its TERM trap takes 2 s of
/// its 3 s grace) before it starts the new one, as it does while running.
/// It started the new one first, and the orphan clean-up came ~2 s later;
/// and the stop's timeout was 2 s (3 s less the milliseconds already
/// spent, truncated), so the trap never finished.
#[test]
fn a_pod_replaced_while_the_agent_was_down_starts_after_the_old_one_ended() {
    require_root!();
    let mut agent = Agent::start("");
    let old = "trap \"sleep 2; touch /out/v1-end; exit 0\" TERM; touch /out/v1-ready; while true; do sleep 0.2; done";
    agent.write_manifest("rep.yaml", &pod(&agent, "rep", old, ""));
    let p = agent.wait_pod("rep", "Running", T, running);
    let old_uid = p["metadata"]["uid"].clone();
    // The trap is set (PID 1 ignores a TERM it has no handler for).
    let ready = agent.host_dir().join("v1-ready");
    agent.wait("the old version's TERM trap", T, || ready.exists());
    agent.kill9();
    let new = "if [ -f /out/v1-end ]; then echo after > /out/order; else echo before > /out/order; fi; sleep 1000";
    agent.write_manifest("rep.yaml", &pod(&agent, "rep", new, ""));
    agent.spawn();
    let p = agent.wait_pod("rep", "the new version Running", T, |p| {
        running(p) && p["metadata"]["uid"] != old_uid
    });
    assert_ne!(p["metadata"]["uid"], old_uid);
    let order = agent.host_dir().join("order");
    agent.wait("the new version to report", T, || order.exists());
    assert_eq!(
        std::fs::read_to_string(&order).expect("order").trim(),
        "after",
        "the new version started while the old one still ran; host dir {:?}; agent log:\n{}",
        std::fs::read_dir(agent.host_dir())
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            .unwrap_or_default(),
        agent.log()
    );
}

/// Seconds of the day of an RFC 3339 time (`…T12:05:49Z`).
fn day_secs(t: &serde_json::Value) -> i64 {
    let t = t.as_str().unwrap_or_default();
    let hms = t
        .split('T')
        .nth(1)
        .unwrap_or_default()
        .trim_end_matches('Z');
    hms.split(':')
        .map(|x| x.parse::<i64>().unwrap_or(0))
        .fold(0, |acc, x| acc * 60 + x)
}

/// Restart back-off survives an agent restart: after three
/// crashes (1 s, 2 s) the next wait is 4 s (the harness's back-off is 1 s
/// doubling to 4 s); an agent killed right after the third crash still
/// waits it, where it used to restart the container at once.
#[test]
fn restart_back_off_survives_an_agent_restart() {
    require_root!();
    let mut agent = Agent::start("");
    agent.write_manifest(
        "crashy.yaml",
        &pod(&agent, "crashy", "sleep 0.3; exit 1", ""),
    );
    let exited_third = |p: &serde_json::Value| {
        let c = container(p, "main");
        c["restartCount"] == 3 && c["state"]["running"].is_null()
    };
    let p = agent.wait_pod(
        "crashy",
        "three restarts, the last run ended",
        T,
        exited_third,
    );
    agent.kill9();
    agent.spawn();
    let p2 = agent.wait_pod("crashy", "the fourth restart", T, |p| {
        container(p, "main")["restartCount"] == 4
            && container(p, "main")["state"]["running"].is_object()
    });
    let finished = day_secs(&container(&p2, "main")["lastState"]["terminated"]["finishedAt"]);
    let started = day_secs(&container(&p2, "main")["state"]["running"]["startedAt"]);
    let gap = (started - finished).rem_euclid(86_400);
    assert!(
        gap >= 3,
        "restarted {gap} s after the crash, back-off 4 s; before: {}\nafter: {}",
        container(&p, "main"),
        container(&p2, "main")
    );
}
