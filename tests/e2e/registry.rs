//! Pulls from a real registry: Debian's `docker-registry` (distribution 2.8)
//! on 127.0.0.1, images pushed to it with skopeo. Plain HTTP through a
//! mirror entry with a rewrite; TLS with a test CA and htpasswd basic auth;
//! a multi-arch index; a download broken off halfway and resumed; a blob
//! corrupted at the registry; concurrent pulls of one image; and CRI
//! PullImage with credentials through the real shim. Root: layers are
//! unpacked with their owners and whiteouts.

use crate::common;
mod peers;
mod token_server;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Shim, spec, test_images};
use cri_proto::v1::{AuthConfig, ImageStatusRequest, PullImageRequest};
use images::{Platform, Reference};
use peers::{Auth, Node, PASSWORD, Pki, Registry, USER, busybox_base, require_peers, right};
use registry::{Credential, Kind, Progress};
use token_server::TokenServer;
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
async fn anonymous_pulls_through_mirrors_with_rewrites_and_platform_indexes() {
    require_root!();
    if !require_peers() {
        return;
    }
    let t = test_images();
    let reg = Registry::start(false, false);
    reg.push(
        &t.busybox_layout,
        "latest",
        "mirrored/busybox:latest",
        false,
    );
    reg.push(&t.multiarch_layout, "v1", "picolet-test/multiarch:v1", true);
    // registry.invalid is never reached: its mirror answers, with the
    // repository rewritten. The registry itself speaks plain HTTP: a mirror
    // entry at its own address says so.
    let yaml = format!(
        "mirrors:\n  registry.invalid:\n    endpoint: [\"http://{a}\"]\n    rewrite: {{\"^team/(.*)\": \"mirrored/$1\"}}\n  \"{a}\":\n    endpoint: [\"http://{a}\"]\n",
        a = reg.addr
    );
    let node = Node::new(&yaml);
    let (rec, progress) = node
        .pull("registry.invalid/team/busybox:latest", None)
        .await
        .expect("pull through the mirror");
    assert_eq!(rec.repo_tags, ["registry.invalid/team/busybox:latest"]);
    assert!(
        rec.repo_digests[0].starts_with("registry.invalid/team/busybox@sha256:"),
        "{:?}",
        rec.repo_digests
    );
    assert_eq!(
        progress.total.load(Ordering::Relaxed),
        rec.size() - rec.manifest_size
    );
    assert_eq!(progress.layers_done.load(Ordering::Relaxed), 1);
    let bin = node
        .store
        .layer_dirs(&rec)
        .iter()
        .any(|d| d.join("bin/busybox").is_file());
    assert!(bin, "busybox unpacked");
    // Nothing left half-way.
    assert_eq!(
        std::fs::read_dir(node.dir.path().join("store/partial"))
            .expect("partial")
            .count(),
        0
    );

    // The index resolves to the store's platform, each way round; the repo
    // digest is the index's, as with containerd.
    let multi = format!("{}/picolet-test/multiarch:v1", reg.addr);
    for arch in ["amd64", "arm64"] {
        let platform = Platform::parse(&format!("linux/{arch}")).expect("platform");
        let n = Node::for_platform(&yaml, platform);
        let (rec, _) = n.pull(&multi, None).await.expect("pull multi-arch");
        assert_eq!(
            n.file_in_image(&multi, "arch").as_deref(),
            Some(format!("{arch}\n").as_str())
        );
        let by_digest = rec.repo_digests[0].clone();
        assert_ne!(
            by_digest,
            format!("{}/picolet-test/multiarch@{}", reg.addr, rec.manifest)
        );
        // Pull by that digest into another store: the same image.
        let n2 = Node::for_platform(&yaml, Platform::parse(&format!("linux/{arch}")).expect("p"));
        let (again, _) = n2.pull(&by_digest, None).await.expect("pull by digest");
        assert_eq!(again.id, rec.id);
    }
    let riscv = Node::for_platform(&yaml, Platform::parse("linux/riscv64").expect("p"));
    let err = riscv
        .pull(&multi, None)
        .await
        .expect_err("no riscv64 image");
    assert!(
        err.message.contains("no image for platform linux/riscv64"),
        "{err}"
    );

    // Errors name the reference, the registry and the status.
    let err = node
        .pull(&format!("{}/mirrored/busybox:nope", reg.addr), None)
        .await
        .expect_err("unknown tag");
    assert_eq!(err.kind, Kind::NotFound);
    assert!(
        err.message.contains(&format!("({})", reg.addr))
            && err.message.contains("HTTP 404 Not Found: MANIFEST_UNKNOWN"),
        "{err}"
    );
    let wrong = format!("{}/mirrored/busybox@sha256:{}", reg.addr, "0".repeat(64));
    let err = node.pull(&wrong, None).await.expect_err("unknown digest");
    assert_eq!(err.kind, Kind::NotFound, "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn basic_auth_over_tls_with_a_test_ca_and_a_refused_unknown_ca() {
    require_root!();
    if !require_peers() {
        return;
    }
    let t = test_images();
    let reg = Registry::start(true, true);
    reg.push(&t.busybox_layout, "latest", "edge/busybox:v1", false);
    let image = format!("{}/edge/busybox:v1", reg.addr);
    let ca = reg.tls.as_ref().expect("pki").ca.display().to_string();
    let trusted = format!(
        "configs:\n  \"{}\":\n    tls: {{ca_file: {ca}}}\n",
        reg.addr
    );
    let node = Node::new(&trusted);

    let err = node.pull(&image, None).await.expect_err("no credentials");
    assert_eq!(err.kind, Kind::Unauthorized, "{err}");
    assert!(
        err.message.contains("HTTP 401") && err.message.contains(&reg.addr),
        "{err}"
    );
    let wrong = Some(Credential {
        username: USER.into(),
        password: "guess".into(),
        ..Default::default()
    });
    let err = node.pull(&image, wrong).await.expect_err("wrong password");
    assert_eq!(err.kind, Kind::Unauthorized, "{err}");
    assert!(err.message.contains("credentials refused"), "{err}");
    let (rec, _) = node.pull(&image, right()).await.expect("right password");
    assert_eq!(rec.repo_tags, std::slice::from_ref(&image));

    // Credentials from registries.yaml, base64 `auth` form.
    let with_auth = format!(
        "configs:\n  \"{}\":\n    auth: {{auth: ZWRnZTpwdWxsLW1l}}\n    tls: {{ca_file: {ca}}}\n",
        reg.addr
    );
    Node::new(&with_auth)
        .pull(&image, None)
        .await
        .expect("credentials from registries.yaml");

    // The system's CAs do not know the test CA.
    let err = Node::new("")
        .pull(&image, right())
        .await
        .expect_err("unknown CA");
    assert_eq!(err.kind, Kind::Unreachable, "{err}");
    assert!(
        err.message.contains(&format!("TLS with {}", reg.addr))
            && err.message.contains("UnknownIssuer"),
        "{err}"
    );
    // Another CA is no better.
    let other = Pki::make(node.dir.path(), "other");
    let err = Node::new(&format!(
        "configs:\n  \"{}\":\n    tls: {{ca_file: {}}}\n",
        reg.addr,
        other.ca.display()
    ))
    .pull(&image, right())
    .await
    .expect_err("another CA");
    assert!(err.message.contains("UnknownIssuer"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bearer_tokens_from_a_token_server_with_basic_credentials_or_a_refresh_token() {
    require_root!();
    if !require_peers() {
        return;
    }
    let t = test_images();
    let work = tempfile::tempdir().expect("tempdir");
    let tokens = TokenServer::start(work.path(), USER, PASSWORD);
    let reg = Registry::start_with(false, Auth::Token(&tokens));
    reg.push(&t.busybox_layout, "latest", "edge/busybox:v1", false);
    reg.push(&t.layered_layout, "v1", "edge/layered:v1", false);
    let yaml = reg.plain_http_yaml();
    let image = format!("{}/edge/busybox:v1", reg.addr);
    let node = Node::new(&yaml);

    let err = node.pull(&image, None).await.expect_err("anonymous");
    assert_eq!(err.kind, Kind::Unauthorized, "{err}");
    assert!(
        err.message
            .contains(&format!("token server {}: HTTP 401", tokens.realm)),
        "{err}"
    );
    let before = tokens.issued.load(Ordering::SeqCst);
    let (rec, _) = node
        .pull(&image, right())
        .await
        .expect("token for basic credentials");
    assert_eq!(tokens.issued.load(Ordering::SeqCst), before + 1);
    // The same scope again: the cached token, no new one.
    node.store.remove(&image).expect("remove");
    let (again, _) = node.pull(&image, right()).await.expect("cached token");
    assert_eq!(again.id, rec.id);
    assert_eq!(tokens.issued.load(Ordering::SeqCst), before + 1);
    // A token got with the right password never serves a wrong one.
    node.store.remove(&image).expect("remove");
    let wrong = Some(Credential {
        username: USER.into(),
        password: "guess".into(),
        ..Default::default()
    });
    let err = node
        .pull(&image, wrong)
        .await
        .expect_err("wrong password, cached token");
    assert_eq!(err.kind, Kind::Unauthorized, "{err}");
    // Another repository is another scope.
    node.pull(&format!("{}/edge/layered:v1", reg.addr), right())
        .await
        .expect("layered");
    assert_eq!(tokens.issued.load(Ordering::SeqCst), before + 2);

    // An identity token (OAuth2 refresh token), as docker login leaves it.
    let identity = |token: &str| {
        Some(Credential {
            identity_token: token.into(),
            ..Default::default()
        })
    };
    let err = Node::new(&yaml)
        .pull(&image, identity("stale"))
        .await
        .expect_err("stale refresh token");
    assert_eq!(err.kind, Kind::Unauthorized, "{err}");
    Node::new(&yaml)
        .pull(&image, identity(token_server::REFRESH_TOKEN))
        .await
        .expect("token for a refresh token");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_download_resumes_and_a_corrupted_blob_is_refused() {
    require_root!();
    if !require_peers() {
        return;
    }
    let t = test_images();
    let reg = Registry::start(false, false);
    // A 16 MiB incompressible layer over busybox.
    let base = busybox_base();
    let big = xtask::big_image(&base, 16);
    let big_layer = big.layers[1].blob();
    let big_digest = xtask::sha256(&big_layer);
    let work = tempfile::tempdir().expect("tempdir");
    xtask::write_oci_layout(&work.path().join("big.oci"), std::slice::from_ref(&big))
        .expect("layout");
    reg.push(&work.path().join("big.oci"), "v1", "bench/big:v1", false);
    reg.push(&t.busybox_layout, "latest", "broken/busybox:v1", false);
    let yaml = reg.plain_http_yaml();

    // What a pull cut off halfway leaves: the first half of the layer.
    let node = Node::new(&yaml);
    let half = big_layer.len() / 2;
    let partial = node.partial(&big_digest);
    std::fs::write(&partial, &big_layer[..half]).expect("partial");
    let image = format!("{}/bench/big:v1", reg.addr);
    let (rec, progress) = node.pull(&image, None).await.expect("resumed pull");
    let fetched = progress.fetched.load(Ordering::Relaxed);
    let busybox_blob = base.blob().len() as u64;
    // The rest of the big layer, busybox's layer and the config: not the first half again.
    assert!(
        fetched < (big_layer.len() - half) as u64 + busybox_blob + 4096,
        "fetched {fetched} bytes of a {} byte layer whose first {half} were there",
        big_layer.len()
    );
    assert_eq!(
        progress.done.load(Ordering::Relaxed),
        progress.total.load(Ordering::Relaxed)
    );
    assert!(!partial.exists());
    let blob = node
        .store
        .blobs()
        .path(&images::Digest::parse(&big_digest).expect("digest"));
    assert_eq!(std::fs::read(blob).expect("blob"), big_layer);
    assert_eq!(rec.layers.len(), 2);

    // A partial file with the wrong bytes: the whole is refused, nothing
    // stays, and the next pull starts over and succeeds.
    let again = Node::new(&yaml);
    let partial = again.partial(&big_digest);
    std::fs::write(&partial, vec![0u8; half]).expect("bad partial");
    let err = again.pull(&image, None).await.expect_err("bad partial");
    assert!(
        err.message
            .contains(&format!("blob {big_digest}: content hashes to")),
        "{err}"
    );
    assert!(!partial.exists());
    again.pull(&image, None).await.expect("starts over");

    // Every byte there, the kill landed before the rename into blobs/: the
    // registry is not asked for the layer again (a `Range: bytes=N-` at its
    // end is a 416, which must not throw the whole file away).
    let whole = Node::new(&yaml);
    let partial = whole.partial(&big_digest);
    std::fs::write(&partial, &big_layer).expect("whole partial");
    let (_, progress) = whole.pull(&image, None).await.expect("whole partial");
    let fetched = progress.fetched.load(Ordering::Relaxed);
    assert!(
        fetched < busybox_blob + 4096,
        "fetched {fetched} bytes although the {} byte layer was all there",
        big_layer.len()
    );
    assert!(!partial.exists());

    // A blob the registry serves corrupted (same size, one byte changed).
    let layer_digest = xtask::sha256(&base.blob());
    let stored = reg.blob_file(&layer_digest);
    let mut bytes = std::fs::read(&stored).expect("registry blob");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&stored, bytes).expect("corrupt");
    let fresh = Node::new(&yaml);
    let err = fresh
        .pull(&format!("{}/broken/busybox:v1", reg.addr), None)
        .await
        .expect_err("corrupted blob");
    assert_eq!(err.kind, Kind::Other);
    assert!(
        err.message
            .contains(&format!("blob {layer_digest}: content hashes to"))
            && err.message.contains("corrupted, not stored"),
        "{err}"
    );
    let d = images::Digest::parse(&layer_digest).expect("digest");
    assert!(!fresh.store.blobs().contains(&d));
    assert_eq!(
        std::fs::read_dir(fresh.dir.path().join("store/partial"))
            .expect("partial")
            .count(),
        0
    );
    assert!(fresh.store.list().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_pulls_of_one_image_download_it_once() {
    require_root!();
    if !require_peers() {
        return;
    }
    let t = test_images();
    let reg = Registry::start(false, false);
    reg.push(&t.layered_layout, "v1", "layered:v1", false);
    let yaml = reg.plain_http_yaml();
    let node = Node::new(&yaml);
    let image = format!("{}/layered:v1", reg.addr);
    let pulls: Vec<_> = (0..4)
        .map(|_| {
            let (puller, r) = (node.puller.clone(), Reference::parse(&image).expect("ref"));
            tokio::spawn(async move {
                let p = Arc::new(Progress::default());
                let rec = puller.pull(&r, None, p.clone()).await.expect("pull");
                (
                    rec,
                    p.fetched.load(Ordering::Relaxed),
                    p.total.load(Ordering::Relaxed),
                )
            })
        })
        .collect();
    let mut fetched = 0;
    let mut ids = Vec::new();
    let mut total = 0;
    for p in pulls {
        let (rec, f, t) = p.await.expect("task");
        fetched += f;
        total = t;
        ids.push(rec.id);
    }
    ids.dedup();
    assert_eq!(ids.len(), 1);
    assert_eq!(
        fetched, total,
        "four pulls fetched {fetched} bytes of a {total} byte image"
    );
    assert_eq!(node.store.list().len(), 1);
    // A pulled image is removed and collected like an imported one.
    node.store.remove(&image).expect("remove");
    assert!(node.store.blobs().list().expect("blobs").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn registries_yaml_is_read_again_when_it_changes() {
    require_root!();
    if !require_peers() {
        return;
    }
    let t = test_images();
    let reg = Registry::start(false, false);
    reg.push(&t.busybox_layout, "latest", "edge/busybox:v1", false);
    let node = Node::new("");
    let image = format!("{}/edge/busybox:v1", reg.addr);
    // Without a mirror entry the registry is spoken to over TLS, which it lacks.
    let err = node
        .pull(&image, None)
        .await
        .expect_err("https to a plain registry");
    assert_eq!(err.kind, Kind::Unreachable, "{err}");
    std::fs::write(
        node.dir.path().join("registries.yaml"),
        reg.plain_http_yaml(),
    )
    .expect("new yaml");
    node.pull(&image, None)
        .await
        .expect("pull after the change");
    // A broken file fails pulls naming it, until it is mended.
    std::fs::write(node.dir.path().join("registries.yaml"), "mirrors: [").expect("broken");
    node.store.remove(&image).expect("remove");
    let err = node.pull(&image, None).await.expect_err("broken yaml");
    assert!(err.message.contains("registries.yaml"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cri_pull_image_with_credentials_and_ctl_pull() {
    require_root!();
    if !require_peers() {
        return;
    }
    let t = test_images();
    let reg = Registry::start(true, true);
    reg.push(&t.busybox_layout, "latest", "edge/busybox:v1", false);
    reg.push(&t.layered_layout, "v1", "edge/layered:v1", false);
    let ca = reg.tls.as_ref().expect("pki").ca.display().to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = dir.path().join("registries.yaml");
    std::fs::write(
        &yaml,
        format!(
            "configs:\n  \"{}\":\n    tls: {{ca_file: {ca}}}\n",
            reg.addr
        ),
    )
    .expect("yaml");
    let shim =
        Shim::start_with_config(&format!("picolet:\n  registryConfig: {}\n", yaml.display()));
    let mut client = shim.client().await;
    let image = format!("{}/edge/busybox:v1", reg.addr);
    let pull = |auth: Option<AuthConfig>| PullImageRequest {
        image: Some(spec(&image)),
        auth,
        ..Default::default()
    };
    let err = client.pull_image(pull(None)).await.expect_err("anonymous");
    assert_eq!(err.code(), Code::PermissionDenied, "{}", err.message());
    // kubelet sends a pull secret's `auth` as it is.
    let auth = AuthConfig {
        auth: "ZWRnZTpwdWxsLW1l".into(),
        ..Default::default()
    };
    let id = client
        .pull_image(pull(Some(auth)))
        .await
        .expect("pull with credentials")
        .into_inner()
        .image_ref;
    let status = client
        .image_status(ImageStatusRequest {
            image: Some(spec(&image)),
            verbose: false,
        })
        .await
        .expect("status")
        .into_inner()
        .image
        .expect("image");
    assert_eq!(status.id, id);
    assert!(status.repo_digests[0].starts_with(&format!("{}/edge/busybox@sha256:", reg.addr)));

    // `picolet ctl pull` with --creds, then again: up to date.
    let layered = format!("{}/edge/layered:v1", reg.addr);
    let out = shim.ctl(&["pull", &layered, "--creds", &format!("{USER}:{PASSWORD}")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with(&format!("pulled {layered} sha256:")),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = shim.ctl(&["pull", &layered, "--creds", &format!("{USER}:{PASSWORD}")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("is up to date"));
    let out = shim.ctl(&["pull", &layered]);
    assert!(
        !out.status.success(),
        "pulled with credentials, given without"
    );
    let log = std::fs::read_to_string(shim.dir.path().join("shim.log")).expect("log");
    assert!(log.contains("pulled") && log.contains("fetched="), "{log}");
    assert!(!log.contains(PASSWORD), "the shim logged a password");
}

/// An image pulled with one pod's credentials is not given to a pod that
/// brings none or other ones (kubelet's `KubeletEnsureSecretPulledImages`):
/// the registry must accept theirs, and offline only the same credentials
/// get it. A registry that never asks for credentials makes the image public.
#[tokio::test(flavor = "multi_thread")]
async fn an_image_pulled_with_credentials_is_given_only_to_those_the_registry_accepts() {
    require_root!();
    if !require_peers() {
        return;
    }
    let t = test_images();
    let mut private = Registry::start(true, true);
    private.push(&t.busybox_layout, "latest", "edge/busybox:v1", false);
    let mut open = Registry::start(false, false);
    open.push(&t.layered_layout, "v1", "edge/layered:v1", false);
    let ca = private.tls.as_ref().expect("pki").ca.display().to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = dir.path().join("registries.yaml");
    std::fs::write(
        &yaml,
        format!(
            "configs:\n  \"{}\":\n    tls: {{ca_file: {ca}}}\n{}",
            private.addr,
            open.plain_http_yaml()
        ),
    )
    .expect("yaml");
    let shim =
        Shim::start_with_config(&format!("picolet:\n  registryConfig: {}\n", yaml.display()));
    let mut client = shim.client().await;
    let pull = |image: &str, user: Option<(&str, &str)>| PullImageRequest {
        image: Some(spec(image)),
        auth: user.map(|(u, p)| AuthConfig {
            username: u.into(),
            password: p.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let image = format!("{}/edge/busybox:v1", private.addr);
    let id = client
        .pull_image(pull(&image, Some((USER, PASSWORD))))
        .await
        .expect("pull with credentials")
        .into_inner()
        .image_ref;
    for (who, user) in [("none", None), ("wrong", Some((USER, "guess")))] {
        let err = client.pull_image(pull(&image, user)).await.expect_err(who);
        assert_eq!(
            err.code(),
            Code::PermissionDenied,
            "{who}: {}",
            err.message()
        );
        assert!(
            err.message().contains("pulled with other credentials"),
            "{who}: {}",
            err.message()
        );
    }
    let err = client.pull_image(pull(&id, None)).await.expect_err("by ID");
    assert_eq!(err.code(), Code::PermissionDenied, "{}", err.message());
    // An open registry given credentials never asks for them: public.
    let layered = format!("{}/edge/layered:v1", open.addr);
    client
        .pull_image(pull(&layered, Some((USER, PASSWORD))))
        .await
        .expect("pull from an open registry");

    private.stop();
    open.stop();
    // Offline: the same credentials still get the private image, others
    // cannot be checked; the public one needs none.
    let again = client
        .pull_image(pull(&image, Some((USER, PASSWORD))))
        .await
        .expect("the same credentials, offline")
        .into_inner()
        .image_ref;
    assert_eq!(again, id);
    let err = client
        .pull_image(pull(&image, None))
        .await
        .expect_err("no credentials, offline");
    assert_eq!(err.code(), Code::Unavailable, "{}", err.message());
    client
        .pull_image(pull(&layered, None))
        .await
        .expect("a public image, offline");
    let meta = std::fs::read_to_string(shim.store().join("images.json"));
    let meta = meta.expect("images.json");
    assert!(
        !meta.contains(PASSWORD) && meta.contains("pulled_with"),
        "{meta}"
    );
}

/// `kill -9` of the shim in the middle of a pull leaves a store the
/// verifier passes, no image, and a partial download the next pull resumes.
#[tokio::test(flavor = "multi_thread")]
async fn kill9_during_a_pull_leaves_a_whole_store_and_the_next_pull_resumes() {
    require_root!();
    if !require_peers() {
        return;
    }
    let reg = Registry::start(false, false);
    let base = busybox_base();
    let big = xtask::big_image(&base, 128);
    let layer = big.layers[1].blob().len() as u64;
    let work = tempfile::tempdir().expect("tempdir");
    xtask::write_oci_layout(&work.path().join("big.oci"), std::slice::from_ref(&big))
        .expect("layout");
    reg.push(&work.path().join("big.oci"), "v1", "bench/big:v1", false);
    let yaml = work.path().join("registries.yaml");
    std::fs::write(&yaml, reg.plain_http_yaml()).expect("yaml");
    let mut shim =
        Shim::start_with_config(&format!("picolet:\n  registryConfig: {}\n", yaml.display()));
    let image = format!("{}/bench/big:v1", reg.addr);
    let mut ctl = Command::new(common::picolet())
        .args(["ctl", "--socket"])
        .arg(shim.socket())
        .args(["pull", &image])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ctl pull");
    let partial = shim.store().join("partial");
    common::eventually_async(
        "the pull to be downloading",
        Duration::from_secs(60),
        async || {
            std::fs::read_dir(&partial)
                .is_ok_and(|d| d.flatten().any(|e| e.metadata().is_ok_and(|m| m.len() > 0)))
        },
        String::new,
    )
    .await;
    shim.kill9();
    let _ = ctl.wait();
    let left: u64 = std::fs::read_dir(&partial)
        .expect("partial dir")
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    let (ok, said) = common::check_store(&shim.root());
    assert!(ok, "store damaged by kill -9 mid-pull: {said}");

    shim.spawn();
    assert!(
        shim.status(&image).await.is_none(),
        "a half-pulled image is visible"
    );
    let mut client = shim.client().await;
    client
        .pull_image(PullImageRequest {
            image: Some(spec(&image)),
            ..Default::default()
        })
        .await
        .expect("pull after the restart");
    let log = std::fs::read_to_string(shim.dir.path().join("shim.log")).expect("log");
    let fetched: u64 = log
        .lines()
        .filter(|l| l.contains("pulled image="))
        .filter_map(|l| l.split("fetched=").nth(1))
        .filter_map(|f| f.split_whitespace().next()?.parse().ok())
        .next_back()
        .expect("a pulled line");
    eprintln!("kill -9 left {left} of {layer} bytes; the next pull fetched {fetched}");
    if left > 0 {
        assert!(
            fetched + left <= layer + base.blob().len() as u64 + 4096,
            "the next pull fetched {fetched} bytes although {left} were kept"
        );
    }
    let (ok, said) = {
        shim.stop();
        common::check_store(&shim.root())
    };
    assert!(ok, "store after the resumed pull: {said}");
}
