//! The arrows between modules inside the agent and the shim (tests/deps.rs
//! holds those between crates), as kubelet keeps `.import-restrictions`
//! per package. Read from the source: every `crate::` path outside
//! comments and unit tests is an arrow from the referring module's top
//! level to the referred one's. Each table below lists, per module, every
//! module it may use; a new arrow is a decision, so it is made here, in
//! review. The tables must also stay free of circles.
//!
//! Pure modules may use only pure modules and none of tokio, nix, tonic or
//! hyper: what they decide is tested without root or a runtime. Modules
//! that run in forked children (the container monitor, exec helpers) may
//! not use tokio: a fork from a multi-threaded runtime is how deadlocks
//! start.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `crate` is the crate root (lib.rs): what it declares, e.g. `Error`.
const AGENT: &[(&str, &[&str])] = &[
    ("crate", &["kubelet"]),
    (
        "kubelet",
        &[
            "certificate",
            "config",
            "devicemanager",
            "deviceplugin",
            "events",
            "eviction",
            "health",
            "images",
            "kube",
            "lifecycle",
            "logs",
            "metrics",
            "nodestatus",
            "oom",
            "phase",
            "pleg",
            "pod_workers",
            "podresources",
            "prober",
            "runtime",
            "server",
            "stats",
            "status",
            "userns",
            "volumes",
        ],
    ),
    ("allocation", &["mutex", "plan", "qos"]),
    ("backoff", &["clock"]),
    ("certificate", &["kube"]),
    ("clock", &[]),
    (
        "config",
        &[
            "clock",
            "cri_config",
            "events",
            "kube",
            "mutex",
            "phase",
            "qos",
        ],
    ),
    ("credentialprovider", &[]),
    ("cri_config", &["devicemanager", "qos", "volumes"]),
    ("devicemanager", &["mutex"]),
    ("deviceplugin", &["devicemanager", "mutex"]),
    ("events", &["clock", "kube", "mutex"]),
    (
        "eviction",
        &[
            "clock",
            "events",
            "images",
            "lifecycle",
            "phase",
            "pod_workers",
            "qos",
            "reason",
            "runtime",
            "stats",
            "statsapi",
            "status",
        ],
    ),
    ("health", &["mutex"]),
    ("httpc", &[]),
    ("images", &["events", "runtime"]),
    ("kube", &["httpc"]),
    (
        "lifecycle",
        &[
            "httpc", "phase", "probe", "prober", "qos", "reason", "runtime",
        ],
    ),
    ("logs", &["runtime"]),
    ("metrics", &["mutex"]),
    ("mutex", &[]),
    (
        "nodestatus",
        &["cri_config", "devicemanager", "eviction", "kube", "runtime"],
    ),
    (
        "oom",
        &["cri_config", "events", "mutex", "runtime", "status"],
    ),
    ("phase", &[]),
    ("plan", &["cri_config", "probe", "reason"]),
    ("pleg", &["health", "metrics", "runtime"]),
    ("pod", &["config"]),
    (
        "pod_workers",
        &[
            "allocation",
            "backoff",
            "clock",
            "credentialprovider",
            "cri_config",
            "devicemanager",
            "events",
            "lifecycle",
            "metrics",
            "mutex",
            "phase",
            "plan",
            "prober",
            "qos",
            "reason",
            "runtime",
            "status",
            "userns",
            "volumes",
        ],
    ),
    ("podresources", &["devicemanager", "phase", "status"]),
    ("probe", &[]),
    (
        "prober",
        &[
            "clock", "events", "httpc", "metrics", "mutex", "plan", "probe", "runtime", "status",
        ],
    ),
    ("qos", &[]),
    ("reason", &[]),
    (
        "runtime",
        &[
            "credentialprovider",
            "cri_config",
            "metrics",
            "plan",
            "statsapi",
        ],
    ),
    (
        "server",
        &[
            "certificate",
            "config",
            "devicemanager",
            "events",
            "eviction",
            "health",
            "httpc",
            "kube",
            "logs",
            "metrics",
            "mutex",
            "nodestatus",
            "phase",
            "prober",
            "runtime",
            "stats",
            "status",
        ],
    ),
    (
        "stats",
        &[
            "clock",
            "cri_config",
            "metrics",
            "mutex",
            "oom",
            "qos",
            "statsapi",
            "status",
            "volumes",
        ],
    ),
    ("statsapi", &[]),
    (
        "status",
        &[
            "clock", "config", "kube", "mutex", "phase", "plan", "pod", "qos", "reason",
        ],
    ),
    ("userns", &["mutex"]),
    ("volumes", &["kube", "mutex"]),
];

/// Module paths whose files must stay pure (a path and everything below).
const AGENT_PURE: &[&str] = &[
    "backoff",
    "certificate::x509",
    "clock",
    "config::manifest",
    "config::validate",
    "credentialprovider",
    "cri_config",
    "devicemanager::pod_devices",
    "events::reason",
    "eviction::helpers",
    "kube::config",
    "kube::watch",
    "lifecycle::predicate",
    "logs::reader",
    "metrics",
    "mutex",
    "nodestatus::lease",
    "nodestatus::setters",
    "oom::kmsg",
    "phase",
    "plan",
    "pod::mirror",
    "probe",
    "qos",
    "reason",
    "statsapi",
    "status::generate",
    "volumes::projection",
];

const SHIM: &[(&str, &[&str])] = &[
    (
        "crate",
        &[
            "cni",
            "error",
            "host",
            "process",
            "runtime",
            "service",
            // The CDI spec parser, for its fuzz target.
            "spec",
            "streaming",
        ],
    ),
    (
        "service",
        &["error", "host", "runtime", "state", "streaming"],
    ),
    ("streaming", &["error", "host", "process", "runtime"]),
    (
        "runtime",
        &[
            "cni", "error", "host", "mutex", "process", "seccomp", "spec", "state",
        ],
    ),
    ("spec", &["error", "host", "seccomp"]),
    ("process", &["host", "seccomp", "state"]),
    ("cni", &["host"]),
    ("seccomp", &["host"]),
    ("state", &["error"]),
    ("error", &["cni"]),
    ("host", &[]),
    ("mutex", &[]),
];

/// Code that runs in forked children: no tokio.
const SHIM_NO_TOKIO: &[&str] = &[
    "host",
    "process::init",
    "process::monitor",
    "process::nsexec",
    "process::pod_init",
    "process::spawner",
    "seccomp",
];

const IMPURE_CRATES: &[&str] = &["tokio", "nix", "tonic", "hyper", "hyper_util"];

#[derive(Debug)]
struct Module {
    /// `a::b` (empty for the crate root).
    path: Vec<String>,
    file: PathBuf,
    /// Code without comments and unit tests.
    code: String,
}

fn modules(src: &Path) -> Vec<Module> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).expect("read src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // `tests.rs` files are unit tests of their parent.
            if !name.ends_with(".rs") || name == "tests.rs" {
                continue;
            }
            let rel = p.strip_prefix(src).expect("under src").with_extension("");
            let mut path: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if path.last().is_some_and(|l| l == "mod") {
                path.pop();
            }
            if path == ["lib"] || path == ["main"] {
                path.clear();
            }
            let text = std::fs::read_to_string(&p).expect("read source");
            out.push(Module {
                path,
                file: p,
                code: strip(&text),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Drops `#[cfg(test)] mod tests { ... }` (to the end of the file: it is
/// always last) and comment lines.
fn strip(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    if let Some(i) = lines.windows(2).position(|w| {
        w[0].trim() == "#[cfg(test)]"
            && w[1]
                .trim_start()
                .trim_start_matches("pub(crate) ")
                .starts_with("mod tests")
    }) {
        lines.truncate(i);
    }
    lines
        .into_iter()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths `code` names through `crate::`: `crate::a::b` gives
/// `a::b`; `crate::{a::{b, c}, d}` gives `a::{b, c}` as `a` and `d`.
fn references(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && c != '}' {
                    item.push(c);
                }
            }
            out.push(item);
        } else {
            out.push(
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect(),
            );
        }
    }
    out.into_iter()
        .map(|s| s.trim().trim_end_matches(':').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn top(path: &[String]) -> String {
    path.first().cloned().unwrap_or_else(|| "crate".into())
}

/// A referenced path's top-level module; an item of the crate root (a
/// type, not a module) counts as `crate`.
fn target(reference: &str, known: &BTreeSet<&str>) -> String {
    let first = reference.split("::").next().unwrap_or("").trim();
    if known.contains(first) {
        first.to_string()
    } else {
        "crate".into()
    }
}

fn uses_crate(code: &str, name: &str) -> bool {
    let pat = format!("{name}::");
    code.match_indices(&pat).any(|(i, _)| {
        !code[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    })
}

fn is_under(path: &[String], prefixes: &[&str]) -> bool {
    let joined = path.join("::");
    prefixes
        .iter()
        .any(|p| joined == *p || joined.starts_with(&format!("{p}::")))
}

/// Every broken rule of one crate, as readable lines.
fn check(src: &Path, table: &[(&str, &[&str])], pure: &[&str], no_tokio: &[&str]) -> Vec<String> {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = table
        .iter()
        .map(|(m, to)| (*m, to.iter().copied().collect()))
        .collect();
    let known: BTreeSet<&str> = allowed.keys().copied().filter(|m| *m != "crate").collect();
    let mut errors = Vec::new();
    for m in modules(src) {
        let from = top(&m.path);
        let file = m.file.strip_prefix(src).unwrap_or(&m.file).display();
        let Some(may) = allowed.get(from.as_str()) else {
            errors.push(format!("{file}: module `{from}` is not in the table"));
            continue;
        };
        let is_pure = is_under(&m.path, pure);
        for r in references(&m.code) {
            let to = target(&r, &known);
            if to != from && !may.contains(to.as_str()) {
                errors.push(format!("{file}: `{from}` may not use `{to}` (crate::{r})"));
            }
            let path: Vec<String> = r.split("::").map(|s| s.trim().to_string()).collect();
            if is_pure && to != "crate" && !is_under(&path, pure) {
                errors.push(format!("{file}: pure `{}` uses `{r}`", m.path.join("::")));
            }
        }
        for c in IMPURE_CRATES {
            if is_pure && uses_crate(&m.code, c) {
                errors.push(format!("{file}: pure `{}` uses `{c}`", m.path.join("::")));
            }
        }
        if is_under(&m.path, no_tokio) && uses_crate(&m.code, "tokio") {
            errors.push(format!("{file}: `{from}` runs after fork and uses tokio"));
        }
    }
    if let Some(circle) = circle(&allowed) {
        errors.push(format!("the table has a circle: {}", circle.join(" → ")));
    }
    errors
}

/// A circle in the allowed arrows, if any (depth-first search).
fn circle(allowed: &BTreeMap<&str, BTreeSet<&str>>) -> Option<Vec<String>> {
    fn visit<'a>(
        n: &'a str,
        allowed: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| *s == n) {
            let mut c: Vec<String> = stack[i..].iter().map(|s| s.to_string()).collect();
            c.push(n.to_string());
            return Some(c);
        }
        if !done.insert(n) {
            return None;
        }
        stack.push(n);
        for to in allowed.get(n).into_iter().flatten() {
            if let Some(c) = visit(to, allowed, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    for n in allowed.keys() {
        if let Some(c) = visit(n, allowed, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn agent_modules_follow_the_table() {
    let errors = check(&root().join("agent/src"), AGENT, AGENT_PURE, &[]);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn shim_modules_follow_the_table() {
    let errors = check(
        &root().join("shim/src"),
        SHIM,
        &["cni::config"],
        SHIM_NO_TOKIO,
    );
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// Files stay under ~600 lines of code (comments and unit tests not
/// counted): split by responsibility first. A file that must be longer
/// says why in a `//! Long:` line of its header.
#[test]
fn no_file_is_over_600_lines_without_a_reason() {
    let mut long = Vec::new();
    for krate in CRATES {
        for m in modules(&src_of(krate)) {
            let text = std::fs::read_to_string(&m.file).expect("read");
            let lines = m.code.lines().filter(|l| !l.trim().is_empty()).count();
            if lines > 600 && !text.lines().any(|l| l.starts_with("//! Long:")) {
                long.push(format!("{}: {lines} lines", m.file.display()));
            }
        }
    }
    assert!(long.is_empty(), "split these files:\n{}", long.join("\n"));
}

/// Every crate of the workspace by its folder (`src` is the binary's);
/// [`every_workspace_crate_is_checked`] holds it to Cargo.toml.
const CRATES: &[&str] = &[
    "agent",
    "shim",
    "cgroup",
    "images",
    "registry",
    "cri-proto",
    "edge-config",
    "xtask",
    "bench",
    "src",
];

#[test]
fn every_workspace_crate_is_checked() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.starts_with("members = ["))
        .expect("members line");
    let mut members: Vec<&str> = line
        .trim_start_matches("members = [")
        .trim_end_matches(']')
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .map(|m| if m == "." { "src" } else { m })
        .collect();
    members.sort_unstable();
    let mut listed = CRATES.to_vec();
    listed.sort_unstable();
    assert_eq!(members, listed, "CRATES must list every workspace member");
}

fn src_of(krate: &str) -> PathBuf {
    if krate == "src" {
        root().join("src")
    } else {
        root().join(krate).join("src")
    }
}

/// The arrows between one crate's top-level modules, as the code has them.
fn arrows(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(src);
    let tops: BTreeSet<String> = mods.iter().map(|m| top(&m.path)).collect();
    let known: BTreeSet<&str> = tops.iter().map(String::as_str).collect();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for m in &mods {
        let from = top(&m.path);
        let to = out.entry(from.clone()).or_default();
        for r in references(&m.code) {
            let t = target(&r, &known);
            if t != from && t != "crate" {
                to.insert(t);
            }
        }
    }
    out
}

/// No crate has modules that use each other, directly or round about: the
/// agent and the shim by their tables, every other crate as its code is.
#[test]
fn no_crate_has_a_circle_between_its_modules() {
    let mut circles = Vec::new();
    for krate in CRATES {
        let graph = arrows(&src_of(krate));
        let borrowed: BTreeMap<&str, BTreeSet<&str>> = graph
            .iter()
            .map(|(m, to)| (m.as_str(), to.iter().map(String::as_str).collect()))
            .collect();
        if let Some(c) = circle(&borrowed) {
            circles.push(format!("{krate}: {}", c.join(" → ")));
        }
    }
    assert!(circles.is_empty(), "{}", circles.join("\n"));
}

/// Files that still return `Result<_, String>`, and how many: the count
/// may only go down (a file not listed has none). Post-fork code is no
/// exception: it sends one typed `ChildError` through its pipes.
const STRING_ERRORS_LEFT: &[(&str, usize)] = &[];

/// `Result<T, String>` occurrences in code (comments and unit tests left
/// out).
fn string_results(code: &str) -> usize {
    code.match_indices("Result<")
        .filter(|(i, _)| {
            let rest = &code[i + "Result<".len()..];
            let mut depth = 0usize;
            for (j, c) in rest.char_indices() {
                match c {
                    '<' | '(' => depth += 1,
                    ')' => depth = depth.saturating_sub(1),
                    '>' if depth == 0 => {
                        return rest[..j].trim_end().ends_with(", String");
                    }
                    '>' => depth -= 1,
                    _ => {}
                }
            }
            false
        })
        .count()
}

/// Errors are typed per module, post-fork code included (its `ChildError`
/// crosses the fork's pipes as JSON).
#[test]
fn errors_are_typed_everywhere() {
    let mut found = Vec::new();
    for krate in CRATES {
        let src = src_of(krate);
        for m in modules(&src) {
            let rel = m
                .file
                .strip_prefix(root())
                .unwrap_or(&m.file)
                .display()
                .to_string();
            let n = string_results(&m.code);
            let allowed = STRING_ERRORS_LEFT
                .iter()
                .find(|(f, _)| *f == rel)
                .map_or(0, |(_, n)| *n);
            if n > allowed {
                found.push(format!("{rel}: {n} Result<_, String> (at most {allowed})"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "give these a typed error:\n{}",
        found.join("\n")
    );
}

/// The shim's `Error::Internal` is for what has no better kind, never for
/// an I/O or system error whose kind and path a `format!` would drop.
#[test]
fn no_internal_error_is_formatted_from_another_error() {
    let mut found = Vec::new();
    for m in modules(&src_of("shim")) {
        for (i, _) in m.code.match_indices("Internal(format!(") {
            let line = m.code[..i].lines().count();
            found.push(format!(
                "{}: line {line} of the stripped code",
                m.file.display()
            ));
        }
    }
    assert!(
        found.len() <= INTERNAL_FORMATTED_LEFT,
        "{} Internal(format!(..)) (at most {INTERNAL_FORMATTED_LEFT}):\n{}",
        found.len(),
        found.join("\n")
    );
}

/// `Error::Internal(format!(..))` left in the shim, each with no error of
/// its own to keep (a timeout, a child's stderr): may only go down.
const INTERNAL_FORMATTED_LEFT: usize = 7;

#[test]
fn the_checker_sees_broken_arrows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    std::fs::create_dir_all(src.join("b")).expect("mkdir");
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\n").expect("write");
    // `a` is pure but uses tokio and `b`; `b` uses `a` inside a group;
    // comments and unit tests do not count.
    std::fs::write(
        src.join("a.rs"),
        "use crate::b::X;\n// crate::c\nfn f() { tokio::spawn(g()); }\n\
         #[cfg(test)]\nmod tests {\n    use crate::c;\n}\n",
    )
    .expect("write");
    std::fs::write(src.join("b/mod.rs"), "use crate::{a::{self, Y}, Error};\n").expect("write");
    let table: &[(&str, &[&str])] = &[("crate", &["a", "b"]), ("a", &[]), ("b", &["a"])];
    let errors = check(src, table, &["a"], &[]);
    assert_eq!(
        errors,
        [
            "a.rs: `a` may not use `b` (crate::b::X)",
            "a.rs: pure `a` uses `b::X`",
            "a.rs: pure `a` uses `tokio`",
            "b/mod.rs: `b` may not use `crate` (crate::Error)",
        ],
        "{errors:#?}"
    );
    assert_eq!(
        string_results("fn f() -> Result<Vec<(u8, u8)>, String> {}"),
        1
    );
    assert_eq!(string_results("fn f() -> Result<(), Error> {}"), 0);
    assert_eq!(string_results("fn f() -> Result<String, Error> {}"), 0);
    let circular: &[(&str, &[&str])] = &[("crate", &[]), ("a", &["b"]), ("b", &["a"])];
    assert_eq!(
        circle(
            &circular
                .iter()
                .map(|(m, t)| (*m, t.iter().copied().collect()))
                .collect()
        ),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}
