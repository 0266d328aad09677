//! Where a sandbox request goes: one pure decision from what this node has applied (the
//! sandbox's placement), whether it holds its lease, who asks, and how the request came
//! (from a client, or forwarded by a peer under the placement epoch its entry node
//! committed). `route::execute` carries the decision out, for API calls and preview URLs
//! alike; a decision to wait is followed by deciding again on the state the wait saw.

use crate::auth::Principal;
use warren_api::keys::DEFAULT_TENANT;
use warren_consensus::{NodeId, Placement, PlacementState};

/// What routing knows of one request.
pub(crate) struct RouteInput<'a> {
    /// This node.
    pub me: NodeId,
    /// The sandbox's placement as this node has applied it (none: placed nowhere).
    pub placement: Option<&'a Placement>,
    /// The caller; none for a preview URL (its token is the preview proxy's to check).
    pub who: Option<&'a Principal>,
    /// Forwarded by a peer (served here or refused: one hop only).
    pub from_peer: bool,
    /// The placement epoch a peer forwarded it under.
    pub sent_epoch: Option<u64>,
    /// A GET or DELETE of the sandbox itself: it never creates one.
    pub read_or_delete: bool,
    /// This node has applied everything committed before the request arrived (a read
    /// barrier passed): "placed nowhere" is then the cluster's answer, not a lagging view.
    pub caught_up: bool,
    /// This node has a copy of the sandbox (of interest when no placement names it: a
    /// sandbox it had before it joined a cluster).
    pub local_copy: bool,
    /// This node holds its lease: in touch with the majority, it may serve its sandboxes.
    pub lease_held: bool,
    /// This request already waited for the lease (bounded) and it did not come.
    pub lease_waited: bool,
}

/// What to do with the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// Another tenant's sandbox (`owner`): answered as if absent.
    Foreign { owner: String },
    /// Moving between nodes: wait for the move to end, then decide again.
    AwaitMove,
    /// This node's view may lag: pass a read barrier, then decide again.
    AwaitCatchUp,
    /// Served here once this node's applied placement names it at `epoch` or later (a peer
    /// may have committed a placement this node has not applied yet).
    ServeOwned { epoch: u64 },
    /// Owned by another node: sent there (following it if it moves or fails over).
    Forward { node: NodeId, epoch: u64 },
    /// A peer sent it for a sandbox placed elsewhere, under no later placement: its view is
    /// stale; refused (retryable) rather than forwarded a second time.
    RefuseStale,
    /// Placed nowhere, as the cluster has it, and this node has a copy from before it joined
    /// a cluster: served here.
    ServeUnplaced,
    /// Placed nowhere, as the cluster has it, and not here: absent (404, or 204 for a
    /// delete; a preview's token is refused).
    Absent,
    /// Would be served here, but this node does not hold its lease: wait for it (bounded),
    /// then decide again.
    AwaitLease,
    /// Would be served here, and the lease did not come back in time: refused (retryable).
    NoLease,
    /// A peer's read or delete of an id placed nowhere: served here as it is.
    ServeAsSent,
    /// Placed nowhere: commit a placement for it, then send it to the chosen node.
    Place,
}

/// Pure: see [`Route`]. Nothing is served here without the lease.
pub(crate) fn decide(i: &RouteInput) -> Route {
    let route = decide_by_placement(i);
    let serves_here = matches!(route, Route::ServeOwned { .. } | Route::ServeUnplaced);
    match (serves_here, i.lease_held, i.lease_waited) {
        (true, false, false) => Route::AwaitLease,
        (true, false, true) => Route::NoLease,
        _ => route,
    }
}

fn may_touch(who: Option<&Principal>, tenant: &str) -> bool {
    who.is_none_or(|w| w.may_touch(tenant))
}

fn decide_by_placement(i: &RouteInput) -> Route {
    if let Some(p) = i.placement {
        if !may_touch(i.who, p.tenant()) {
            return Route::Foreign {
                owner: p.tenant().to_string(),
            };
        }
        if p.state == PlacementState::Migrating {
            return Route::AwaitMove;
        }
        return placed(i.me, p.node, p.epoch, i.from_peer, i.sent_epoch);
    }
    match (i.read_or_delete, i.from_peer) {
        (true, true) => Route::ServeAsSent,
        (true, false) if !i.caught_up => Route::AwaitCatchUp,
        // A sandbox of a node that predates the cluster is the default tenant's.
        (true, false) if !may_touch(i.who, DEFAULT_TENANT) => Route::Foreign {
            owner: DEFAULT_TENANT.to_string(),
        },
        (true, false) if i.local_copy => Route::ServeUnplaced,
        (true, false) => Route::Absent,
        // The entry node committed a placement naming this node; its log may not have it.
        (false, true) => Route::ServeOwned {
            epoch: i.sent_epoch.unwrap_or(1),
        },
        (false, false) => Route::Place,
    }
}

/// Pure: the route of a request for a sandbox placed on `node` under `epoch` (not moving).
pub(crate) fn placed(
    me: NodeId,
    node: NodeId,
    epoch: u64,
    from_peer: bool,
    sent_epoch: Option<u64>,
) -> Route {
    match sent_epoch.filter(|_| from_peer) {
        // The sender committed a later placement than this node has applied (a new sandbox
        // given up by a node without room and placed here, say): wait for it to apply.
        Some(sent) if sent > epoch => Route::ServeOwned { epoch: sent },
        _ if node == me => Route::ServeOwned { epoch },
        _ if from_peer => Route::RefuseStale,
        _ => Route::Forward { node, epoch },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ME: NodeId = 1;

    fn principal(tenant: &str, admin: bool) -> Principal {
        Principal {
            key_id: "k".into(),
            tenant: tenant.into(),
            admin,
        }
    }

    fn placement(node: NodeId, epoch: u64, migrating: bool, tenant: Option<&str>) -> Placement {
        let mut p: Placement = serde_json::from_value(
            serde_json::json!({"sandbox": "s", "node": node, "epoch": epoch}),
        )
        .unwrap();
        if migrating {
            p.state = PlacementState::Migrating;
        }
        p.tenant = tenant.map(str::to_string);
        p
    }

    fn input<'a>(p: Option<&'a Placement>, who: &'a Principal) -> RouteInput<'a> {
        RouteInput {
            me: ME,
            placement: p,
            who: Some(who),
            from_peer: false,
            sent_epoch: None,
            read_or_delete: false,
            caught_up: false,
            local_copy: false,
            lease_held: true,
            lease_waited: false,
        }
    }

    #[test]
    fn the_cases_by_name() {
        let admin = principal("default", true);
        let acme = principal("acme", false);
        let here = placement(ME, 4, false, Some("acme"));
        let there = placement(2, 4, false, Some("acme"));
        // A client's request: served by the owner, forwarded by anyone else.
        assert_eq!(
            decide(&input(Some(&here), &acme)),
            Route::ServeOwned { epoch: 4 }
        );
        assert_eq!(
            decide(&input(Some(&there), &acme)),
            Route::Forward { node: 2, epoch: 4 }
        );
        // Another tenant's: absent, whatever it asks.
        let other = principal("globex", false);
        assert_eq!(
            decide(&input(Some(&here), &other)),
            Route::Foreign {
                owner: "acme".into()
            }
        );
        assert_eq!(
            decide(&input(Some(&here), &admin)),
            Route::ServeOwned { epoch: 4 }
        );
        // Moving: wait.
        let moving = placement(2, 4, true, Some("acme"));
        assert_eq!(decide(&input(Some(&moving), &acme)), Route::AwaitMove);
        // A peer under a later epoch than applied here is waited for; under the same, it is stale.
        let peer = |sent| RouteInput {
            from_peer: true,
            sent_epoch: sent,
            ..input(Some(&there), &acme)
        };
        assert_eq!(decide(&peer(Some(5))), Route::ServeOwned { epoch: 5 });
        assert_eq!(decide(&peer(Some(4))), Route::RefuseStale);
        assert_eq!(decide(&peer(None)), Route::RefuseStale);
        // Placed nowhere: a create places it; a read or delete waits for the view to catch
        // up, then is local or absent; a peer's read is served as sent.
        assert_eq!(decide(&input(None, &acme)), Route::Place);
        let read = |caught_up, from_peer, who| RouteInput {
            read_or_delete: true,
            caught_up,
            from_peer,
            ..input(None, who)
        };
        assert_eq!(decide(&read(false, false, &acme)), Route::AwaitCatchUp);
        assert_eq!(
            decide(&read(true, false, &acme)),
            Route::Foreign {
                owner: DEFAULT_TENANT.into()
            }
        );
        assert_eq!(decide(&read(true, false, &admin)), Route::Absent);
        let kept = RouteInput {
            local_copy: true,
            ..read(true, false, &admin)
        };
        assert_eq!(decide(&kept), Route::ServeUnplaced);
        assert_eq!(decide(&read(false, true, &acme)), Route::ServeAsSent);
        // A peer's create for an id not applied here yet: served once its placement is.
        let create = RouteInput {
            from_peer: true,
            sent_epoch: Some(7),
            ..input(None, &acme)
        };
        assert_eq!(decide(&create), Route::ServeOwned { epoch: 7 });
        // Without the lease nothing is served here: waited for once, then refused; a
        // forward needs no lease of this node's.
        let no_lease = |waited| RouteInput {
            lease_held: false,
            lease_waited: waited,
            ..input(Some(&here), &acme)
        };
        assert_eq!(decide(&no_lease(false)), Route::AwaitLease);
        assert_eq!(decide(&no_lease(true)), Route::NoLease);
        let elsewhere = RouteInput {
            lease_held: false,
            ..input(Some(&there), &acme)
        };
        assert_eq!(decide(&elsewhere), Route::Forward { node: 2, epoch: 4 });
        // A preview (no caller) is never another tenant's: its token decides.
        let preview = RouteInput {
            who: None,
            read_or_delete: true,
            ..input(Some(&here), &other)
        };
        assert_eq!(decide(&preview), Route::ServeOwned { epoch: 4 });
    }

    /// A placement (node, epoch, moving, tenant), the caller's tenant and admin flag (none:
    /// a preview), from a peer, the sent epoch, read or delete, caught up, and (local copy,
    /// lease held, lease waited).
    type Case = (
        Option<(NodeId, u64, bool, Option<String>)>,
        Option<(String, bool)>,
        bool,
        Option<u64>,
        bool,
        bool,
        (bool, bool, bool),
    );

    fn any_input() -> impl Strategy<Value = Case> {
        let tenant =
            prop::sample::select(vec!["default".to_string(), "acme".into(), "globex".into()]);
        (
            prop::option::of((
                1u64..4,
                1u64..10,
                any::<bool>(),
                prop::option::of(tenant.clone()),
            )),
            prop::option::of((tenant, any::<bool>())),
            any::<bool>(),
            prop::option::of(1u64..12),
            any::<bool>(),
            any::<bool>(),
            (any::<bool>(), any::<bool>(), any::<bool>()),
        )
    }

    proptest! {
        /// What holds for every request: a peer's request is never forwarded again; a
        /// tenant never reaches another tenant's sandbox; this node serves only what its
        /// applied placement (or the sender's later one) gives it, never at an older epoch;
        /// a placed id is never placed again; "absent" needs a caught-up view; nothing is
        /// served here without the lease, and the lease is waited for once.
        #[test]
        fn invariants((p, caller, from_peer, sent, read_or_delete, caught_up, (local_copy, lease_held, lease_waited)) in any_input()) {
            let placement = p.as_ref().map(|(n, e, m, t)| placement(*n, *e, *m, t.as_deref()));
            let who = caller.as_ref().map(|(tenant, admin)| principal(tenant, *admin));
            let i = RouteInput {
                me: ME,
                placement: placement.as_ref(),
                who: who.as_ref(),
                from_peer,
                sent_epoch: sent,
                read_or_delete,
                caught_up,
                local_copy,
                lease_held,
                lease_waited,
            };
            let route = decide(&i);
            if matches!(route, Route::ServeOwned { .. } | Route::ServeUnplaced) {
                prop_assert!(lease_held, "{route:?}");
            }
            if route == Route::AwaitLease {
                prop_assert!(!lease_held && !lease_waited);
            }
            if route == Route::NoLease {
                prop_assert!(!lease_held && lease_waited);
            }
            // With the lease, the same request decides as it does without having waited.
            if lease_held {
                let again = decide(&RouteInput { lease_waited: !lease_waited, ..i });
                prop_assert_eq!(&again, &route);
            }
            if from_peer {
                prop_assert!(!matches!(route, Route::Forward { .. } | Route::Place | Route::AwaitCatchUp), "{route:?}");
            }
            if let Some(p) = &placement {
                if who.as_ref().is_some_and(|w| !w.may_touch(p.tenant())) {
                    prop_assert!(matches!(route, Route::Foreign { .. }), "{route:?}");
                }
                prop_assert!(!matches!(route, Route::Place | Route::ServeUnplaced | Route::Absent | Route::ServeAsSent | Route::AwaitCatchUp), "{route:?}");
                match route {
                    Route::ServeOwned { epoch } => {
                        prop_assert!(epoch >= p.epoch);
                        prop_assert!(p.node == ME || (from_peer && sent == Some(epoch) && epoch > p.epoch));
                    }
                    Route::Forward { node, epoch } => {
                        prop_assert!(node == p.node && node != ME && epoch == p.epoch && !from_peer);
                    }
                    _ => {}
                }
            } else {
                prop_assert!(!matches!(route, Route::Forward { .. } | Route::AwaitMove | Route::RefuseStale), "{route:?}");
                if matches!(route, Route::ServeUnplaced | Route::Absent) {
                    prop_assert!(caught_up && read_or_delete && !from_peer);
                    prop_assert_eq!(route == Route::ServeUnplaced, local_copy);
                }
                if route == Route::Place {
                    prop_assert!(!read_or_delete && !from_peer);
                }
            }
        }
    }
}
