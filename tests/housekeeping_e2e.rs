//! End-to-end: the agent's housekeeping on the real shim — container log
//! rotation (kubelet's containerLogMaxSize / containerLogMaxFiles, through
//! CRI ReopenContainerLog) and image garbage collection (imageGC*
//! thresholds, through CRI RemoveImage). Root only.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::agent::{Agent, container, phase};
use common::test_images;

/// A container's log files, oldest first: compressed rotated ones, the
/// newest rotated one, then the live `0.log`.
fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    // `0.log` sorts before `0.log.<time>`: put it last.
    files.sort_by_key(|p| {
        let n = p.file_name().map(|n| n.to_string_lossy().into_owned());
        (n.as_deref() == Some("0.log"), n)
    });
    files
}

fn text_of(p: &Path) -> String {
    let mut text = String::new();
    let f = std::fs::File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    if p.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(f)
            .read_to_string(&mut text)
            .unwrap_or_else(|e| panic!("gunzip {}: {e}", p.display()));
    } else {
        std::io::BufReader::new(f)
            .read_to_string(&mut text)
            .expect("read");
    }
    text
}

/// The numbers of the container's `n <i>` lines, in file order.
fn numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.split(" stdout F n ").nth(1))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn chatty_logs_rotate_compress_and_stay_within_max_files() {
    require_root!();
    let agent = Agent::start(
        "containerLogMaxSize: 8Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n",
    );
    // ~100 numbered lines of ~110 bytes a second.
    let script = "i=0; pad=$(printf %0100d 0); while true; do i=$((i+1)); echo \"n $i $pad\"; \
                  sleep 0.01; done";
    agent.write_manifest(
        "chatty.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: chatty\nspec:\n  \
             terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    \
             image: busybox:latest\n    imagePullPolicy: IfNotPresent\n    \
             command: [sh, -c, '{script}']\n"
        ),
    );
    let p = agent.wait_pod("chatty", "Running", Duration::from_secs(30), |p| {
        phase(p) == "Running" && container(p, "main")["state"]["running"].is_object()
    });
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let dir = agent
        .dir()
        .join("logs")
        .join(format!("default_chatty-e2e_{uid}"))
        .join("main");

    // Watch until two compressed files were seen; never more than 3 files.
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut most = 0;
    let mut gz_seen = std::collections::BTreeSet::new();
    while gz_seen.len() < 2 {
        let files = log_files(&dir);
        most = most.max(files.len());
        assert!(files.len() <= 3, "over containerLogMaxFiles: {files:?}");
        for f in &files {
            if f.extension().is_some_and(|e| e == "gz") {
                gz_seen.insert(f.clone());
            }
        }
        assert!(
            Instant::now() < deadline,
            "no rotation: {files:?}\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(most, 3);
    // Just after a rotation: the next one is ~3 s away.
    std::thread::sleep(Duration::from_millis(300));
    let files = log_files(&dir);
    // The oldest compressed file went when the second one came.
    assert!(
        !files.contains(gz_seen.iter().next().expect("first gz")),
        "{files:?}"
    );

    // No line lost or doubled across the files that are left: read oldest
    // to newest, the numbers count up by one. The first ones are gone.
    let mut all = Vec::new();
    for f in &files {
        let mut text = text_of(f);
        // The live file may end in a line still being written.
        if !text.ends_with('\n') {
            text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
        }
        let n = numbers(&text);
        assert!(!n.is_empty(), "{} has no lines", f.display());
        all.extend(n);
    }
    assert!(
        all[0] > 1,
        "the oldest lines were removed: starts at {}",
        all[0]
    );
    for w in all.windows(2) {
        assert_eq!(w[1], w[0] + 1, "a gap or repeat across rotation: {files:?}");
    }
    // The live file is small again, and the pod never restarted.
    let p = agent.pod("chatty").expect("pod");
    assert_eq!(container(&p, "main")["restartCount"], 0);
    agent.remove_manifest("chatty.yaml");
    agent.wait("pod gone", Duration::from_secs(30), || {
        agent.pod("chatty").is_none()
    });
}

/// With a 1 % high threshold (any real disk is fuller) and 0 % low, every
/// image no container uses goes; the pod's image stays, and the agent says
/// it could not free enough.
#[test]
fn unused_images_are_garbage_collected_and_used_ones_stay() {
    require_root!();
    let mut agent = Agent::prepare(
        "imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\nimageMinimumGCAge: 1s\n",
    );
    agent.picolet_extra = "  imageGCPeriod: 2s\n".into();
    agent.shim.import(&test_images().layered_layout);
    agent.spawn();
    let images = || String::from_utf8_lossy(&agent.shim.ctl(&["images"]).stdout).into_owned();
    let unused = "localhost/picolet-test/layered";
    assert!(images().contains(unused), "{}", images());
    agent.write_manifest(
        "user.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: user\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    \
         image: busybox:latest\n    imagePullPolicy: IfNotPresent\n    \
         command: [sleep, '1000']\n",
    );
    agent.wait_pod("user", "Running", Duration::from_secs(30), |p| {
        phase(p) == "Running" && container(p, "main")["state"]["running"].is_object()
    });
    agent.wait("the unused image removed", Duration::from_secs(30), || {
        !images().contains(unused)
    });
    assert!(images().contains("busybox"), "{}", images());
    agent.wait("FreeDiskSpaceFailed", Duration::from_secs(10), || {
        agent
            .events()
            .iter()
            .any(|e| e["reason"] == "FreeDiskSpaceFailed")
    });
    let p = agent.pod("user").expect("pod");
    assert_eq!(container(&p, "main")["restartCount"], 0);
    agent.remove_manifest("user.yaml");
    agent.wait("pod gone", Duration::from_secs(30), || {
        agent.pod("user").is_none()
    });
}
