//! Pods asking for a device plugin's resource, against the fake CRI and a
//! fake plugin speaking kubelet's device plugin API: registration,
//! devices in the container's CRI config, kubelet's admission failures,
//! devices given back, the checkpoint across a restart.

use std::path::Path;

use agent::devicemanager::{self, Manager};
use k8s_openapi::api::core::v1::Pod;

use super::fake_cri::FakeCri;
use super::fake_plugin::FakePlugin;
use super::{desired, eventually, phase, setup_config};

const SERIAL: &str = "devices.picolet.io/serial";

/// A static pod whose container `main` asks for `n` of `resource`.
fn asking(name: &str, resource: &str, n: u32) -> Pod {
    super::static_pod(
        name,
        &format!(
            "  containers:\n  - name: main\n    image: busybox\n    command: [sleep]\n    \
             resources:\n      limits: {{{resource}: {n}}}\n"
        ),
    )
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().expect("uid")
}

async fn registered(dir: &Path) -> (Manager, FakePlugin) {
    let manager = Manager::start(&[dir.to_path_buf()]).expect("device manager");
    let plugin = FakePlugin::start(dir, "serial", SERIAL, &["tty0", "tty1"]);
    plugin.register().await.expect("registered");
    eventually("two healthy devices", || {
        manager.capacity().get(SERIAL) == Some(&(2, 2))
    })
    .await;
    (manager, plugin)
}

#[tokio::test]
async fn a_pod_gets_its_devices_and_a_pod_they_do_not_fit_is_refused() {
    let fake = FakeCri::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("device-plugins");
    let (manager, plugin) = registered(&plugins).await;
    let s = setup_config(&fake, None, Some(manager.clone()), |_| {}).await;

    let one = asking("one", SERIAL, 1);
    let two = asking("two", SERIAL, 2);
    let other = asking("other", "vendor.example/fpga", 1);
    s.workers.update(&desired(&[&one]));
    eventually("one running", || {
        phase(&s.statuses, &uid(&one)) == "Running"
    })
    .await;
    let c = fake.containers_named("main").remove(0);
    assert_eq!(c.config.devices.len(), 1, "{:?}", c.config.devices);
    assert_eq!(c.config.devices[0].container_path, "/dev/fake-tty0");
    assert_eq!(c.config.devices[0].host_path, "/dev/null");
    assert_eq!(c.config.devices[0].permissions, "rw");
    assert!(
        c.config
            .envs
            .iter()
            .any(|e| e.key == "FAKE_DEVICES" && e.value == "tty0")
    );
    assert_eq!(c.config.annotations["fake.example/devices"], "tty0");
    {
        let st = plugin.state.lock().expect("state");
        assert_eq!(st.allocations, [vec!["tty0".to_string()]]);
        // The plugin asked for PreStartContainer: called before the start.
        assert_eq!(st.pre_starts, [vec!["tty0".to_string()]]);
    }

    // Two wanted, one left: kubelet's admission error, nothing run.
    s.workers.update(&desired(&[&one, &two, &other]));
    eventually("two refused", || phase(&s.statuses, &uid(&two)) == "Failed").await;
    let st = s
        .statuses
        .get(&uid(&two))
        .and_then(|p| p.status)
        .expect("status");
    assert_eq!(st.reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert_eq!(
        st.message.as_deref(),
        Some(
            "Pod was rejected: Allocate failed due to requested number of devices unavailable for devices.picolet.io/serial. Requested: 2, Available: 1, which is unexpected"
        )
    );
    // No plugin serves it: the node has none.
    eventually("other refused", || {
        phase(&s.statuses, &uid(&other)) == "Failed"
    })
    .await;
    let st = s
        .statuses
        .get(&uid(&other))
        .and_then(|p| p.status)
        .expect("status");
    assert_eq!(st.reason.as_deref(), Some("OutOfvendor.example/fpga"));
    assert_eq!(fake.containers_named("main").len(), 1, "only one ran");

    // A device turns unhealthy: allocatable drops, capacity stays.
    plugin.set("tty1", false);
    eventually("tty1 unhealthy", || {
        manager.capacity().get(SERIAL) == Some(&(2, 1))
    })
    .await;
    plugin.set("tty1", true);

    // The first pod goes: its device comes back, a new pod can have both.
    s.workers.update(&desired(&[]));
    eventually("one's device given back", || {
        manager.container(&uid(&one), "main").devices.is_empty()
    })
    .await;
    let both = asking("both", SERIAL, 2);
    s.workers.update(&desired(&[&both]));
    eventually("both running", || {
        phase(&s.statuses, &uid(&both)) == "Running"
    })
    .await;
    let ids: Vec<String> = fake
        .containers_named("main")
        .into_iter()
        .filter(|c| c.config.labels["io.kubernetes.pod.uid"] == uid(&both))
        .flat_map(|c| c.config.devices)
        .map(|d| d.container_path)
        .collect();
    assert_eq!(ids, ["/dev/fake-tty0", "/dev/fake-tty1"]);
}

#[tokio::test]
async fn allocations_survive_a_restart_in_the_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("device-plugins");
    let (manager, _plugin) = registered(&plugins).await;
    let p = asking("one", SERIAL, 1);
    manager.admit(&uid(&p), &p).await.expect("admitted");
    assert_eq!(manager.container(&uid(&p), "main").devices.len(), 1);

    // A restarted agent: the same checkpoint in a directory of its own
    // (the first agent's socket still serves its own).
    let again = dir.path().join("restarted");
    std::fs::create_dir_all(&again).expect("dir");
    std::fs::copy(
        plugins.join(devicemanager::CHECKPOINT),
        again.join(devicemanager::CHECKPOINT),
    )
    .expect("checkpoint");
    let restarted = Manager::start(&[again]).expect("restarted");
    // Known, but unhealthy until the plugin registers again; the pod
    // keeps its device, and admitting it again allocates nothing new.
    assert_eq!(restarted.capacity().get(SERIAL), Some(&(2, 0)));
    let held = restarted.container(&uid(&p), "main");
    assert_eq!(held.devices[0].container_path, "/dev/fake-tty0");
    restarted.admit(&uid(&p), &p).await.expect("still admitted");
    // Another pod cannot have a device while none is healthy.
    let q = asking("two", SERIAL, 1);
    let e = restarted.admit(&uid(&q), &q).await.expect_err("unhealthy");
    assert_eq!(e.reason(), "UnexpectedAdmissionError");
}

#[tokio::test]
async fn the_plugins_preference_is_taken_when_it_names_free_devices() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("device-plugins");
    let manager = Manager::start(std::slice::from_ref(&plugins)).expect("device manager");
    let plugin =
        FakePlugin::start_with(&plugins, "serial", SERIAL, &["tty0", "tty1", "tty2"], true);
    plugin.register().await.expect("registered");
    eventually("three devices", || {
        manager.capacity().get(SERIAL) == Some(&(3, 3))
    })
    .await;
    let p = asking("one", SERIAL, 2);
    manager.admit(&uid(&p), &p).await.expect("admitted");
    let got: Vec<String> = manager
        .container(&uid(&p), "main")
        .devices
        .into_iter()
        .map(|d| d.container_path)
        .collect();
    // Without the preference it would be the first two.
    assert_eq!(got, ["/dev/fake-tty1", "/dev/fake-tty2"]);
}

#[tokio::test]
async fn a_plugin_that_goes_leaves_its_devices_unhealthy_until_it_registers_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("device-plugins");
    let (manager, plugin) = registered(&plugins).await;
    let p = asking("one", SERIAL, 1);
    manager.admit(&uid(&p), &p).await.expect("admitted");
    plugin.go_away();
    eventually("unhealthy", || {
        manager.capacity().get(SERIAL) == Some(&(2, 0))
    })
    .await;
    // The pod keeps what it holds; nobody new gets a device.
    assert_eq!(manager.container(&uid(&p), "main").devices.len(), 1);
    let q = asking("two", SERIAL, 1);
    assert!(manager.admit(&uid(&q), &q).await.is_err());
    // The plugin restarts and registers again: healthy, the hold kept.
    plugin.come_back();
    plugin.register().await.expect("registered again");
    eventually("healthy again", || {
        manager.capacity().get(SERIAL) == Some(&(2, 2))
    })
    .await;
    manager.admit(&uid(&q), &q).await.expect("admitted now");
    let got = manager.container(&uid(&q), "main").devices;
    assert_eq!(got[0].container_path, "/dev/fake-tty1", "not the held one");
}

#[tokio::test]
async fn a_checkpoint_that_does_not_decode_is_set_aside() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("device-plugins");
    std::fs::create_dir_all(&plugins).expect("mkdir");
    let checkpoint = plugins.join(devicemanager::CHECKPOINT);
    std::fs::write(&checkpoint, "{not json").expect("write");
    let manager = Manager::start(std::slice::from_ref(&plugins)).expect("starts anyway");
    assert!(manager.capacity().is_empty());
    assert_eq!(
        std::fs::read_to_string(checkpoint.with_extension("bad")).expect("set aside"),
        "{not json"
    );
}

/// In paused time: the 30 s wait for a hung plugin passes at once.
#[tokio::test(start_paused = true)]
async fn a_plugin_that_does_not_answer_allocate_fails_the_admission_in_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("device-plugins");
    let (manager, plugin) = registered(&plugins).await;
    plugin.state.lock().expect("state").hang_allocate = true;
    let p = asking("one", SERIAL, 1);
    let e = manager.admit(&uid(&p), &p).await.expect_err("timed out");
    assert_eq!(e.reason(), "UnexpectedAdmissionError");
    assert!(e.to_string().contains("no answer within 30 s"), "{e}");
    // Nothing is held: the next pod, with the plugin well again, fits.
    plugin.state.lock().expect("state").hang_allocate = false;
    let q = asking("two", SERIAL, 2);
    manager.admit(&uid(&q), &q).await.expect("both free");
}

#[tokio::test]
async fn a_closed_manager_leaves_no_socket_and_no_directory_it_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = dir.path().join("ours");
    let made = dir.path().join("var/lib/kubelet/device-plugins");
    let manager = Manager::start(&[ours.clone(), made.clone()]).expect("device manager");
    assert!(made.join(devicemanager::KUBELET_SOCKET).exists());
    manager.close();
    assert!(!ours.join(devicemanager::KUBELET_SOCKET).exists());
    // Made for it: gone up to what was there; what was there stays.
    assert!(!dir.path().join("var").exists());
    assert!(dir.path().exists());
}
