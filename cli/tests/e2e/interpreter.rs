//! The code interpreter: notebook state, rich results, errors, streaming, parallelism,
//! timeouts and kernel death, against real kernels in real containers.

use super::harness::{api_err, unique, Node};
use base64::Engine;
use futures_util::StreamExt;
use std::time::{Duration, Instant};
use warren_api::interpreter::{
    CreateContextRequest, ExecutionResult, RunCodeRequest, RunCodeResponse, RunEvent,
};
use warren_api::ErrorCode;
use warren_client::Client;

async fn context(c: &Client, id: &str, language: &str) -> String {
    let ctx = c
        .create_context(
            id,
            &CreateContextRequest {
                language: language.into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ctx.language.as_str(), language);
    assert_eq!(ctx.cwd, "/workspace");
    ctx.id
}

async fn run(c: &Client, id: &str, ctx: &str, code: &str) -> RunCodeResponse {
    c.run_code(
        id,
        ctx,
        &RunCodeRequest {
            code: code.into(),
            timeout_ms: None,
        },
    )
    .await
    .unwrap()
}

fn only_text(r: &RunCodeResponse) -> &str {
    assert!(r.error.is_none(), "unexpected error: {:?}", r.error);
    assert_eq!(r.results.len(), 1, "{r:?}");
    r.results[0].text.as_deref().unwrap()
}

#[tokio::test]
async fn interpreter_python_keeps_state_and_survives_errors() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("ip-{}", unique());
    let ctx = context(c, &id, "python").await;

    let r = run(c, &id, &ctx, "x = 42; y = 10").await;
    assert!(r.results.is_empty() && r.error.is_none(), "{r:?}");
    let r = run(c, &id, &ctx, "print(x + y)").await;
    assert_eq!(r.stdout, "52\n");
    assert!(r.results.is_empty());
    let r = run(c, &id, &ctx, "x + y").await;
    assert_eq!(only_text(&r), "52");
    assert_eq!(r.execution_count, 3);
    let r = run(c, &id, &ctx, "import json\n{'a': [1, 2], 'b': None}").await;
    assert_eq!(
        r.results[0].json,
        Some(serde_json::json!({"a": [1, 2], "b": null}))
    );
    // Output of subprocesses (fd 1 of the kernel) reaches the client too.
    let r = run(c, &id, &ctx, "import os\nos.system('echo from-a-child')").await;
    assert!(r.stdout.contains("from-a-child"), "{r:?}");

    let r = run(c, &id, &ctx, "def f():\n    return 1 / 0\nf()").await;
    let e = r.error.expect("an error");
    assert_eq!(e.name, "ZeroDivisionError");
    assert_eq!(e.message, "division by zero");
    assert!(e.traceback.contains("in f"), "{}", e.traceback);
    assert!(!e.traceback.contains("python_kernel"), "{}", e.traceback);
    assert_eq!(only_text(&run(c, &id, &ctx, "x").await), "42");

    let other = c
        .create_context(
            &id,
            &CreateContextRequest {
                language: "python".into(),
                cwd: Some("/tmp".into()),
                env: Some([("GREETING".to_string(), "hi".to_string())].into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(other.cwd, "/tmp");
    let r = run(
        c,
        &id,
        &other.id,
        "import os\n(os.getcwd(), os.environ['GREETING'])",
    )
    .await;
    assert_eq!(only_text(&r), "('/tmp', 'hi')");
    assert_eq!(
        run(c, &id, &other.id, "x").await.error.unwrap().name,
        "NameError"
    );
    c.delete_context(&id, &other.id).await.unwrap();

    let list = c.list_contexts(&id).await.unwrap();
    assert_eq!(list.contexts.len(), 1);
    assert_eq!(list.contexts[0].id, ctx);
    c.delete_context(&id, &ctx).await.unwrap();
    let err = c
        .run_code(
            &id,
            &ctx,
            &RunCodeRequest {
                code: "x".into(),
                timeout_ms: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(err).1, ErrorCode::ContextNotFound);
    let (status, code, _) = api_err(c.delete_context(&id, &ctx).await.unwrap_err());
    assert_eq!((status, code), (404, ErrorCode::ContextNotFound));
    let r = c
        .sh(&id, "pgrep -f python_kernel || echo none")
        .await
        .unwrap();
    assert_eq!(r.stdout, "none\n", "deleting a context kills its kernel");
}

#[tokio::test]
async fn interpreter_python_rich_results() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("ir-{}", unique());
    let ctx = context(c, &id, "python").await;

    let code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()";
    let r = run(c, &id, &ctx, code).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    let pngs: Vec<&ExecutionResult> = r.results.iter().filter(|x| x.png.is_some()).collect();
    assert_eq!(pngs.len(), 1, "one figure: {:?}", r.results.len());
    let png = base64::engine::general_purpose::STANDARD
        .decode(pngs[0].png.as_ref().unwrap())
        .unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(
        r.stderr.is_empty(),
        "show() neither blocks nor warns: {}",
        r.stderr
    );
    // The figure was closed: the next run shows nothing more.
    assert!(run(c, &id, &ctx, "1").await.results[0].png.is_none());

    let code = "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})";
    let r = run(c, &id, &ctx, code).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    let html = r.results[0].html.as_deref().expect("html");
    assert!(html.contains("<table"), "{html}");
    assert!(r.results[0].text.is_some());

    let code = "class M:\n    def _repr_markdown_(self):\n        return '**bold**'\nM()";
    let r = run(c, &id, &ctx, code).await;
    assert_eq!(r.results[0].markdown.as_deref(), Some("**bold**"));
}

#[tokio::test]
async fn interpreter_javascript_and_typescript() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("ij-{}", unique());
    let js = context(c, &id, "javascript").await;
    let r = run(
        c,
        &id,
        &js,
        "const v = await new Promise(r => setTimeout(() => r(7), 10))",
    )
    .await;
    assert!(r.error.is_none() && r.results.is_empty(), "{r:?}");
    assert_eq!(only_text(&run(c, &id, &js, "v * 6").await), "42");
    let r = run(c, &id, &js, "console.log('a', 1); ({k: [1, 2]})").await;
    assert_eq!(r.stdout, "a 1\n");
    assert_eq!(r.results[0].json, Some(serde_json::json!({"k": [1, 2]})));
    let r = run(c, &id, &js, "null.x").await;
    let e = r.error.expect("an error");
    assert_eq!(e.name, "TypeError");
    assert!(e.traceback.contains("TypeError"), "{}", e.traceback);

    let ts = context(c, &id, "typescript").await;
    let code = "const n: number = 5; function sq(x: number): number { return x*x }";
    let r = run(c, &id, &ts, code).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(only_text(&run(c, &id, &ts, "sq(n)").await), "25");
    let code = "interface P { a: number }\nconst p: P = { a: await Promise.resolve(2) }\np.a * 2";
    assert_eq!(only_text(&run(c, &id, &ts, code).await), "4");
    // Contexts do not share state.
    let r = run(c, &id, &js, "typeof sq").await;
    assert_eq!(only_text(&r), "'undefined'");
}

#[tokio::test]
async fn interpreter_streams_events_as_they_happen() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("is-{}", unique());
    let ctx = context(c, &id, "python").await;
    let code = "import time\nfor i in range(3):\n    print(i)\n    time.sleep(0.5)\n1/0";
    let mut stream = c
        .run_code_stream(
            &id,
            &ctx,
            &RunCodeRequest {
                code: code.into(),
                timeout_ms: None,
            },
        )
        .await
        .unwrap();
    let start = Instant::now();
    let mut events = Vec::new();
    while let Some(e) = stream.next().await {
        events.push((start.elapsed(), e.unwrap()));
    }
    let stdout: Vec<(Duration, String)> = events
        .iter()
        .filter_map(|(t, e)| match e {
            RunEvent::Stdout { text } => Some((*t, text.clone())),
            _ => None,
        })
        .collect();
    let texts: Vec<&str> = stdout.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(texts, ["0\n", "1\n", "2\n"], "{events:?}");
    let spread = stdout[2].0 - stdout[0].0;
    assert!(
        spread >= Duration::from_millis(800),
        "stdout arrived at once: {stdout:?}"
    );
    let n = events.len();
    assert!(
        matches!(&events[n - 2].1, RunEvent::Error { name, .. } if name == "ZeroDivisionError"),
        "{events:?}"
    );
    assert!(matches!(
        events[n - 1].1,
        RunEvent::Complete { execution_count: 1 }
    ));
    let completes = events
        .iter()
        .filter(|(_, e)| matches!(e, RunEvent::Complete { .. }))
        .count();
    assert_eq!(completes, 1);
}

#[tokio::test]
async fn interpreter_contexts_run_in_parallel_and_runs_in_one_are_serialized() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("ipar-{}", unique());
    let a = context(c, &id, "python").await;
    let b = context(c, &id, "python").await;
    let sleep = "import time\ntime.sleep(1)\n'slept'";
    let t = Instant::now();
    let (ra, rb) = tokio::join!(run(c, &id, &a, sleep), run(c, &id, &b, sleep));
    let took = t.elapsed();
    assert_eq!((only_text(&ra), only_text(&rb)), ("'slept'", "'slept'"));
    assert!(took < Duration::from_millis(1900), "not parallel: {took:?}");

    let t = Instant::now();
    let (r1, r2) = tokio::join!(run(c, &id, &a, sleep), run(c, &id, &a, sleep));
    assert!(r1.error.is_none() && r2.error.is_none());
    assert!(t.elapsed() >= Duration::from_millis(1900), "not serialized");
    let mut counts = [r1.execution_count, r2.execution_count];
    counts.sort();
    assert_eq!(counts, [2, 3]);
}

#[tokio::test]
async fn interpreter_rejects_bad_requests() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("ibad-{}", unique());
    // A bad timeout is refused before any sandbox exists.
    let err = c
        .run_code(
            &id,
            "ctx-1",
            &RunCodeRequest {
                code: "1".into(),
                timeout_ms: Some(0),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(err).0, 400);
    let (status, code, _) = api_err(c.get_sandbox(&id).await.unwrap_err());
    assert_eq!((status, code), (404, ErrorCode::SandboxNotFound));

    let err = c
        .create_context(
            &id,
            &CreateContextRequest {
                language: "cobol".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    let (status, code, _) = api_err(err);
    assert_eq!((status, code), (422, ErrorCode::UnsupportedLanguage));

    let err = c
        .run_code(
            &id,
            "ctx-nope",
            &RunCodeRequest {
                code: "1".into(),
                timeout_ms: None,
            },
        )
        .await
        .unwrap_err();
    let (status, code, _) = api_err(err);
    assert_eq!((status, code), (404, ErrorCode::ContextNotFound));
}

#[tokio::test]
async fn interpreter_timeout_interrupts_the_run() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("it-{}", unique());
    let py = context(c, &id, "python").await;
    run(c, &id, &py, "kept = 'yes'").await;
    let t = Instant::now();
    let r = c
        .run_code(
            &id,
            &py,
            &RunCodeRequest {
                code: "import time\nprint('before')\ntime.sleep(30)".into(),
                timeout_ms: Some(500),
            },
        )
        .await
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(r.stdout, "before\n");
    let e = r.error.expect("a timeout error");
    assert_eq!(e.name, "TimeoutError");
    assert!(!e.traceback.is_empty(), "where it was interrupted");
    // Interrupted, not restarted: the state is still there.
    assert_eq!(only_text(&run(c, &id, &py, "kept").await), "'yes'");

    // node: an awaiting run is interrupted and the state kept; a busy loop cannot be
    // interrupted, so its kernel is killed and restarted.
    let js = context(c, &id, "javascript").await;
    run(c, &id, &js, "var keep = 'k'").await;
    for (code, kept) in [
        ("await new Promise(() => {})", true),
        ("while (true) {}", false),
    ] {
        let t = Instant::now();
        let r = c
            .run_code(
                &id,
                &js,
                &RunCodeRequest {
                    code: code.into(),
                    timeout_ms: Some(500),
                },
            )
            .await
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let e = r.error.expect("a timeout error");
        assert_eq!(e.name, "TimeoutError");
        assert_eq!(e.message.contains("restarted"), !kept, "{}", e.message);
        let r = run(c, &id, &js, "typeof keep").await;
        let expected = if kept { "'string'" } else { "'undefined'" };
        assert_eq!(only_text(&r), expected, "{code}");
    }
}

#[tokio::test]
async fn interpreter_kernel_death_starts_a_fresh_kernel() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("ik-{}", unique());
    let ctx = context(c, &id, "python").await;
    run(c, &id, &ctx, "lost = 1").await;
    let r = run(
        c,
        &id,
        &ctx,
        "import os\nprint('bye', flush=True)\nos._exit(3)",
    )
    .await;
    assert_eq!(r.stdout, "bye\n");
    let e = r.error.expect("kernel died");
    assert_eq!(e.name, "KernelDied");
    assert!(e.message.contains("code 3"), "{}", e.message);
    let r = run(c, &id, &ctx, "lost").await;
    assert_eq!(r.error.expect("state is gone").name, "NameError");
    assert_eq!(only_text(&run(c, &id, &ctx, "2 * 21").await), "42");
}
