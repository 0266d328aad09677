//! The route of a request as a metrics label: the path with every id, name and file path
//! replaced by a placeholder (`/v1/sandboxes/{id}/processes/{pid}/logs`), so that no
//! sandbox id or user-chosen name ever becomes a label value and the label's values stay few.

/// Path words that are part of the API's routes, kept as they are.
const WORDS: &[&str] = &[
    "v1",
    "internal",
    "join",
    "healthz",
    "metrics",
    "ui",
    "openapi.json",
    "sandboxes",
    "exec",
    "sessions",
    "env",
    "contexts",
    "run",
    "watch",
    "snapshots",
    "restore",
    "fork",
    "sleep",
    "egress",
    "ports",
    "terminals",
    "processes",
    "logs",
    "wait",
    "log",
    "port",
    "exit",
    "git",
    "checkout",
    "fs",
    "list",
    "stat",
    "mkdir",
    "move",
    "archive",
    "files",
    "secrets",
    "cluster",
    "nodes",
    "drain",
    "tickets",
    "usage",
    "keys",
    "tenants",
    "stdin",
    "signal",
    "interrupt",
];

/// The placeholder for a segment that follows `prev`.
fn placeholder(prev: &str) -> &'static str {
    match prev {
        "sandboxes" => "{id}",
        "snapshots" => "{sid}",
        "nodes" => "{node}",
        "secrets" | "terminals" | "ui" => "{name}",
        "sessions" => "{session}",
        "contexts" => "{cid}",
        "processes" => "{pid}",
        "ports" => "{port}",
        "keys" => "{key}",
        "tenants" => "{tenant}",
        _ => "{}",
    }
}

/// At most this many segments are kept; deeper paths end in `…`.
const DEPTH: usize = 8;

/// The route label of `path`.
pub fn route_of(path: &str) -> String {
    if path == "/" {
        return "/".into();
    }
    let mut out = String::new();
    let mut prev = "";
    for (i, seg) in path.trim_start_matches('/').split('/').enumerate() {
        if i == DEPTH {
            out.push_str("/…");
            break;
        }
        out.push('/');
        if prev == "files" {
            // A file's path, however deep.
            out.push_str("{path}");
            break;
        }
        // A route word, unless it stands where an id or a name goes.
        if WORDS.contains(&seg) && placeholder(prev) == "{}" {
            out.push_str(seg);
        } else {
            out.push_str(placeholder(prev));
        }
        prev = seg;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_names_and_file_paths_become_placeholders() {
        for (path, route) in [
            ("/", "/"),
            ("/healthz", "/healthz"),
            ("/v1/sandboxes", "/v1/sandboxes"),
            ("/v1/sandboxes/agent-7/exec", "/v1/sandboxes/{id}/exec"),
            // An id that is also a route word is still an id.
            ("/v1/sandboxes/exec/exec", "/v1/sandboxes/{id}/exec"),
            (
                "/v1/sandboxes/a/processes/web/logs",
                "/v1/sandboxes/{id}/processes/{pid}/logs",
            ),
            (
                "/v1/sandboxes/a/processes/web/wait/port",
                "/v1/sandboxes/{id}/processes/{pid}/wait/port",
            ),
            (
                "/v1/sandboxes/a/files/workspace/deep/er/file.txt",
                "/v1/sandboxes/{id}/files/{path}",
            ),
            (
                "/v1/sandboxes/a/fs/archive",
                "/v1/sandboxes/{id}/fs/archive",
            ),
            (
                "/v1/sandboxes/a/contexts/c1/run",
                "/v1/sandboxes/{id}/contexts/{cid}/run",
            ),
            ("/v1/snapshots/snap-1", "/v1/snapshots/{sid}"),
            ("/v1/secrets/token-a", "/v1/secrets/{name}"),
            (
                "/v1/cluster/nodes/n2/drain",
                "/v1/cluster/nodes/{node}/drain",
            ),
            ("/ui/app.js", "/ui/{name}"),
            // Anything else (preview hosts' paths, typos): placeholders, bounded in depth.
            ("/some/user/page", "/{}/{}/{}"),
            ("/a/b/c/d/e/f/g/h/i/j/k", "/{}/{}/{}/{}/{}/{}/{}/{}/…"),
        ] {
            assert_eq!(route_of(path), route, "{path}");
        }
    }
}
