//! The pod's `/etc/hosts`, as kubelet's `makeHostsMount` writes it: for a
//! pod network, localhost entries, the pod's IPs with its hostname (and
//! FQDN with a `subdomain`) and the `hostAliases`; for a host-network pod,
//! the node's file and the aliases. Mounted into every container of a pod
//! that has an IP, unless a volume is mounted at /etc/hosts.

use k8s_openapi::api::core::v1::Pod;

/// The path kubelet mounts it at.
pub const ETC_HOSTS: &str = "/etc/hosts";

/// The file's content. `node_hosts`: the node's /etc/hosts, read by the
/// caller (host-network pods only).
pub fn content(pod: &Pod, pod_ips: &[&str], cluster_domain: &str, node_hosts: &str) -> String {
    let spec = pod.spec.as_ref();
    let mut out = String::new();
    if spec.and_then(|s| s.host_network).unwrap_or(false) {
        out.push_str(node_hosts);
    } else {
        out.push_str("# Kubernetes-managed hosts file.\n");
        out.push_str("127.0.0.1\tlocalhost\n");
        out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\n");
        out.push_str("fe00::0\tip6-mcastprefix\n");
        out.push_str("fe00::1\tip6-allnodes\n");
        out.push_str("fe00::2\tip6-allrouters\n");
        let hostname = super::hostname(pod);
        let domain = spec
            .and_then(|s| s.subdomain.as_deref())
            .filter(|s| !s.is_empty())
            .map(|sub| {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
                format!("{sub}.{ns}.svc.{cluster_domain}")
            });
        for ip in pod_ips {
            match &domain {
                Some(d) => out.push_str(&format!("{ip}\t{hostname}.{d}\t{hostname}\n")),
                None => out.push_str(&format!("{ip}\t{hostname}\n")),
            }
        }
    }
    let aliases = spec.and_then(|s| s.host_aliases.as_ref());
    if let Some(aliases) = aliases.filter(|a| !a.is_empty()) {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.clone().unwrap_or_default().join("\t");
            out.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
    out
}

/// Whether a container gets the managed file: the pod has an IP and no
/// volume of the container is mounted at /etc/hosts (kubelet's rule).
pub fn mounted(c: &k8s_openapi::api::core::v1::Container, pod_ip: &str) -> bool {
    !pod_ip.is_empty()
        && !c
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == ETC_HOSTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        let v: serde_json::Value = serde_yaml::from_str(yaml).expect("yaml");
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn pod_network_with_subdomain_and_aliases_as_kubelet() {
        let p = pod("metadata: {name: web, namespace: shop}\n\
             spec:\n  hostname: w1\n  subdomain: backend\n  containers: [{name: a}]\n  \
             hostAliases:\n  - ip: 10.1.2.3\n    hostnames: [foo.local, bar.local]\n");
        assert_eq!(
            content(&p, &["10.99.0.5"], "cluster.local", "ignored"),
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n\
             fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             10.99.0.5\tw1.backend.shop.svc.cluster.local\tw1\n\
             \n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"
        );
    }

    #[test]
    fn pod_name_as_hostname_and_host_network_keeps_the_nodes_file() {
        let p = pod("metadata: {name: web}\nspec: {containers: [{name: a}]}\n");
        let text = content(&p, &["10.99.0.5"], "cluster.local", "");
        assert!(
            text.ends_with("fe00::2\tip6-allrouters\n10.99.0.5\tweb\n"),
            "{text}"
        );
        let h = pod(
            "metadata: {name: web}\nspec:\n  hostNetwork: true\n  containers: [{name: a}]\n  \
             hostAliases: [{ip: 10.1.2.3, hostnames: [foo]}]\n",
        );
        assert_eq!(
            content(&h, &["192.168.1.5"], "", "127.0.0.1 localhost\n"),
            "127.0.0.1 localhost\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo\n"
        );
    }

    #[test]
    fn a_volume_at_etc_hosts_wins() {
        let p = pod(
            "metadata: {name: web}\nspec:\n  containers:\n  - name: a\n    \
             volumeMounts: [{name: h, mountPath: /etc/hosts}]\n  - name: b\n",
        );
        let spec = p.spec.expect("spec");
        assert!(!mounted(&spec.containers[0], "10.99.0.5"));
        assert!(mounted(&spec.containers[1], "10.99.0.5"));
        assert!(!mounted(&spec.containers[1], ""));
    }
}
