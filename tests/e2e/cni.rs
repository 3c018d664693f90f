//! End-to-end: pod networking through CNI with Debian's reference plugins
//! (`bridge`, `host-local`, `portmap`, `tuning` from
//! containernetworking-plugins, in /usr/lib/cni) and with picolet's own
//! (`"type": "picolet"`: in the shim's process when no plugin folder has a
//! `picolet`, and exec'd as a plugin binary, as containerd runs it, from a
//! folder's link to picolet's binary). Root.
//!
//! The shim runs in a network namespace the test made (its "host"
//! network): the bridge, routes and iptables rules the plugins write stay
//! there, and a second namespace joined to it by a veth pair stands in for a
//! LAN peer and a router. Nothing touches the real host's network.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::agent::Agent;
use common::{Shim, cri, eventually, netns_holder, test_images};
use cri_proto::v1::{
    PodSandboxConfig, PodSandboxStatusRequest, PortMapping, Protocol, StatusRequest,
    StopPodSandboxRequest,
};
use tonic::Code;

const NETWORK: &str = "e2e-pods";
const GATEWAY: &str = "10.99.0.1";
const LAN_HOST: &str = "192.168.77.1";
const LAN_PEER: &str = "192.168.77.2";

/// Which plugins give the pods their network: the same subnet, gateway
/// and lease folder either way, so the checks are the same.
#[derive(Debug, Clone, Copy)]
enum Net {
    /// bridge + host-local + portmap from containernetworking-plugins.
    Debian,
    /// picolet's built-in plugin, in the shim's process.
    Builtin,
    /// The same plugin exec'd: a link named `picolet` to the binary in
    /// the shim's first plugin folder, as containerd runs it.
    BuiltinExec,
}

/// The network's plugins (leases under the test dir), then `extra`
/// plugins (objects) chained after them.
fn conflist(net: Net, shim: &Shim, extra: &str) -> String {
    let ipam = ipam_dir(shim);
    let ipam = ipam.display();
    let plugins = match net {
        Net::Debian => format!(
            r#"{{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
    "ipam": {{"type": "host-local", "dataDir": "{ipam}", "ranges": [[{{"subnet": "10.99.0.0/24"}}]],
             "routes": [{{"dst": "0.0.0.0/0"}}]}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}}"#
        ),
        Net::Builtin | Net::BuiltinExec => format!(
            r#"{{"type": "picolet", "bridge": "picolet0", "subnet": "10.99.0.0/24",
    "dataDir": "{ipam}", "ipMasq": true, "capabilities": {{"portMappings": true}}}}"#
        ),
    };
    format!(r#"{{"cniVersion": "1.0.0", "name": "{NETWORK}", "plugins": [{plugins}{extra}]}}"#)
}

fn ipam_dir(shim: &Shim) -> PathBuf {
    shim.dir.path().join("ipam")
}

fn write_conflist(net: Net, shim: &Shim, extra: &str) {
    if let Net::BuiltinExec = net {
        let dir = shim.cni_bin_dir();
        std::fs::create_dir_all(&dir).expect("plugin folder");
        std::os::unix::fs::symlink(common::picolet(), dir.join("picolet"))
            .expect("link the plugin");
    }
    std::fs::write(
        shim.cni_conf_dir().join("10-e2e.conflist"),
        conflist(net, shim, extra),
    )
    .expect("write conflist");
}

/// Runs `args` in the network namespace `ns`.
fn in_netns(ns: &Path, args: &[&str]) -> Output {
    Command::new("nsenter")
        .arg(format!("--net={}", ns.display()))
        .args(args)
        .output()
        .expect("nsenter")
}

fn must(ns: &Path, args: &[&str]) -> String {
    let out = in_netns(ns, args);
    assert!(
        out.status.success(),
        "{args:?} in {}: {}",
        ns.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// GET `url` from `ns` with busybox wget, 5 s at most (Debian's static
/// busybox 1.35 wget segfaults with its own `-T`).
fn wget(ns: &Path, url: &str) -> Result<String, String> {
    let out = in_netns(
        ns,
        &["timeout", "5", "/bin/busybox", "wget", "-q", "-O", "-", url],
    );
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A LAN peer: a namespace on a veth from the shim's, at 192.168.77.2, with
/// no route to the pods (only masquerade lets pods reach it), serving
/// "hello-from-lan" on :9000. Killed by PID on drop.
struct LanPeer {
    holder: Child,
    httpd: Child,
}

impl LanPeer {
    fn new(shim: &Shim) -> Self {
        let host = shim.netns().expect("own netns");
        let holder = netns_holder();
        let ns = PathBuf::from(format!("/proc/{}/ns/net", holder.id()));
        let pid = holder.id().to_string();
        must(
            &host,
            &[
                "ip", "link", "add", "lan0", "type", "veth", "peer", "name", "eth0", "netns", &pid,
            ],
        );
        must(
            &host,
            &[
                "ip",
                "addr",
                "add",
                &format!("{LAN_HOST}/24"),
                "dev",
                "lan0",
            ],
        );
        must(&host, &["ip", "link", "set", "lan0", "up"]);
        must(
            &ns,
            &[
                "ip",
                "addr",
                "add",
                &format!("{LAN_PEER}/24"),
                "dev",
                "eth0",
            ],
        );
        must(&ns, &["ip", "link", "set", "eth0", "up"]);
        let www = shim.dir.path().join("www-lan");
        std::fs::create_dir_all(&www).expect("mkdir");
        std::fs::write(www.join("index.html"), "hello-from-lan\n").expect("write");
        let httpd = Command::new("nsenter")
            .arg(format!("--net={}", ns.display()))
            .args(["/bin/busybox", "httpd", "-f", "-p", "9000", "-h"])
            .arg(&www)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn httpd");
        let peer = Self { holder, httpd };
        eventually(
            "the LAN peer's httpd",
            Duration::from_secs(10),
            || wget(&peer.ns(), "http://127.0.0.1:9000/").is_ok(),
            String::new,
        );
        peer
    }

    fn ns(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.holder.id()))
    }
}

impl Drop for LanPeer {
    fn drop(&mut self) {
        for c in [&mut self.httpd, &mut self.holder] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What a pod leaves behind in the shim's network and on disk: host-local
/// leases, veths, iptables rules naming a sandbox, attachment records.
fn leftovers(shim: &Shim, sandbox_ids: &[String]) -> Vec<String> {
    let host = shim.netns().expect("own netns");
    let mut left = Vec::new();
    for e in std::fs::read_dir(ipam_dir(shim).join(NETWORK))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name != "lock" && !name.starts_with("last_reserved_ip") {
            left.push(format!("lease {name}"));
        }
    }
    for line in must(&host, &["ip", "-o", "link"]).lines() {
        // Debian's bridge names host ends veth*, picolet's pl<hash>.
        if line.contains("veth") || line.contains(": pl") {
            left.push(format!("link {line}"));
        }
    }
    let rules = must(&host, &["iptables-save"]);
    for line in rules.lines() {
        if sandbox_ids.iter().any(|id| line.contains(id.as_str()))
            || line.starts_with(":CNI-DN-")
            || line.contains("10.99.0.") && !line.contains("10.99.0.0/24")
        {
            left.push(format!("rule {line}"));
        }
    }
    for e in std::fs::read_dir(shim.root().join("shim/sandboxes"))
        .into_iter()
        .flatten()
        .flatten()
    {
        left.push(format!("sandbox record {}", e.path().display()));
    }
    left
}

fn web_pod(shim: &Shim, name: &str, host_port: i32) -> PodSandboxConfig {
    let mut pod = cri::pod(
        name,
        &shim.dir.path().join("pods").join(name),
        false,
        &shim.cgroup_parent(name),
    );
    pod.port_mappings = vec![PortMapping {
        protocol: Protocol::Tcp as i32,
        container_port: 80,
        host_port,
        host_ip: String::new(),
    }];
    pod
}

async fn pod_ip(c: &mut cri::Client, id: &str) -> String {
    c.pod_sandbox_status(PodSandboxStatusRequest {
        pod_sandbox_id: id.into(),
        verbose: false,
    })
    .await
    .expect("PodSandboxStatus")
    .into_inner()
    .status
    .and_then(|s| s.network)
    .map(|n| n.ip)
    .unwrap_or_default()
}

async fn network_ready(c: &mut cri::Client) -> (bool, String) {
    let st = c
        .status(StatusRequest { verbose: false })
        .await
        .expect("Status")
        .into_inner()
        .status
        .expect("status");
    let n = st
        .conditions
        .iter()
        .find(|c| c.r#type == "NetworkReady")
        .expect("NetworkReady condition");
    (n.status, n.message.clone())
}

fn ready_shim() -> Shim {
    let shim = Shim::start_in_own_netns();
    shim.import(&test_images().busybox_layout);
    shim
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_reach_each_other_a_host_port_answers_and_masquerade_reaches_the_lan() {
    require_root!();
    pods_reach_each_other(Net::Debian).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_builtin_plugin_pods_reach_each_other_a_host_port_answers_and_masquerade_reaches_the_lan()
 {
    require_root!();
    pods_reach_each_other(Net::Builtin).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_builtin_plugin_exec_d_as_a_binary_pods_reach_each_other_and_a_host_port_answers()
{
    require_root!();
    pods_reach_each_other(Net::BuiltinExec).await;
}

async fn pods_reach_each_other(net: Net) {
    let shim = ready_shim();
    let mut c = cri::client(&shim.socket()).await;
    let (ready, why) = network_ready(&mut c).await;
    assert!(!ready, "no config yet");
    assert!(why.contains("no network config found in"), "{why}");
    // A config written while the shim runs is used without a restart.
    write_conflist(net, &shim, "");
    assert_eq!(network_ready(&mut c).await, (true, String::new()));
    let host = shim.netns().expect("own netns");
    let lan = LanPeer::new(&shim);

    let web = web_pod(&shim, "web", 8080);
    let web_id = cri::run_pod(&mut c, &web).await;
    let web_ip = pod_ip(&mut c, &web_id).await;
    assert!(web_ip.starts_with("10.99.0."), "pod IP {web_ip:?}");
    let httpd = cri::container(
        "httpd",
        "busybox",
        &[
            "sh",
            "-c",
            "mkdir -p /www && echo hello-from-web > /www/index.html && exec httpd -f -p 80 -h /www",
        ],
    );
    let httpd_id = cri::create(&mut c, &web_id, &web, httpd).await;
    cri::start(&mut c, &httpd_id).await;

    // Pod to pod by IP.
    let client = web_pod(&shim, "client", 0);
    let client_id = cri::run_pod(&mut c, &client).await;
    let client_ip = pod_ip(&mut c, &client_id).await;
    assert!(client_ip.starts_with("10.99.0.") && client_ip != web_ip);
    let url = format!("http://{web_ip}/");
    let fetch = cri::container(
        "fetch",
        "busybox",
        &[
            "sh",
            "-c",
            &format!(
                "for i in $(seq 50); do timeout 2 wget -q -O - {url} && exit 0; sleep 0.1; done; exit 1"
            ),
        ],
    );
    let (st, log) = cri::run_to_exit(&mut c, &client_id, &client, fetch).await;
    assert_eq!(st.exit_code, 0, "pod to pod: {log}");
    assert!(log.contains("hello-from-web"), "{log}");

    // The host port, from the host and from a LAN peer.
    let from_host = wget(&host, &format!("http://{GATEWAY}:8080/"));
    assert_eq!(
        from_host.as_deref(),
        Ok("hello-from-web\n"),
        "from the host"
    );
    let from_lan = wget(&lan.ns(), &format!("http://{LAN_HOST}:8080/"));
    assert_eq!(from_lan.as_deref(), Ok("hello-from-web\n"), "from the LAN");

    // Out through masquerade: the peer has no route back to 10.99.0.0/24.
    let out = cri::container(
        "out",
        "busybox",
        &[
            "timeout",
            "5",
            "wget",
            "-q",
            "-O",
            "-",
            &format!("http://{LAN_PEER}:9000/"),
        ],
    );
    let (st, log) = cri::run_to_exit(&mut c, &client_id, &client, out).await;
    assert_eq!(st.exit_code, 0, "masquerade: {log}");
    assert!(log.contains("hello-from-lan"), "{log}");

    // The client's containers have all exited: its interfaces and counters
    // are still reported (read in the pod's namespace, as containerd does),
    // with a default interface, which the kubelet dereferences.
    let stats = c
        .pod_sandbox_stats(cri_proto::v1::PodSandboxStatsRequest {
            pod_sandbox_id: client_id.clone(),
        })
        .await
        .expect("PodSandboxStats")
        .into_inner()
        .stats
        .and_then(|s| s.linux)
        .expect("linux stats");
    let eth0 = stats
        .network
        .and_then(|n| n.default_interface)
        .expect("network usage with a default interface");
    assert_eq!(eth0.name, "eth0");
    assert!(
        eth0.rx_bytes.map_or(0, |v| v.value) > 0,
        "the client received pages: {eth0:?}"
    );

    let ids = vec![web_id.clone(), client_id.clone()];
    // The leak check sees each kind of thing a running pod holds, so its
    // empty answer below means something.
    let held = leftovers(&shim, &ids);
    for kind in ["lease ", "link ", "rule ", "sandbox record "] {
        assert!(
            held.iter().any(|l| l.starts_with(kind)),
            "no {kind}seen while pods run: {held:?}"
        );
    }
    cri::teardown(&mut c, &web_id).await;
    cri::teardown(&mut c, &client_id).await;
    assert_eq!(leftovers(&shim, &ids), Vec::<String>::new());
    assert!(
        wget(&host, &format!("http://{GATEWAY}:8080/")).is_err(),
        "the host port must be gone with the pod"
    );
    drop(lan);
    shim.assert_host_clean();
}

/// A chained plugin that, once per flag file `slow-ADD`/`slow-DEL` in
/// `dir`, records its pid in `in-<COMMAND>` and sleeps 3 s, then passes
/// the previous result through (Debian's `tuning`).
fn slow_plugin(shim: &Shim) {
    use std::os::unix::fs::PermissionsExt;
    let dir = shim.dir.path().display();
    let path = shim.cni_bin_dir().join("slowpass");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nif [ -e {dir}/slow-$CNI_COMMAND ]; then\n  rm -f {dir}/slow-$CNI_COMMAND\n  \
             echo $$ > {dir}/in-$CNI_COMMAND.tmp && mv {dir}/in-$CNI_COMMAND.tmp {dir}/in-$CNI_COMMAND\n  \
             sleep 3\nfi\nexec /usr/lib/cni/tuning\n"
        ),
    )
    .expect("write plugin");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Waits for the slow plugin to be in `command`; returns its pid.
fn wait_in(shim: &Shim, command: &str) -> i32 {
    let f = shim.dir.path().join(format!("in-{command}"));
    let mut pid = None;
    eventually(
        format!("the slow plugin in {command}"),
        Duration::from_secs(20),
        || {
            pid = std::fs::read_to_string(&f)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            pid.is_some()
        },
        || shim.log(),
    );
    std::fs::remove_file(&f).expect("rm");
    pid.expect("pid")
}

fn wait_gone(pid: i32) {
    eventually(
        "the orphaned plugin to finish",
        Duration::from_secs(10),
        || !Path::new(&format!("/proc/{pid}")).exists(),
        String::new,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_sandboxes_and_kill_9_during_add_and_del_leak_nothing() {
    require_root!();
    hundred_sandboxes_and_kill_9(Net::Debian).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_builtin_plugin_a_hundred_sandboxes_and_kill_9_during_add_and_del_leak_nothing() {
    require_root!();
    hundred_sandboxes_and_kill_9(Net::Builtin).await;
}

async fn hundred_sandboxes_and_kill_9(net: Net) {
    let mut shim = ready_shim();
    slow_plugin(&shim);
    write_conflist(net, &shim, r#", {"type": "slowpass"}"#);
    let mut c = cri::client(&shim.socket()).await;

    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..100 {
        let pod = web_pod(&shim, &format!("cycle{i}"), 8081);
        let id = cri::run_pod(&mut c, &pod).await;
        assert!(pod_ip(&mut c, &id).await.starts_with("10.99.0."));
        cri::teardown(&mut c, &id).await;
        ids.push(id);
    }
    eprintln!("100 sandbox cycles with {net:?}: {:?}", started.elapsed());
    assert_eq!(leftovers(&shim, &ids), Vec::<String>::new());
    // The built-in plugin adds its chains and base rules once, however
    // many pods came and went (it compares with what iptables lists).
    let nat = must(
        &shim.netns().expect("own netns"),
        &["iptables", "-t", "nat", "-S"],
    );
    let mut ours: Vec<&str> = nat.lines().filter(|l| l.contains("PICOLET")).collect();
    let listed = ours.len();
    ours.sort_unstable();
    ours.dedup();
    assert_eq!(ours.len(), listed, "a rule added twice:\n{nat}");

    // kill -9 of the shim while ADD runs (bridge and portmap done).
    std::fs::write(shim.dir.path().join("slow-ADD"), "").expect("flag");
    let pod = web_pod(&shim, "crash-add", 8082);
    let socket = shim.socket();
    let run = tokio::spawn(async move {
        let mut c = cri::client(&socket).await;
        cri::try_run_pod(&mut c, &pod).await
    });
    let plugin = wait_in(&shim, "ADD");
    shim.kill9();
    assert!(run.await.expect("join").is_err(), "the shim died");
    wait_gone(plugin);
    shim.spawn();
    let mut c = cri::client(&shim.socket()).await;
    eventually(
        "recovery to delete the half-made sandbox",
        Duration::from_secs(10),
        || leftovers(&shim, &[]).is_empty(),
        || format!("{:?}\n{}", leftovers(&shim, &[]), shim.log()),
    );

    // kill -9 while DEL runs at StopPodSandbox: RemovePodSandbox after the
    // restart deletes again from the attachment record.
    let pod = web_pod(&shim, "crash-del", 8083);
    let id = cri::run_pod(&mut c, &pod).await;
    std::fs::write(shim.dir.path().join("slow-DEL"), "").expect("flag");
    let socket = shim.socket();
    let sb = id.clone();
    let stop = tokio::spawn(async move {
        let mut c = cri::client(&socket).await;
        c.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: sb })
            .await
    });
    let plugin = wait_in(&shim, "DEL");
    shim.kill9();
    assert!(stop.await.expect("join").is_err(), "the shim died");
    wait_gone(plugin);
    shim.spawn();
    let mut c = cri::client(&shim.socket()).await;
    assert!(
        !leftovers(&shim, std::slice::from_ref(&id)).is_empty(),
        "DEL did not finish"
    );
    cri::teardown(&mut c, &id).await;
    assert_eq!(leftovers(&shim, &[id]), Vec::<String>::new());
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_config_or_a_failing_plugin_fails_run_pod_sandbox_and_leaks_nothing() {
    require_root!();
    let shim = ready_shim();
    let mut c = cri::client(&shim.socket()).await;
    std::fs::write(
        shim.cni_conf_dir().join("00-bad.conflist"),
        r#"{"cniVersion": "1.0.0", "name": "x", "plugins": [{"bridge": "cni0"}]}"#,
    )
    .expect("write");
    let (ready, why) = network_ready(&mut c).await;
    assert!(!ready);
    assert!(
        why.contains("00-bad.conflist: plugins[0].type: required"),
        "{why}"
    );
    let pod = web_pod(&shim, "bad", 0);
    let e = cri::try_run_pod(&mut c, &pod)
        .await
        .expect_err("bad config");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("00-bad.conflist"), "{}", e.message());
    std::fs::remove_file(shim.cni_conf_dir().join("00-bad.conflist")).expect("rm");

    // A plugin that is not installed: bridge's ADD is undone before the error.
    write_conflist(Net::Debian, &shim, r#", {"type": "no-such-plugin"}"#);
    let e = cri::try_run_pod(&mut c, &pod)
        .await
        .expect_err("missing plugin");
    assert_eq!(e.code(), Code::Unknown, "{e:?}");
    assert!(
        e.message()
            .contains("plugin type=\"no-such-plugin\" not found"),
        "{}",
        e.message()
    );
    // DEL skips the plugin that is not there and undoes bridge and portmap.
    assert_eq!(leftovers(&shim, &[]), Vec::<String>::new());

    // The built-in plugin names the field it cannot use.
    std::fs::write(
        shim.cni_conf_dir().join("10-e2e.conflist"),
        r#"{"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "picolet", "subnet": "10.99.0.1/24"}]}"#,
    )
    .expect("write");
    let e = cri::try_run_pod(&mut c, &pod)
        .await
        .expect_err("bad subnet");
    assert!(
        e.message().contains("plugin type=\"picolet\" failed (ADD): network config: subnet: \"10.99.0.1/24\": host bits set"),
        "{}",
        e.message()
    );
    assert_eq!(leftovers(&shim, &[]), Vec::<String>::new());
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_reports_pod_ips_probes_them_and_writes_kubelets_etc_hosts() {
    require_root!();
    let shim = Shim::start_in_own_netns();
    write_conflist(Net::Builtin, &shim, "");
    let agent = Agent::start_on(shim, "");
    agent.write_manifest(
        "web.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  hostAliases: [{ip: 10.1.2.3, hostnames: [foo.local, bar.local]}]\n  \
         containers:\n  - name: httpd\n    image: busybox:latest\n    \
         command: [sh, -c, 'mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 80 -h /www']\n    \
         ports: [{containerPort: 80, hostPort: 8086}]\n    \
         readinessProbe: {periodSeconds: 1, httpGet: {path: /, port: 80}}\n",
    );
    // Ready means the agent's httpGet probe reached the pod IP.
    let pod = agent.wait_pod("web", "Ready", Duration::from_secs(60), |p| {
        p["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    });
    let ip = pod["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(ip.starts_with("10.99.0."), "podIP {ip:?}: {pod}");
    assert_eq!(pod["status"]["podIPs"][0]["ip"], ip.as_str(), "{pod}");
    let host = agent.shim.netns().expect("own netns");
    assert_eq!(
        wget(&host, &format!("http://{GATEWAY}:8086/")).as_deref(),
        Ok("ok\n"),
        "the hostPort from the container's ports"
    );
    // kubelet's managed /etc/hosts: the pod's IP and name, the aliases.
    let mut c = cri::client(&agent.shim.socket()).await;
    let id = c
        .list_containers(cri_proto::v1::ListContainersRequest::default())
        .await
        .expect("ListContainers")
        .into_inner()
        .containers
        .into_iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == "httpd"))
        .expect("the httpd container")
        .id;
    let hosts = c
        .exec_sync(cri_proto::v1::ExecSyncRequest {
            container_id: id,
            cmd: vec!["cat".into(), "/etc/hosts".into()],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    let hosts = String::from_utf8_lossy(&hosts.stdout).into_owned();
    assert!(
        hosts.starts_with("# Kubernetes-managed hosts file.\n"),
        "{hosts}"
    );
    assert!(hosts.contains(&format!("\n{ip}\tweb-e2e\n")), "{hosts}");
    assert!(
        hosts.ends_with("# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"),
        "{hosts}"
    );
    agent.remove_manifest("web.yaml");
    agent.wait("the pod gone", Duration::from_secs(30), || {
        agent.pod("web").is_none()
    });
    assert_eq!(leftovers(&agent.shim, &[]), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_add_holds_up_no_other_sandbox_and_its_name_stays_taken() {
    require_root!();
    let shim = ready_shim();
    slow_plugin(&shim);
    write_conflist(Net::Debian, &shim, r#", {"type": "slowpass"}"#);
    std::fs::write(shim.dir.path().join("slow-ADD"), "").expect("flag");
    let slow = web_pod(&shim, "slow", 0);
    let socket = shim.socket();
    let slow_config = slow.clone();
    let slow_run = tokio::spawn(async move {
        let mut c = cri::client(&socket).await;
        let id = cri::run_pod(&mut c, &slow_config).await;
        (id, Instant::now())
    });
    let plugin = wait_in(&shim, "ADD");
    let mut c = cri::client(&shim.socket()).await;
    // The same name while its ADD runs: taken.
    let e = cri::try_run_pod(&mut c, &slow)
        .await
        .expect_err("the name is being created");
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    // Another pod is created meanwhile, not after the slow one.
    let fast = web_pod(&shim, "fast", 0);
    let fast_id = cri::run_pod(&mut c, &fast).await;
    let fast_done = Instant::now();
    let (slow_id, slow_done) = slow_run.await.expect("join");
    assert!(
        fast_done < slow_done,
        "the fast sandbox waited for the slow one's ADD"
    );
    wait_gone(plugin);
    cri::teardown(&mut c, &fast_id).await;
    cri::teardown(&mut c, &slow_id).await;
    assert_eq!(leftovers(&shim, &[fast_id, slow_id]), Vec::<String>::new());
    shim.assert_host_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bandwidth_annotations_reach_debians_bandwidth_plugin() {
    require_root!();
    let shim = ready_shim();
    write_conflist(
        Net::Debian,
        &shim,
        r#", {"type": "bandwidth", "capabilities": {"bandwidth": true}}"#,
    );
    let mut c = cri::client(&shim.socket()).await;
    let mut pod = web_pod(&shim, "limited", 0);
    pod.annotations
        .insert("kubernetes.io/ingress-bandwidth".into(), "1M".into());
    let id = cri::run_pod(&mut c, &pod).await;
    // The plugin shapes the pod's ingress with a token bucket on the
    // host side of its veth: 1M is 1,000,000 bit/s.
    let host = shim.netns().expect("own netns");
    let qdiscs = must(&host, &["tc", "qdisc", "show"]);
    assert!(
        qdiscs
            .lines()
            .any(|l| l.contains("tbf") && l.contains("rate 1Mbit")),
        "{qdiscs}"
    );
    cri::teardown(&mut c, &id).await;
    assert_eq!(
        leftovers(&shim, std::slice::from_ref(&id)),
        Vec::<String>::new()
    );
    shim.assert_host_clean();
}

/// `picolet up` on a device with no CNI config writes picolet's built-in
/// network, and the demo pod of examples/ (no hostNetwork) gets a
/// 10.42.0.0/16 address and answers on its hostPort from the node's
/// 127.0.0.1, as with hostNetwork before; gone with the pod, it leaves no
/// lease, veth or rule.
#[test]
fn up_without_a_network_config_gives_the_demo_pod_the_builtin_network() {
    require_root!();
    let mut up = Agent::prepare_on(Shim::start_in_own_netns(), "");
    up.shim.stop();
    up.command = "up";
    up.default_network = true;
    up.spawn();
    let host = up.shim.netns().expect("own netns");
    let written = up.shim.cni_conf_dir().join("10-picolet.conflist");
    let text = std::fs::read_to_string(&written).expect("up wrote the default network");
    assert!(
        text.contains(r#""type": "picolet""#) && text.contains("10.42.0.0/16"),
        "{text}"
    );
    let demo = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/manifests/hello.yaml"),
    )
    .expect("demo pod");
    assert!(
        !demo.contains("hostNetwork"),
        "the demo pod needs no host network"
    );
    up.write_manifest("hello.yaml", &demo);
    let ready = |p: &serde_json::Value| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    };
    let pod = up.wait_pod("hello", "Ready", Duration::from_secs(60), ready);
    let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
    assert!(ip.starts_with("10.42."), "pod IP {ip:?}");
    for url in [
        "http://127.0.0.1:8080/".to_string(),
        format!("http://{ip}:8080/"),
    ] {
        let page = wget(&host, &url);
        assert_eq!(
            page.as_deref(),
            Ok("hello from hello-e2e on e2e\n"),
            "{url} from the node"
        );
    }
    let leases = up.shim.root().join("cni/picolet");
    let pod_things = |ip: &str| {
        let mut v: Vec<String> = std::fs::read_dir(&leases)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.parse::<std::net::Ipv4Addr>().is_ok())
            .collect();
        v.extend(
            must(&host, &["ip", "-o", "link"])
                .lines()
                .filter(|l| l.contains(": pl"))
                .map(String::from),
        );
        v.extend(
            must(&host, &["iptables-save", "-t", "nat"])
                .lines()
                .filter(|l| l.contains(ip))
                .map(String::from),
        );
        v
    };
    assert_eq!(
        pod_things(ip).len(),
        3,
        "a lease, a veth, a DNAT rule: {:?}",
        pod_things(ip)
    );
    up.remove_manifest("hello.yaml");
    up.wait("the demo pod gone", Duration::from_secs(30), || {
        up.try_items("/pods").is_ok_and(|p| p.is_empty())
    });
    eventually(
        "the pod's network gone",
        Duration::from_secs(10),
        || pod_things(ip).is_empty(),
        || format!("{:?}", pod_things(ip)),
    );
}
