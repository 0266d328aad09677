//! Git checkout from a repository served on this machine (a git daemon in the sandbox).

use super::harness::{unique, Node};
use warren_api::git::GitCheckoutRequest;
use warren_api::process::{StartProcessRequest, WaitPortRequest};
use warren_api::ErrorCode;

const MAKE_REPOS: &str = r#"set -e
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
rm -rf /srv/src && mkdir -p /srv/src /srv/git && cd /srv/src
git init -q -b main . && echo one > a.txt && git add . && git commit -qm one
echo two >> a.txt && git commit -qam two
git checkout -q -b feature && echo feat > feature.txt && git add . && git commit -qm feat
git checkout -q main
git clone -q --bare /srv/src /srv/git/proj.git
"#;

#[tokio::test]
async fn clone_with_branch_and_depth_and_the_failure_paths() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("git-{}", unique());
    let r = c.sh(&id, MAKE_REPOS).await.unwrap();
    assert_eq!(r.exit_code, 0, "{}", r.stderr);
    let daemon = "exec git daemon --reuseaddr --base-path=/srv/git --export-all --listen=127.0.0.1 --port=9418 /srv/git";
    c.start_process(
        &id,
        &StartProcessRequest {
            command: Some(daemon.into()),
            id: Some("gitd".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let wait: WaitPortRequest =
        serde_json::from_value(serde_json::json!({"port": 9418, "timeout_ms": 20000})).unwrap();
    c.wait_port(&id, "gitd", &wait).await.unwrap();
    let feature_head = c
        .sh(&id, "git -C /srv/git/proj.git rev-parse feature")
        .await
        .unwrap()
        .stdout
        .trim()
        .to_string();

    let url = "git://127.0.0.1:9418/proj.git";
    let req = GitCheckoutRequest {
        url: url.into(),
        branch: Some("feature".into()),
        depth: Some(1),
        ..Default::default()
    };
    let out = c.git_checkout(&id, &req).await.unwrap();
    assert_eq!(
        (
            out.branch.as_str(),
            out.target_dir.as_str(),
            out.commit.as_str()
        ),
        ("feature", "/workspace/proj", feature_head.as_str())
    );
    let r = c
        .sh(
            &id,
            "cd /workspace/proj && git rev-list --count HEAD && cat feature.txt",
        )
        .await
        .unwrap();
    assert_eq!(r.stdout, "1\nfeat\n", "depth 1 on the feature branch");

    let req = GitCheckoutRequest {
        url: url.into(),
        target_dir: Some("full".into()),
        ..Default::default()
    };
    let out = c.git_checkout(&id, &req).await.unwrap();
    assert_eq!(
        (out.branch.as_str(), out.target_dir.as_str()),
        ("main", "/workspace/full")
    );
    assert_eq!(
        c.sh(&id, "git -C /workspace/full rev-list --count HEAD")
            .await
            .unwrap()
            .stdout,
        "2\n"
    );

    let api = |e: warren_client::Error| match e {
        warren_client::Error::Api { status, error } => (status, error.code, error.message),
        other => panic!("{other}"),
    };
    let missing = GitCheckoutRequest {
        url: "git://127.0.0.1:9418/nope.git".into(),
        ..Default::default()
    };
    let (status, code, message) = api(c.git_checkout(&id, &missing).await.unwrap_err());
    assert_eq!((status, code), (422, ErrorCode::GitFailed));
    assert!(
        message.contains("nope.git") || message.to_lowercase().contains("not"),
        "git's message: {message}"
    );
    assert!(
        c.stat(&id, "/workspace/nope").await.is_err(),
        "a failed clone leaves no directory"
    );
    let again = GitCheckoutRequest {
        url: url.into(),
        ..Default::default()
    };
    let (status, _, message) = api(c.git_checkout(&id, &again).await.unwrap_err());
    assert_eq!(status, 422, "target exists and is not empty: {message}");
    let zero = GitCheckoutRequest {
        url: url.into(),
        timeout_ms: Some(0),
        ..Default::default()
    };
    assert_eq!(api(c.git_checkout(&id, &zero).await.unwrap_err()).0, 400);
}
