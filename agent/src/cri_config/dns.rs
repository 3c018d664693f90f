//! DNS of a sandbox as kubelet's `dns.go` sets it: the host's resolv.conf
//! for `Default`, cluster DNS with search paths for `ClusterFirst`, the
//! pod's own `dnsConfig` on top. Pure.

use cri_proto::v1::DnsConfig;
use k8s_openapi::api::core::v1::PodSpec;

use super::SandboxEnv;

/// Parses resolv.conf text into (servers, searches, options).
pub fn parse_resolv_conf(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut servers, mut searches, mut options) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => servers.extend(words.next().map(String::from)),
            Some("search" | "domain") => searches = words.map(String::from).collect(),
            Some("options") => options.extend(words.map(String::from)),
            _ => {}
        }
    }
    (servers, searches, options)
}

pub(super) fn dns_config(spec: &PodSpec, ns: &str, env: &SandboxEnv) -> Option<DnsConfig> {
    let host_network = spec.host_network.unwrap_or(false);
    let mut policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    if policy == "ClusterFirst" && host_network {
        policy = "Default";
    }
    if policy.starts_with("ClusterFirst") && env.cluster_dns.is_empty() {
        // kubelet: no clusterDNS → falls back to the node's resolver.
        policy = "Default";
    }
    let (mut servers, mut searches, mut options) = match policy {
        "None" => (Vec::new(), Vec::new(), Vec::new()),
        "Default" => parse_resolv_conf(&env.host_resolv_conf),
        _ => {
            let (_, host_search, _) = parse_resolv_conf(&env.host_resolv_conf);
            let d = &env.cluster_domain;
            let mut s = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()];
            s.extend(host_search);
            (env.cluster_dns.clone(), s, vec!["ndots:5".into()])
        }
    };
    if let Some(extra) = &spec.dns_config {
        servers.extend(extra.nameservers.iter().flatten().cloned());
        searches.extend(extra.searches.iter().flatten().cloned());
        for o in extra.options.iter().flatten() {
            let name = o.name.clone().unwrap_or_default();
            options.retain(|x| x.split(':').next() != Some(name.as_str()));
            options.push(match &o.value {
                Some(v) => format!("{name}:{v}"),
                None => name,
            });
        }
    }
    if policy == "Default" && servers.is_empty() && searches.is_empty() && options.is_empty() {
        return None; // the runtime copies the host's file
    }
    Some(DnsConfig {
        servers,
        searches,
        options,
    })
}
