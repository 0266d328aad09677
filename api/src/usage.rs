//! `GET /v1/usage`: what sandboxes used, per interval, summed over the cluster.

use serde::{Deserialize, Serialize};

/// How the items of a usage report are grouped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum UsageGroup {
    /// One item per sandbox id (the default).
    Sandbox,
    /// One item per value of this label (sandboxes without it: `label` null).
    Label(String),
    /// One item per UTC day (`YYYY-MM-DD`).
    Day,
}

impl UsageGroup {
    /// Parses `group_by` (`sandbox`, `label:KEY`, `day`).
    pub fn parse(s: &str) -> Result<UsageGroup, crate::ApiError> {
        match s {
            "sandbox" => Ok(UsageGroup::Sandbox),
            "day" => Ok(UsageGroup::Day),
            _ => match s.strip_prefix("label:") {
                Some(k) if !k.is_empty() => Ok(UsageGroup::Label(k.to_string())),
                _ => Err(crate::ApiError::invalid(format!(
                    "group_by must be sandbox, label:KEY or day, not {s:?}"
                ))),
            },
        }
    }

    /// As given in a query.
    pub fn as_query(&self) -> String {
        match self {
            UsageGroup::Sandbox => "sandbox".into(),
            UsageGroup::Label(k) => format!("label:{k}"),
            UsageGroup::Day => "day".into(),
        }
    }
}

/// One group's totals. Exactly one of `sandbox`, `label` and `day` is present, per
/// `group_by` (`label` may be null: the sandboxes without that label).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageItem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub label: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<String>,
    /// CPU time the sandbox's own processes used (cgroup accounting).
    pub cpu_seconds: f64,
    /// Provisioned memory while running, in GiB × seconds.
    pub memory_gib_seconds: f64,
    pub running_seconds: f64,
    /// Bytes sent and received through the egress proxy.
    pub egress_bytes: u64,
}

/// A field that is present (null or not) reads as `Some`; absent, as `None` (`default`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// The answer of `GET /v1/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageReport {
    pub items: Vec<UsageItem>,
    /// The range covered (RFC 3339).
    pub from: String,
    pub to: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_by_parses_and_round_trips() {
        for s in ["sandbox", "day", "label:team"] {
            assert_eq!(UsageGroup::parse(s).unwrap().as_query(), s);
        }
        for bad in ["", "label:", "week", "label"] {
            assert!(UsageGroup::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_item_carries_only_its_group_key() {
        let by_label_missing = UsageItem {
            label: Some(None),
            ..Default::default()
        };
        let v = serde_json::to_value(&by_label_missing).unwrap();
        assert!(v.get("label").unwrap().is_null());
        assert!(v.get("sandbox").is_none() && v.get("day").is_none());
        let back: UsageItem = serde_json::from_value(v).unwrap();
        assert_eq!(back, by_label_missing);
        let by_sandbox: UsageItem = serde_json::from_str(
            r#"{"sandbox": "a", "cpu_seconds": 1.5, "memory_gib_seconds": 0, "running_seconds": 2, "egress_bytes": 3}"#,
        )
        .unwrap();
        assert_eq!(by_sandbox.label, None);
        assert_eq!(by_sandbox.cpu_seconds, 1.5);
    }
}
