//! A request for an id placed nowhere yet: validated before anything is committed
//! (`precheck`), then placed on the rendezvous choice and sent there, passed on to the next
//! choice when the first cannot be reached or has no room (`place_and_route`).

use super::*;
/// A request for an id placed nowhere yet: what placing it needs.
pub(super) struct NewSandbox<'a> {
    pub(super) id: &'a str,
    pub(super) region: &'a str,
    pub(super) who: &'a Principal,
    pub(super) size: Size,
    /// The request again, when its body was read whole (`precheck`): it can be sent to
    /// another node after the chosen one refused it for want of room.
    pub(super) replay: Option<Replay>,
}

/// A request kept whole, to be sent again.
pub(super) struct Replay {
    parts: http::request::Parts,
    body: bytes::Bytes,
}

impl Replay {
    fn request(&self) -> Request {
        Request::from_parts(self.parts.clone(), Body::from(self.body.clone()))
    }
}

/// Pure: whether an answer says its node refused to make the sandbox for want of room
/// (503 `CAPACITY_EXHAUSTED`), so that the next rendezvous choice may take it.
pub(super) fn refused_for_room(status: http::StatusCode, body: &[u8]) -> bool {
    status == http::StatusCode::SERVICE_UNAVAILABLE
        && serde_json::from_slice::<ApiError>(body)
            .is_ok_and(|e| e.code == ErrorCode::CapacityExhausted)
}

/// Nodes a new sandbox is offered to at most (one that cannot be reached, or refuses it for
/// want of room, passes it on).
pub(super) const ATTEMPTS: usize = 3;

/// The largest refusal body read to tell why a node refused (they are a few hundred bytes).
pub(super) const REFUSAL_BODY_MAX: usize = 64 * 1024;

/// Commits a placement for a new id and sends the request to the chosen node. If that node
/// cannot be reached before anything was sent to it (it just died and is not marked down
/// yet), it never saw the sandbox: the placement moves to the next candidate (compare-and-set
/// on the epoch just committed) and the request follows. If the node refuses it for want of
/// room (its own admission: a size larger than what it announced room for, or room gone
/// within the second before it said so), it gives the placement up, and a request that can
/// be sent again is placed on the next candidate.
pub(super) async fn place_and_route(
    st: &AppState,
    new: NewSandbox<'_>,
    req: Request,
    next: Next,
) -> Placed {
    match place_once_routed(st, new, req, next).await {
        Ok(resp) => Placed::Answered(resp),
        Err(back) => Placed::PlacedMeanwhile(back),
    }
}

/// Where a new sandbox's request ended.
pub(super) enum Placed {
    Answered(Response),
    /// Another request placed the id first: this one is back, for routing to decide on
    /// that placement (follow it, or answer as absent if it is another tenant's).
    PlacedMeanwhile(Request),
}

/// [`place_and_route`]; `Err` gives the request back when another request placed the id
/// first.
async fn place_once_routed(
    st: &AppState,
    new: NewSandbox<'_>,
    mut req: Request,
    next: Next,
) -> Result<Response, Request> {
    let NewSandbox {
        id,
        region,
        who,
        size,
        replay,
    } = new;
    let cl = &st.cluster.cluster;
    let mut excluded: Vec<NodeId> = Vec::new();
    let mut expected_epoch = 0;
    for attempt in 0..ATTEMPTS {
        // A node at its sandbox limit, or one that said it is full, is passed over for the
        // next rendezvous choice (when every one said full, the first under its limit
        // decides for itself); when none is left, whether any was up at all says why.
        let choice = cl.read(|s| {
            choose_owner_for_new(s, id, region, &excluded)
                .ok_or_else(|| choose_owner_excluding(s, id, region, &excluded).is_some())
        });
        let choice = match choice {
            Ok(node) => node,
            Err(any_up) => {
                let why = if any_up {
                    "every node that is up runs its maximum of sandboxes"
                } else {
                    "no node is up to take a new sandbox"
                };
                return Ok(err(ApiError::new(ErrorCode::CapacityExhausted, why)));
            }
        };
        let cmd = Command::Place {
            sandbox: id.to_string(),
            node: choice,
            expected_epoch,
            tenant: Some(who.tenant.clone()),
            size: Some(size),
        };
        let p = match cl.propose(cmd).await {
            Ok(CommandResult::Placement {
                placement: Some(p),
                applied: true,
            }) => p,
            // Placed concurrently by someone else: routing follows the winner (or answers
            // as absent if it is another tenant's).
            Ok(CommandResult::Placement {
                placement: Some(_),
                applied: false,
            }) => return Err(req),
            Ok(CommandResult::Rejected { reason }) if reason.starts_with(QUOTA_EXCEEDED) => {
                return Ok(err(ApiError::new(ErrorCode::Forbidden, reason)
                    .with_details(
                        serde_json::json!({"tenant": who.tenant, "sandbox": id}),
                    )))
            }
            Ok(other) => {
                return Ok(err(ApiError::internal(format!(
                    "placement of {id} gave {other:?}"
                ))))
            }
            Err(e) => return Ok(err(ApiError::from(e))),
        };
        let answer = if p.node == cl.id {
            match LeaseHeld::wait(st).await {
                Some(lease) => {
                    serve_owned(st, id, p.epoch, req, Serve::Api(next.clone()), lease).await
                }
                None => no_lease(),
            }
        } else {
            let Some(node) = cl.read(|s| s.nodes.get(&p.node).cloned()) else {
                return Ok(err(ApiError::internal(format!(
                    "placement of {id} names an unknown node"
                ))));
            };
            match try_forward(st, &node, with_epoch(req, p.epoch)).await {
                Forwarded::Response(r) => r,
                Forwarded::Unreachable(back, why) => {
                    tracing::warn!(sandbox_id = %id, node = %node.name, %why, "new sandbox's node is unreachable; placing it elsewhere");
                    excluded.push(p.node);
                    expected_epoch = p.epoch;
                    req = back;
                    continue;
                }
            }
        };
        let Some(again) = replay.as_ref() else {
            return Ok(answer);
        };
        if answer.status() != http::StatusCode::SERVICE_UNAVAILABLE {
            return Ok(answer);
        }
        let (parts, body) = answer.into_parts();
        let body = match http_body_util::Limited::new(body, REFUSAL_BODY_MAX)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                return Ok(err(ApiError::new(
                    ErrorCode::Unavailable,
                    format!("the answer for new sandbox {id} was cut: {e}"),
                )))
            }
        };
        if !refused_for_room(parts.status, &body) {
            return Ok(Response::from_parts(parts, Body::from(body)));
        }
        // The refusing node gave the placement up before it answered; once that is applied
        // here, the next candidate is placed (compare-and-set on "placed nowhere").
        cl.wait_for(Duration::from_secs(2), |s| {
            s.placements.get(id).is_none_or(|q| q.epoch != p.epoch)
        })
        .await;
        excluded.push(p.node);
        // The refusal stands when the id is still placed (not given up in time, or placed
        // anew by someone else meanwhile), or when no other node could take it (its words
        // say why).
        let still_placed = cl.read(|s| s.placements.contains_key(id));
        let another = cl.read(|s| choose_owner_for_new(s, id, region, &excluded).is_some());
        if still_placed || !another || attempt + 1 == ATTEMPTS {
            return Ok(Response::from_parts(parts, Body::from(body)));
        }
        tracing::info!(sandbox_id = %id, node = p.node, "new sandbox refused for want of room; placing it on the next candidate");
        expected_epoch = 0;
        req = again.request();
    }
    Ok(err(ApiError::new(
        ErrorCode::Unavailable,
        format!("no node could take sandbox {id}"),
    )))
}

/// The size a sandbox made with `req` (or with defaults) has, for its tenant's quota.
pub(super) fn size_of(
    req: Option<&warren_api::sandbox::CreateSandboxRequest>,
) -> Result<Size, ApiError> {
    let r = warren_api::sandbox::Resources::resolve(
        req.and_then(|r| r.instance_type.as_deref()),
        req.and_then(|r| r.resources.as_ref()),
    )?;
    Ok(Size {
        millicpus: warren_api::tenants::millicpus(r.cpus),
        memory_mb: r.memory_mb,
    })
}

/// Before a placement is committed for a new id: the request must be valid, so that bad
/// input never leaves a placement (or a container) behind. Returns the request with its body
/// restored, the region hint of a PUT, and the new sandbox's size.
pub(super) async fn precheck(
    req: Request,
    id: &str,
    whole: bool,
) -> Result<(Request, Option<String>, Size, Option<Replay>), Response> {
    use crate::routes::validate::{classify, BodyKind};
    let method = req.method().clone();
    let rest = if whole {
        None
    } else {
        let path = req.uri().path();
        Some(
            path[path
                .find(&format!("/{id}/"))
                .map(|i| i + id.len() + 2)
                .unwrap_or(path.len())..]
                .to_string(),
        )
    };
    let defaults = size_of(None).map_err(err)?;
    let check = match &rest {
        None if method == Method::PUT => None,
        None => return Ok((req, None, defaults, None)),
        Some(rest) => match classify(&method, rest, req.uri().query()) {
            Ok(BodyKind::Json(check)) => Some(check),
            Ok(_) => return Ok((req, None, defaults, None)),
            Err(e) => return Err(err(e)),
        },
    };
    let (parts, body) = req.into_parts();
    let bytes = match http_body_util::Limited::new(body, MAX_PUT_BODY * 32)
        .collect()
        .await
    {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            return Err(err(ApiError::invalid(format!(
                "cannot read the request body: {e}"
            ))))
        }
    };
    let (region, size) = match check {
        Some(check) => {
            check(&bytes).map_err(err)?;
            (None, defaults)
        }
        None => {
            let create: warren_api::sandbox::CreateSandboxRequest =
                warren_api::error::parse_json(&bytes).map_err(err)?;
            create.validate().map_err(err)?;
            let size = size_of(Some(&create)).map_err(err)?;
            (create.region, size)
        }
    };
    let replay = Replay {
        parts: parts.clone(),
        body: bytes.clone(),
    };
    Ok((
        Request::from_parts(parts, Body::from(bytes)),
        region,
        size,
        Some(replay),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_for_want_of_room_sends_a_new_sandbox_on() {
        let body = |code| ApiError::new(code, "x").to_json().into_bytes();
        let unavailable = http::StatusCode::SERVICE_UNAVAILABLE;
        assert!(refused_for_room(
            unavailable,
            &body(ErrorCode::CapacityExhausted)
        ));
        assert!(!refused_for_room(
            unavailable,
            &body(ErrorCode::Unavailable)
        ));
        assert!(!refused_for_room(unavailable, b"not json"));
        assert!(!refused_for_room(
            http::StatusCode::OK,
            &body(ErrorCode::CapacityExhausted)
        ));
    }
}
