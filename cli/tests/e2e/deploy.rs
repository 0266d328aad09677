//! deploy/: the systemd unit passes `systemd-analyze verify` without a single complaint
//! (pointed at this build's binary, as the unit names an installed one); the Kubernetes
//! manifests validate against the Kubernetes API's schema (offline, strict) and hold a
//! node.toml the node takes; each check itself notices a broken file.

use std::process::Command;

const UNIT: &str = include_str!("../../../deploy/systemd/warren.service");
const INSTALLED: &str = "/usr/local/bin/warren";

/// What `systemd-analyze verify` says of `unit` (its exit status and complaints).
fn verify(unit: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warren.service");
    std::fs::write(&path, unit.replace(INSTALLED, env!("CARGO_BIN_EXE_warren"))).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian's systemd package; deploy/host-setup.sh --test-deps)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said.trim().to_string())
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify_without_a_complaint() {
    assert!(
        UNIT.contains(&format!(
            "ExecStart={INSTALLED} serve --config /etc/warren/node.toml"
        )),
        "the unit runs the installed binary on its settings file"
    );
    for needed in [
        "Requires=docker.service",
        "KillMode=process",
        "NoNewPrivileges=yes",
    ] {
        assert!(UNIT.contains(needed), "{needed}");
    }
    let (ok, said) = verify(UNIT);
    assert!(ok && said.is_empty(), "systemd-analyze verify: {said}");
    // A value systemd does not know is a complaint (the exit status alone would pass it).
    let (_, said) = verify(&UNIT.replace("KillMode=process", "KillMode=sometimes"));
    assert!(
        said.contains("kill mode"),
        "a broken unit went unnoticed: {said:?}"
    );
}

const KUBERNETES: &str = include_str!("../../../deploy/kubernetes/warren.yaml");

/// What `kubernetes-validate --strict` says of `yaml` against Kubernetes `version`.
fn kubernetes_validate(yaml: &str, version: &str) -> (bool, String) {
    let tools = std::env::var("WARREN_TOOLS_DIR").unwrap_or("/var/cache/warren/tools".into());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warren.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(format!(
        "{tools}/kubernetes-validate/bin/kubernetes-validate"
    ))
    .args(["--strict", "--no-warn", "-k", version])
    .arg(&path)
    .output()
    .expect("kubernetes-validate (deploy/host-setup.sh --test-deps installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// The ConfigMap's node.toml, its placeholders filled as the container's start command does.
fn node_toml(seed: bool) -> String {
    let mut lines = KUBERNETES
        .lines()
        .skip_while(|l| l.trim() != "node.toml: |")
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(|l| l[4..].to_string())
        .collect::<Vec<_>>();
    assert!(!lines.is_empty(), "no node.toml in the ConfigMap");
    if seed {
        lines.retain(|l| !l.starts_with("join = "));
    }
    lines
        .join("\n")
        .replace("@NODE_NAME@", "machine-1")
        .replace("@POD_IP@", "10.0.0.7")
        .replace("@REGION@", "region-1")
        .replace("@JOIN_TOKEN@", "wj_0123456789abcdef")
}

#[test]
fn the_kubernetes_manifests_validate_strictly_and_hold_settings_the_node_takes() {
    for version in ["1.28.0", "1.37.0"] {
        let (ok, said) = kubernetes_validate(KUBERNETES, version);
        assert!(ok, "Kubernetes {version}: {said}");
        for kind in [
            "daemonset/",
            "service/warren-peers",
            "configmap/warren-config",
        ] {
            assert!(said.contains(kind), "{kind} was not checked: {said}");
        }
    }
    // A misspelt field is refused (the check is strict, not only well-formed YAML).
    let (ok, said) =
        kubernetes_validate(&KUBERNETES.replace("hostNetwork:", "hostNetwrk:"), "1.37.0");
    assert!(!ok && said.contains("hostNetwrk"), "{said}");
    // The node takes the settings a joiner and the seed start with.
    let dir = tempfile::tempdir().unwrap();
    for seed in [false, true] {
        let path = dir.path().join(format!("node-{seed}.toml"));
        std::fs::write(&path, node_toml(seed)).unwrap();
        let s = warren_daemon::settings::Settings::load(&path)
            .unwrap_or_else(|e| panic!("{}: {e:#}", node_toml(seed)));
        assert_eq!((s.name.as_str(), s.join.is_some()), ("machine-1", !seed));
        assert_eq!(s.advertise_peer.as_deref(), Some("10.0.0.7:7400"));
    }
}
