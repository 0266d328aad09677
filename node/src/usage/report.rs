//! Pure: ledger records filtered and grouped into a usage report's items.

use std::collections::BTreeMap;
use warren_api::usage::{UsageGroup, UsageItem};
use warren_storage::ledger::{RecordKey, UsageRecord};

/// What `GET /v1/usage` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageQuery {
    pub sandbox: Option<String>,
    /// Every one must match the labels a record was sampled with.
    pub labels: Vec<(String, String)>,
    /// Intervals starting in `[from_ms, to_ms)`.
    pub from_ms: u64,
    pub to_ms: u64,
    pub group: UsageGroup,
    /// Only this tenant's sandboxes (none: every tenant's).
    pub tenant: Option<String>,
}

fn matches(q: &UsageQuery, k: &RecordKey, r: &UsageRecord) -> bool {
    q.sandbox.as_ref().is_none_or(|s| *s == k.sandbox)
        && q.tenant.as_ref().is_none_or(|t| {
            t == r
                .tenant
                .as_deref()
                .unwrap_or(warren_api::keys::DEFAULT_TENANT)
        })
        && q.labels.iter().all(|(lk, lv)| r.labels.get(lk) == Some(lv))
}

/// The item a record adds to, with only its group key set.
fn group_key(g: &UsageGroup, k: &RecordKey, r: &UsageRecord) -> UsageItem {
    let mut item = UsageItem::default();
    match g {
        UsageGroup::Sandbox => item.sandbox = Some(k.sandbox.clone()),
        UsageGroup::Label(name) => item.label = Some(r.labels.get(name).cloned()),
        UsageGroup::Day => {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(k.interval_ms);
            item.day = Some(warren_api::time::rfc3339(t)[..10].to_string())
        }
    }
    item
}

/// The items of `records` that `q` selects, summed per group.
pub fn aggregate<'a>(
    q: &UsageQuery,
    records: impl IntoIterator<Item = &'a (RecordKey, UsageRecord)>,
) -> Vec<UsageItem> {
    let items = records
        .into_iter()
        .filter(|(k, r)| k.interval_ms >= q.from_ms && k.interval_ms < q.to_ms && matches(q, k, r))
        .map(|(k, r)| UsageItem {
            cpu_seconds: r.cpu_ns as f64 / 1e9,
            memory_gib_seconds: r.memory_mib_ms as f64 / 1024.0 / 1000.0,
            running_seconds: r.running_ms as f64 / 1000.0,
            egress_bytes: r.egress_bytes,
            ..group_key(&q.group, k, r)
        });
    merge(items)
}

/// An item's group: its sandbox, label value or day (one of them set).
type GroupKey = (Option<String>, Option<Option<String>>, Option<String>);

/// Items summed per group key (sandbox, label or day), in key order: how the parts that
/// each node reports make the cluster's.
pub fn merge(items: impl IntoIterator<Item = UsageItem>) -> Vec<UsageItem> {
    let mut by: BTreeMap<GroupKey, UsageItem> = BTreeMap::new();
    for i in items {
        let key = (i.sandbox.clone(), i.label.clone(), i.day.clone());
        let e = by.entry(key).or_insert_with(|| UsageItem {
            sandbox: i.sandbox.clone(),
            label: i.label.clone(),
            day: i.day.clone(),
            ..Default::default()
        });
        e.cpu_seconds += i.cpu_seconds;
        e.memory_gib_seconds += i.memory_gib_seconds;
        e.running_seconds += i.running_seconds;
        e.egress_bytes += i.egress_bytes;
    }
    by.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(
        t: u64,
        sandbox: &str,
        node: &str,
        cpu_s: u64,
        team: Option<&str>,
    ) -> (RecordKey, UsageRecord) {
        (
            RecordKey {
                interval_ms: t,
                sandbox: sandbox.into(),
                node: node.into(),
            },
            UsageRecord {
                cpu_ns: cpu_s * 1_000_000_000,
                memory_mib_ms: 1024 * 1000 * cpu_s,
                running_ms: 1000 * cpu_s,
                egress_bytes: cpu_s,
                labels: team
                    .map(|t| [("team".to_string(), t.to_string())].into())
                    .unwrap_or_default(),
                tenant: None,
            },
        )
    }

    fn q(group: UsageGroup) -> UsageQuery {
        UsageQuery {
            sandbox: None,
            labels: vec![],
            from_ms: 0,
            to_ms: u64::MAX,
            group,
            tenant: None,
        }
    }

    const DAY: u64 = 86_400_000;

    #[test]
    fn groups_by_sandbox_label_and_day_across_nodes() {
        let records = vec![
            rec(0, "a", "n1", 1, Some("x")),
            rec(60_000, "a", "n2", 2, Some("x")),
            rec(DAY, "b", "n1", 4, None),
            rec(DAY + 60_000, "c", "n2", 8, Some("y")),
        ];
        let by_sandbox = aggregate(&q(UsageGroup::Sandbox), &records);
        let cpu: Vec<(String, f64)> = by_sandbox
            .iter()
            .map(|i| (i.sandbox.clone().unwrap(), i.cpu_seconds))
            .collect();
        assert_eq!(
            cpu,
            vec![("a".into(), 3.0), ("b".into(), 4.0), ("c".into(), 8.0)]
        );
        assert_eq!(by_sandbox[0].memory_gib_seconds, 3.0);
        assert_eq!(by_sandbox[0].running_seconds, 3.0);
        assert_eq!(by_sandbox[0].egress_bytes, 3);

        let by_label = aggregate(&q(UsageGroup::Label("team".into())), &records);
        let cpu: Vec<(Option<String>, f64)> = by_label
            .iter()
            .map(|i| (i.label.clone().unwrap(), i.cpu_seconds))
            .collect();
        assert_eq!(
            cpu,
            vec![
                (None, 4.0),
                (Some("x".into()), 3.0),
                (Some("y".into()), 8.0)
            ]
        );

        let by_day = aggregate(&q(UsageGroup::Day), &records);
        let cpu: Vec<(String, f64)> = by_day
            .iter()
            .map(|i| (i.day.clone().unwrap(), i.cpu_seconds))
            .collect();
        assert_eq!(
            cpu,
            vec![("1970-01-01".into(), 3.0), ("1970-01-02".into(), 12.0)]
        );
    }

    #[test]
    fn a_tenant_filter_keeps_that_tenants_records_and_old_ones_are_the_default_tenants() {
        let mut acme = rec(0, "a", "n1", 1, None);
        acme.1.tenant = Some("acme".into());
        let old = rec(0, "b", "n1", 2, None);
        let records = vec![acme, old];
        let mut only = q(UsageGroup::Sandbox);
        only.tenant = Some("acme".into());
        let got = aggregate(&only, &records);
        assert_eq!((got.len(), got[0].sandbox.as_deref()), (1, Some("a")));
        only.tenant = Some(warren_api::keys::DEFAULT_TENANT.into());
        let got = aggregate(&only, &records);
        assert_eq!((got.len(), got[0].sandbox.as_deref()), (1, Some("b")));
        only.tenant = Some("other".into());
        assert!(aggregate(&only, &records).is_empty());
    }

    #[test]
    fn filters_by_sandbox_labels_and_range_and_parts_merge_to_the_whole() {
        let records = vec![
            rec(0, "a", "n1", 1, Some("x")),
            rec(60_000, "a", "n2", 2, Some("x")),
            rec(120_000, "b", "n1", 4, Some("y")),
        ];
        let mut only_a = q(UsageGroup::Sandbox);
        only_a.sandbox = Some("a".into());
        assert_eq!(aggregate(&only_a, &records).len(), 1);
        let mut team_y = q(UsageGroup::Sandbox);
        team_y.labels = vec![("team".into(), "y".into())];
        let got = aggregate(&team_y, &records);
        assert_eq!((got.len(), got[0].cpu_seconds), (1, 4.0));
        let mut range = q(UsageGroup::Sandbox);
        (range.from_ms, range.to_ms) = (60_000, 120_000);
        let got = aggregate(&range, &records);
        assert_eq!((got.len(), got[0].cpu_seconds), (1, 2.0));
        // Each node's part, merged, is what one pass over everything gives.
        let whole = aggregate(&q(UsageGroup::Sandbox), &records);
        let n1: Vec<_> = records.iter().filter(|(k, _)| k.node == "n1").collect();
        let n2: Vec<_> = records.iter().filter(|(k, _)| k.node == "n2").collect();
        let parts = [
            aggregate(&q(UsageGroup::Sandbox), n1),
            aggregate(&q(UsageGroup::Sandbox), n2),
        ];
        assert_eq!(merge(parts.into_iter().flatten()), whole);
    }
}
