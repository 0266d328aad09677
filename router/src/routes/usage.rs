//! `GET /v1/usage`: from a client, every node's part (each sampled up to now) summed; from
//! a peer, this node's own part, grouped the same way.

use crate::auth::Principal;
use crate::cluster::gather::from_other_nodes;
use crate::cluster::FromPeer;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::collections::HashSet;
use std::time::{Duration, SystemTime};
use warren_api::sandbox::parse_label_filter;
use warren_api::time::{parse_rfc3339, rfc3339, unix_millis};
use warren_api::usage::{UsageGroup, UsageReport};
use warren_api::ApiError;
use warren_consensus::NodeState;
use warren_node::usage::report::{merge, UsageQuery};

/// The range when none is given: the last day.
const DEFAULT_RANGE: Duration = Duration::from_secs(24 * 3600);

fn time(name: &str, v: &str) -> Result<SystemTime, ApiError> {
    parse_rfc3339(v)
        .ok_or_else(|| ApiError::invalid(format!("{name} must be an RFC 3339 time, not {v:?}")))
}

/// The query of `GET /v1/usage`, with `now` for the default range.
pub fn parse_query(q: Option<&str>, now: SystemTime) -> Result<UsageQuery, ApiError> {
    let (mut sandbox, mut labels, mut from, mut to, mut group, mut tenant) =
        (None, Vec::new(), None, None, UsageGroup::Sandbox, None);
    for (k, v) in form_urlencoded::parse(q.unwrap_or_default().as_bytes()) {
        match k.as_ref() {
            "sandbox" => {
                warren_api::ids::validate_sandbox_id(&v)?;
                sandbox = Some(v.into_owned());
            }
            "label" => labels.push(parse_label_filter(&v)?),
            "from" => from = Some(time("from", &v)?),
            "to" => to = Some(time("to", &v)?),
            "group_by" => group = UsageGroup::parse(&v)?,
            "tenant" => {
                warren_api::keys::validate_tenant(&v)?;
                tenant = Some(v.into_owned());
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}"
                )))
            }
        }
    }
    let to = to.unwrap_or(now);
    let from = from.unwrap_or(to - DEFAULT_RANGE);
    if from > to {
        return Err(ApiError::invalid("from must not be after to"));
    }
    Ok(UsageQuery {
        sandbox,
        labels,
        from_ms: unix_millis(from),
        to_ms: unix_millis(to),
        group,
        tenant,
    })
}

/// Milliseconds since the epoch as RFC 3339.
fn at(ms: u64) -> String {
    rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

/// The query as this node sends it on to the others (times made explicit, so that every
/// node answers for the same range).
fn to_query(q: &UsageQuery) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    if let Some(id) = &q.sandbox {
        s.append_pair("sandbox", id);
    }
    for (k, v) in &q.labels {
        s.append_pair("label", &format!("{k}={v}"));
    }
    s.append_pair("from", &at(q.from_ms));
    s.append_pair("to", &at(q.to_ms));
    s.append_pair("group_by", &q.group.as_query());
    if let Some(t) = &q.tenant {
        s.append_pair("tenant", t);
    }
    s.finish()
}

pub async fn get(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
    axum::Extension(who): axum::Extension<Principal>,
    req: axum::extract::Request,
) -> ApiResult<Response> {
    let mut q = parse_query(raw.as_deref(), SystemTime::now())?;
    // A tenant key sees its own tenant's usage only (an admin may pick one with `tenant=`).
    if let Some(t) = who.only_tenant() {
        q.tenant = Some(t.to_string());
    }
    let (from, to) = (at(q.from_ms), at(q.to_ms));
    let path = format!("/v1/usage?{}", to_query(&q));
    let mine = state.mgr.usage_report(q.clone()).await?;
    if req.extensions().get::<FromPeer>().is_some() {
        return Ok(Json(UsageReport {
            items: mine,
            from,
            to,
        })
        .into_response());
    }
    // The nodes asked (every one not down) answer from their ledgers; the others' part is
    // what they exported to the object store.
    let cl = &state.cluster.cluster;
    let mut live: HashSet<String> = cl.read(|s| {
        s.nodes
            .values()
            .filter(|n| n.state != NodeState::Down)
            .map(|n| n.name.clone())
            .collect()
    });
    live.insert(state.mgr.config().node_id.clone());
    let parts: Vec<UsageReport> = from_other_nodes(&state, &path, &who, "its usage").await?;
    let gone = state.mgr.exported_usage(&q, &live).await?;
    let items = merge(
        mine.into_iter()
            .chain(gone)
            .chain(parts.into_iter().flat_map(|p| p.items)),
    );
    Ok(Json(UsageReport { items, from, to }).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_defaults_to_the_last_day_by_sandbox_and_refuses_what_it_does_not_know() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10 * 86_400);
        let q = parse_query(None, now).unwrap();
        assert_eq!((q.from_ms, q.to_ms), (9 * 86_400_000, 10 * 86_400_000));
        assert_eq!(q.group, UsageGroup::Sandbox);
        let q = parse_query(
            Some("sandbox=a-1&label=team=x&label=env=prod&from=1970-01-02T00:00:00Z&to=1970-01-03T00:00:00Z&group_by=label:team&tenant=acme"),
            now,
        )
        .unwrap();
        assert_eq!(q.sandbox.as_deref(), Some("a-1"));
        assert_eq!(q.labels.len(), 2);
        assert_eq!((q.from_ms, q.to_ms), (86_400_000, 2 * 86_400_000));
        assert_eq!(q.group, UsageGroup::Label("team".into()));
        assert_eq!(q.tenant.as_deref(), Some("acme"));
        // What a node sends on reads back the same.
        assert_eq!(parse_query(Some(&to_query(&q)), now).unwrap(), q);
        for bad in [
            "from=yesterday",
            "group_by=week",
            "label=nokey",
            "sandbox=Bad/Id",
            "color=red",
            "tenant=Not/A/Tenant",
            "from=1970-01-03T00:00:00Z&to=1970-01-02T00:00:00Z",
        ] {
            let e = parse_query(Some(bad), now).unwrap_err();
            assert_eq!(e.code, warren_api::ErrorCode::InvalidArgument, "{bad}");
        }
    }
}
