//! deploy/: the systemd unit passes `systemd-analyze verify` without a single complaint
//! (pointed at this build's binary, as the unit names an installed one), and the check
//! itself notices a broken unit.

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
