//! Directories to and from a sandbox: `warren cp -r` both ways, and the archive endpoint it
//! stands on (`…/fs/archive`) refusing what would escape, replace or half-write.

use super::harness::{sh, unique, Node};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use warren_api::ErrorCode;

fn warren(node: &Node, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(args)
        .env("WARREN_URL", &node.url)
        .env("WARREN_API_KEY", &node.key)
        .output()
        .unwrap()
}

fn ok(node: &Node, args: &[&str]) {
    let out = warren(node, args);
    assert!(
        out.status.success(),
        "warren {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every path below `root` with its kind and permission bits, and what each file or link
/// holds: one line each, sorted (what `find -printf '%P %y %m'` shows in the sandbox).
fn local_tree(root: &Path) -> String {
    let mut lines = Vec::new();
    fn walk(root: &Path, dir: &Path, lines: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let kind = if m.is_dir() {
                "d"
            } else if m.file_type().is_symlink() {
                "l"
            } else {
                "f"
            };
            lines.push(format!("{rel} {kind} {:o}", m.permissions().mode() & 0o777));
            if m.is_dir() {
                walk(root, &p, lines);
            }
        }
    }
    walk(root, root, &mut lines);
    lines.sort();
    lines.join("\n")
}

fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("src/deep/er")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("src/deep/er/data.bin"), vec![7u8; 3 << 20]).unwrap();
    std::fs::write(root.join("with space.txt"), b"spaced\n").unwrap();
    std::fs::write(root.join("run.sh"), b"#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        root.join("with space.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::os::unix::fs::symlink("src/deep/er/data.bin", root.join("link")).unwrap();
}

#[tokio::test]
async fn cp_r_copies_a_tree_both_ways_with_modes_and_links() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("cpr-{}", unique());
    sh(c, &id, "mkdir -p /workspace/into").await;
    let local = tempfile::tempdir().unwrap();
    let proj = local.path().join("proj");
    make_tree(&proj);

    // Up: to a new path it becomes that path; into a directory, it lands under its name.
    ok(
        &node,
        &[
            "cp",
            "-r",
            proj.to_str().unwrap(),
            &format!("{id}:/workspace/new"),
        ],
    );
    ok(
        &node,
        &[
            "cp",
            "-r",
            proj.to_str().unwrap(),
            &format!("{id}:/workspace/into"),
        ],
    );
    let listing = "find . -mindepth 1 -printf '%P %y %m\\n' | LC_ALL=C sort";
    let up = sh(c, &id, &format!("cd /workspace/new && {listing}")).await;
    assert_eq!(up.trim(), local_tree(&proj), "the tree as it is here");
    let under = sh(c, &id, &format!("cd /workspace/into/proj && {listing}")).await;
    assert_eq!(under, up);
    assert_eq!(
        sh(
            c,
            &id,
            "/workspace/new/run.sh; readlink /workspace/new/link; sha256sum < /workspace/new/link"
        )
        .await,
        format!(
            "ran\nsrc/deep/er/data.bin\n{}  -\n",
            hex_sha256(&vec![7u8; 3 << 20])
        )
    );

    // Down: the same both ways; into an existing directory it lands under its name.
    let back = local.path().join("back");
    ok(
        &node,
        &[
            "cp",
            "-r",
            &format!("{id}:/workspace/new"),
            back.to_str().unwrap(),
        ],
    );
    assert_eq!(local_tree(&back), local_tree(&proj));
    assert_eq!(
        std::fs::read(back.join("src/deep/er/data.bin")).unwrap(),
        vec![7u8; 3 << 20]
    );
    ok(
        &node,
        &[
            "cp",
            "-r",
            &format!("{id}:/workspace/new"),
            local.path().to_str().unwrap(),
        ],
    );
    assert_eq!(local_tree(&local.path().join("new")), local_tree(&proj));
    let names: Vec<String> = std::fs::read_dir(local.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("warren-partial")),
        "no staging left: {names:?}"
    );

    // A file is not a directory, and a missing source says so.
    let refused = warren(
        &node,
        &["cp", "-r", &format!("{id}:/workspace/new/run.sh"), "/tmp/x"],
    );
    assert_eq!(refused.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not a directory"));
    let missing = c.download_dir(&id, "/workspace/nothing").await.unwrap_err();
    assert_eq!(missing.code(), Some(ErrorCode::FileNotFound));
}

fn hex_sha256(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

/// A tar whose one entry is named raw (the tar crate's setters refuse `..` and absolute
/// names, which is what an attacker would send).
fn tar_with_entry(name: &str, kind: tar::EntryType, link: &str, data: &[u8]) -> Vec<u8> {
    let mut h = tar::Header::new_old();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
    h.set_entry_type(kind);
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, data).unwrap();
    b.into_inner().unwrap()
}

#[tokio::test]
async fn an_upload_that_escapes_replaces_or_breaks_off_leaves_nothing() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("cpx-{}", unique());
    sh(
        c,
        &id,
        "mkdir -p /workspace/keep && echo mine > /workspace/keep/f && echo safe > /etc/victim",
    )
    .await;

    // Entries that would write outside the new directory.
    let attacks = [
        (
            "dot-dot",
            tar_with_entry("../escaped", tar::EntryType::Regular, "", b"x"),
        ),
        (
            "absolute",
            tar_with_entry("/etc/victim", tar::EntryType::Regular, "", b"owned"),
        ),
        (
            "hard link out",
            tar_with_entry("h", tar::EntryType::Link, "/etc/victim", b""),
        ),
        (
            "device",
            tar_with_entry("dev", tar::EntryType::Char, "", b""),
        ),
    ];
    for (what, archive) in attacks {
        let e = c
            .upload_dir(&id, "/workspace/evil", archive)
            .await
            .expect_err(what);
        assert_eq!(e.code(), Some(ErrorCode::InvalidArgument), "{what}: {e}");
    }
    // Through a symbolic link to a directory outside.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    b.append_link(&mut h, "l", "/etc").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(5);
    h.set_mode(0o644);
    b.append_data(&mut h, "l/victim", &b"owned"[..]).unwrap();
    let e = c
        .upload_dir(&id, "/workspace/evil", b.into_inner().unwrap())
        .await
        .expect_err("through a symlink");
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument), "{e}");

    // An existing path is not replaced.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(3);
    h.set_mode(0o644);
    b.append_data(&mut h, "f", &b"new"[..]).unwrap();
    let good = b.into_inner().unwrap();
    let e = c
        .upload_dir(&id, "/workspace/keep", good.clone())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::AlreadyExists));

    // An upload that breaks off midway (the client's connection fails) is not unpacked.
    let big = {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(4 << 20);
        h.set_mode(0o644);
        b.append_data(&mut h, "big", &vec![1u8; 4 << 20][..])
            .unwrap();
        b.into_inner().unwrap()
    };
    let half = bytes::Bytes::from(big[..2 << 20].to_vec());
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(vec![
        Ok::<_, std::io::Error>(half),
        Err(std::io::Error::other("the client's disk failed")),
    ]));
    assert!(c.upload_dir(&id, "/workspace/cut", body).await.is_err());

    // Nothing of any of it is in the sandbox, and what was there is untouched (the node
    // may still be tearing down the upload it was cut off from: a moment is allowed).
    let check = "ls -A /workspace; cat /workspace/keep/f /etc/victim; ls /workspace/escaped /escaped 2>&1 | wc -l";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left = sh(c, &id, check).await;
        if left == "keep\nmine\nsafe\n2\n" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "left behind: {left}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    // And a good one goes through, to a path with parents to make.
    let r = c
        .upload_dir(&id, "/workspace/a/b/fresh", good)
        .await
        .unwrap();
    assert_eq!((r.entries, r.bytes), (1, 3));
    assert_eq!(sh(c, &id, "cat /workspace/a/b/fresh/f").await, "new");
}
