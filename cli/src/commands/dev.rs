//! `warren dev` and `warren serve`.

use crate::args::{DevArgs, NodeArgs};
use warren_daemon::{data_dir_of, run_node, Ready};

/// What is logged when `WARREN_LOG` is not set: warren's own lines (every target that
/// starts with `warren`) from `info`, its dependencies' (openraft's every election and
/// heartbeat among them) from `warn`.
pub const DEFAULT_LOG: &str = "warn,warren=info";

/// Logs to stderr, as text or as one JSON object per line (`json`).
pub fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WARREN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG));
    // Colours only for a terminal: a file or a log collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init()
    } else {
        builder.try_init()
    };
}

pub async fn dev(a: DevArgs) -> anyhow::Result<i32> {
    init_tracing(&a.node.log_format);
    let settings = a.node.settings()?;
    let data_dir = data_dir_of(&settings);
    if !a.no_setup {
        crate::setup::ensure_docker(settings.docker_host.as_deref(), &data_dir).await?;
        let image = settings
            .image
            .clone()
            .unwrap_or_else(|| warren_node::config::DEFAULT_IMAGE.to_string());
        crate::setup::ensure_image(settings.docker_host.as_deref(), &image).await?;
    }
    run_node(&settings, |r| {
        print_welcome(r);
        crate::sudo_user::share_dev_key(&r.api_key_file);
    })
    .await?;
    Ok(0)
}

pub async fn serve(a: NodeArgs) -> anyhow::Result<i32> {
    init_tracing(&a.log_format);
    let settings = a.settings()?;
    run_node(&settings, |r| {
        // One machine-readable line, for launchers and tests.
        let line = serde_json::json!({"ready": r.url, "node": r.node_id, "data_dir": r.data_dir, "peer_addr": r.peer_addr});
        println!("{line}");
    })
    .await?;
    Ok(0)
}

fn print_welcome(r: &Ready) {
    println!(
        r#"
warren node "{node}" is ready at {url}
  data dir: {dir}
  API key:  {key}   (stored in {keyfile})

Try it:
  export WARREN_URL={url} WARREN_API_KEY={key}
  warren exec hello 'uname -a; python3 --version'
  curl -s -H "Authorization: Bearer $WARREN_API_KEY" -X POST $WARREN_URL/v1/sandboxes/hello/exec \
       -d '{{"command": "echo hi from $(hostname)"}}'

Stop with Ctrl-C; sandboxes keep running and are re-adopted on the next start.
"#,
        node = r.node_id,
        url = r.url,
        dir = r.data_dir.display(),
        key = r.api_key,
        keyfile = r.api_key_file.display(),
    );
}
