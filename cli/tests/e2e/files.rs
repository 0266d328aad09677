//! Files: streaming round trips, content types, listings, directory operations, atomicity.

use super::harness::{api_err, unique, Node};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use warren_api::ErrorCode;

fn code(e: warren_client::Error) -> (u16, ErrorCode) {
    let (status, code, _) = api_err(e);
    (status, code)
}

/// Deterministic pseudo-random bytes, generated chunk by chunk.
fn chunk(i: u64, len: usize) -> bytes::Bytes {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    bytes::Bytes::from(v)
}

#[tokio::test]
async fn hundred_mib_round_trip_keeps_node_memory_flat() {
    const CHUNK: usize = 1 << 20;
    const CHUNKS: u64 = 100;
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("big-{}", unique());
    c.sh(&id, "true").await.unwrap();
    let (_, peak_before) = node.memory_kib();

    let mut hasher = Sha256::new();
    for i in 0..CHUNKS {
        hasher.update(chunk(i, CHUNK));
    }
    let expected = hex::encode(hasher.finalize());
    let body =
        futures_util::stream::iter(0..CHUNKS).map(|i| Ok::<_, std::io::Error>(chunk(i, CHUNK)));
    let w = c
        .write_file(
            &id,
            "/workspace/big.bin",
            reqwest::Body::wrap_stream(body),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        (w.size, w.sha256.as_str()),
        (CHUNKS * CHUNK as u64, expected.as_str())
    );
    let r = c
        .sh(&id, "sha256sum /workspace/big.bin | cut -d' ' -f1")
        .await
        .unwrap();
    assert_eq!(r.stdout.trim(), expected);

    let resp = c.read_file(&id, "/workspace/big.bin").await.unwrap();
    assert_eq!(resp.content_length(), Some(CHUNKS * CHUNK as u64));
    let mut stream = resp.bytes_stream();
    let mut hasher = Sha256::new();
    while let Some(b) = stream.next().await {
        hasher.update(b.unwrap());
    }
    assert_eq!(hex::encode(hasher.finalize()), expected);
    let (_, peak_after) = node.memory_kib();
    let growth_mib = (peak_after.saturating_sub(peak_before)) / 1024;
    assert!(
        growth_mib < 40,
        "node peak RSS grew by {growth_mib} MiB moving 100 MiB: bodies must stream"
    );
}

#[tokio::test]
async fn content_types_follow_the_content() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("ctype-{}", unique());
    let png: Vec<u8> = [
        &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A][..],
        &[0u8; 24][..],
    ]
    .concat();
    c.write_file(&id, "/tmp/pic.dat", png, None).await.unwrap();
    c.write_file(&id, "/tmp/notes", "plain words\n", None)
        .await
        .unwrap();
    c.write_file(&id, "/tmp/blob.bin", vec![0u8, 159, 146, 150, 255, 1], None)
        .await
        .unwrap();
    c.write_file(&id, "/tmp/data.json", "{\"a\": 1}", None)
        .await
        .unwrap();
    let ct = |p: &'static str| {
        let c = c.clone();
        let id = id.clone();
        async move {
            let r = c.read_file(&id, p).await.unwrap();
            r.headers()["content-type"].to_str().unwrap().to_string()
        }
    };
    assert_eq!(ct("/tmp/pic.dat").await, "image/png");
    assert_eq!(ct("/tmp/notes").await, "text/plain; charset=utf-8");
    assert_eq!(ct("/tmp/blob.bin").await, "application/octet-stream");
    assert_eq!(ct("/tmp/data.json").await, "application/json");
    let bytes = c
        .read_file(&id, "/tmp/blob.bin")
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&bytes[..], &[0u8, 159, 146, 150, 255, 1]);
}

#[tokio::test]
async fn listings_with_and_without_hidden_files() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("list-{}", unique());
    c.sh(&id, "mkdir -p /data/sub /data/.cache && touch /data/a.txt /data/.env /data/sub/b.txt /data/.cache/c").await.unwrap();
    let names = |r: warren_api::files::ListResponse| {
        r.entries
            .into_iter()
            .map(|e| e.relative_path)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(c.list_dir(&id, "/data", false, false).await.unwrap()),
        vec!["a.txt", "sub"]
    );
    assert_eq!(
        names(c.list_dir(&id, "/data", false, true).await.unwrap()),
        vec![".cache", ".env", "a.txt", "sub"]
    );
    assert_eq!(
        names(c.list_dir(&id, "/data", true, false).await.unwrap()),
        vec!["a.txt", "sub", "sub/b.txt"]
    );
    assert_eq!(
        names(c.list_dir(&id, "/data", true, true).await.unwrap()),
        vec![".cache", ".cache/c", ".env", "a.txt", "sub", "sub/b.txt"]
    );
    let e = c
        .list_dir(&id, "/data/a.txt", false, false)
        .await
        .unwrap_err();
    assert_eq!(code(e), (409, ErrorCode::NotADirectory));
    let e = c.list_dir(&id, "/nope", false, false).await.unwrap_err();
    assert_eq!(code(e), (404, ErrorCode::FileNotFound));
}

#[tokio::test]
async fn stat_mkdir_move_delete_and_their_errors() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("fsops-{}", unique());
    let w = c
        .write_file(&id, "/work/deep/file name.txt", "hi", Some("0600"))
        .await
        .unwrap();
    assert_eq!(w.size, 2);
    let st = c.stat(&id, "/work/deep/file name.txt").await.unwrap();
    assert_eq!((st.size, st.mode.as_str()), (2, "0600"));
    assert_eq!(
        code(c.stat(&id, "/work/missing").await.unwrap_err()),
        (404, ErrorCode::FileNotFound)
    );
    assert_eq!(
        code(c.mkdir(&id, "/a/b/c", false).await.unwrap_err()),
        (404, ErrorCode::FileNotFound)
    );
    c.mkdir(&id, "/a/b/c", true).await.unwrap();
    c.mkdir(&id, "/a/b/c", true).await.unwrap();
    assert_eq!(
        code(c.mkdir(&id, "/a/b/c", false).await.unwrap_err()),
        (409, ErrorCode::AlreadyExists)
    );
    c.write_file(&id, "/a/one", "1", None).await.unwrap();
    c.write_file(&id, "/a/two", "2", None).await.unwrap();
    assert_eq!(
        code(
            c.move_path(&id, "/a/one", "/a/two", false)
                .await
                .unwrap_err()
        ),
        (409, ErrorCode::AlreadyExists)
    );
    c.move_path(&id, "/a/one", "/a/two", true).await.unwrap();
    assert_eq!(
        c.read_file(&id, "/a/two")
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "1"
    );
    assert_eq!(
        code(c.move_path(&id, "/a/one", "/a/x", false).await.unwrap_err()),
        (404, ErrorCode::FileNotFound)
    );
    // A directory from the image (a lower overlay layer) moves too.
    c.move_path(&id, "/etc/apt", "/tmp/apt-moved", false)
        .await
        .unwrap();
    assert!(c.stat(&id, "/tmp/apt-moved/sources.list").await.is_ok());
    assert_eq!(
        code(c.delete_file(&id, "/a", false).await.unwrap_err()),
        (409, ErrorCode::IsADirectory)
    );
    c.delete_file(&id, "/a", true).await.unwrap();
    assert_eq!(
        code(c.delete_file(&id, "/a", true).await.unwrap_err()),
        (404, ErrorCode::FileNotFound)
    );
    assert_eq!(
        code(c.read_file(&id, "/work").await.unwrap_err()),
        (409, ErrorCode::IsADirectory)
    );
    assert_eq!(
        code(c.read_file(&id, "/work/nope").await.unwrap_err()),
        (404, ErrorCode::FileNotFound)
    );
    assert_eq!(
        code(
            c.write_file(&id, "/work/deep/file name.txt/x", "x", None)
                .await
                .unwrap_err()
        )
        .1,
        ErrorCode::NotADirectory
    );
    assert_eq!(
        code(
            c.delete_file(&id, "/.warren/run/guest.sock", false)
                .await
                .unwrap_err()
        )
        .1,
        ErrorCode::Forbidden
    );
}

#[tokio::test]
async fn an_interrupted_upload_leaves_the_old_file_and_no_partial() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("atomic-{}", unique());
    c.write_file(&id, "/workspace/keep.txt", "original", None)
        .await
        .unwrap();
    let body = futures_util::stream::iter(0..3).map(|i| {
        if i < 2 {
            Ok(bytes::Bytes::from(vec![b'x'; 1 << 20]))
        } else {
            Err(std::io::Error::other("client gave up"))
        }
    });
    assert!(c
        .write_file(
            &id,
            "/workspace/keep.txt",
            reqwest::Body::wrap_stream(body),
            None
        )
        .await
        .is_err());
    let mut tries = 0;
    loop {
        let listing = c.list_dir(&id, "/workspace", false, true).await.unwrap();
        let names: Vec<String> = listing.entries.into_iter().map(|e| e.name).collect();
        if names == vec!["keep.txt".to_string()] || tries > 50 {
            assert_eq!(
                names,
                vec!["keep.txt".to_string()],
                "no temporary file is left behind"
            );
            break;
        }
        tries += 1;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        c.read_file(&id, "/workspace/keep.txt")
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "original"
    );
}

/// An upload the guest refuses before reading its body (a directory where a file would go,
/// an archive's directory that already exists) is answered with the refusal, also while the
/// node is still writing the body to the guest: never 503 `UNAVAILABLE` for a broken pipe
/// (found by the schemathesis run; under concurrency most such uploads got it).
#[tokio::test]
async fn uploads_refused_before_their_body_is_read_are_answered_with_the_refusal() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("refused-{}", unique());
    c.sh(&id, "mkdir -p /workspace/dir/made").await.unwrap();
    let body = chunk(7, 256 << 10);
    for (path, want) in [
        ("/files/workspace/dir", "IS_A_DIRECTORY"),
        ("/fs/archive?path=/workspace/dir/made", "ALREADY_EXISTS"),
    ] {
        let url = format!("/v1/sandboxes/{id}{path}");
        let uploads = (0..48).map(|_| {
            node.req(reqwest::Method::PUT, &url)
                .header("content-type", "application/octet-stream")
                .body(body.clone())
                .send()
        });
        let answers: Vec<_> = futures_util::stream::iter(uploads)
            .buffer_unordered(8)
            .collect()
            .await;
        for a in answers {
            let resp = a.unwrap();
            let status = resp.status();
            let err: serde_json::Value = resp.json().await.unwrap();
            assert_eq!(
                (status.as_u16(), err["code"].as_str()),
                (409, Some(want)),
                "{path}: {err}"
            );
        }
    }
}
