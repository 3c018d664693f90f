//! End-to-end: real pods and containers through CRI RuntimeService on the
//! real `picolet shim`, with the project's busybox image. Root.

mod common;

use std::time::Duration;

use common::cri::{self, Client};
use common::{Shim, test_images};
use cri_proto::v1::ContainerState;

async fn ready_shim() -> (Shim, Client) {
    let shim = Shim::start();
    shim.import(&test_images().busybox_layout);
    let client = cri::client(&shim.socket()).await;
    (shim, client)
}

#[tokio::test(flavor = "multi_thread")]
async fn container_output_lands_in_the_cri_log_and_exit_code_is_reported() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let logs = shim.dir.path().join("pods/demo");
    let pod = cri::pod("demo", &logs, false);
    let pod_id = cri::run_pod(&mut c, &pod).await;
    let cfg = cri::container(
        "app",
        "busybox",
        &["sh", "-c", "echo out-line; echo err-line >&2; exit 3"],
    );
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    assert_eq!(
        cri::status(&mut c, &id).await.state,
        ContainerState::ContainerCreated as i32
    );
    cri::start(&mut c, &id).await;
    let st = cri::wait_state(
        &mut c,
        &id,
        ContainerState::ContainerExited,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(st.exit_code, 3);
    assert_eq!(st.reason, "Error");
    assert!(st.finished_at >= st.started_at && st.started_at > 0);
    let log = std::fs::read_to_string(logs.join("app/0.log")).expect("log file");
    let lines: Vec<&str> = log.lines().collect();
    assert!(
        lines.iter().any(|l| l.ends_with(" stdout F out-line")),
        "{log}"
    );
    assert!(
        lines.iter().any(|l| l.ends_with(" stderr F err-line")),
        "{log}"
    );
    for l in &lines {
        let ts = l.split(' ').next().expect("timestamp");
        assert!(
            ts.len() == 30 && ts.ends_with('Z'),
            "bad timestamp in {l:?}"
        );
    }
    cri::teardown(&mut c, &pod_id).await;
}
