//! `GET /v1/sandboxes/{id}/watch` (api.md "Watch"): the query and the events of the stream.

use crate::ApiError;
use serde::{Deserialize, Serialize};

/// Longest include or exclude list.
pub const MAX_PATTERNS: usize = 64;

/// The watch's query; `include` and `exclude` may repeat, so it is parsed by hand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchQuery {
    pub path: String,
    pub recursive: bool,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl WatchQuery {
    /// Parses and checks a query string (`path` defaults to the default working directory,
    /// `recursive` to true).
    pub fn parse(query: Option<&str>) -> Result<Self, ApiError> {
        let mut q = WatchQuery {
            path: crate::exec::DEFAULT_CWD.to_string(),
            recursive: true,
            ..Default::default()
        };
        for (k, v) in form_pairs(query.unwrap_or_default()) {
            match k.as_str() {
                "path" => q.path = v,
                "recursive" => {
                    q.recursive = match v.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(ApiError::invalid(format!(
                                "recursive must be true or false, not {v:?}"
                            )))
                        }
                    }
                }
                "include" => q.include.push(v),
                "exclude" => q.exclude.push(v),
                _ => {}
            }
        }
        crate::files::validate_path(&q.path)?;
        if q.include.len() > MAX_PATTERNS || q.exclude.len() > MAX_PATTERNS {
            return Err(ApiError::invalid(format!(
                "at most {MAX_PATTERNS} include and {MAX_PATTERNS} exclude patterns"
            )));
        }
        if let Some(p) = q.include.iter().chain(&q.exclude).find(|p| p.is_empty()) {
            return Err(ApiError::invalid(format!("empty pattern {p:?}")));
        }
        Ok(q)
    }
}

/// `k=v&…` pairs, percent- and plus-decoded.
fn form_pairs(q: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FsEventKind {
    Create,
    Modify,
    Delete,
    MoveFrom,
    MoveTo,
    Attrib,
}

/// Events of a watch stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WatchEvent {
    /// The watch is live: changes from now on are reported.
    Watching { path: String },
    Event {
        event: FsEventKind,
        path: String,
        is_dir: bool,
        timestamp: String,
    },
    /// The watch ended (its root was deleted, or the kernel's queue overflowed).
    Error { message: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_repeat_patterns_and_default_sensibly() {
        let q = WatchQuery::parse(Some(
            "path=%2Fworkspace%2Fsrc&include=*.ts&include=*.tsx&exclude=.git&recursive=false",
        ))
        .unwrap();
        assert_eq!(q.path, "/workspace/src");
        assert_eq!(q.include, vec!["*.ts", "*.tsx"]);
        assert_eq!(q.exclude, vec![".git"]);
        assert!(!q.recursive);
        let d = WatchQuery::parse(None).unwrap();
        assert_eq!((d.path.as_str(), d.recursive), ("/workspace", true));
        assert!(WatchQuery::parse(Some("path=relative")).is_err());
        assert!(WatchQuery::parse(Some("recursive=yes")).is_err());
        assert!(WatchQuery::parse(Some("include=")).is_err());
    }

    #[test]
    fn events_use_the_documented_json() {
        let e = WatchEvent::Event {
            event: FsEventKind::MoveTo,
            path: "/w/a".into(),
            is_dir: false,
            timestamp: "t".into(),
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"event","event":"move_to","path":"/w/a","is_dir":false,"timestamp":"t"}"#
        );
    }
}
