//! `warren usage`: what sandboxes used, as a table (or `--json`).

use super::client;
use crate::args::{Conn, UsageArgs};
use crate::output;

pub async fn usage(conn: &Conn, a: UsageArgs) -> anyhow::Result<i32> {
    let c = client(conn)?;
    let mut q: Vec<(&str, &str)> = vec![("group_by", &a.group_by)];
    if let Some(s) = &a.sandbox {
        q.push(("sandbox", s));
    }
    for l in &a.labels {
        q.push(("label", l));
    }
    if let Some(f) = &a.from {
        q.push(("from", f));
    }
    if let Some(t) = &a.to {
        q.push(("to", t));
    }
    let report = c.usage(&q).await?;
    if conn.json {
        output::json(&report);
        return Ok(0);
    }
    let group = a
        .group_by
        .split(':')
        .next()
        .unwrap_or("sandbox")
        .to_uppercase();
    output::table(
        &[&group, "CPU_S", "MEMORY_GIB_S", "RUNNING_S", "EGRESS_BYTES"],
        report
            .items
            .iter()
            .map(|i| {
                let key = i
                    .sandbox
                    .clone()
                    .or_else(|| i.label.clone().map(|l| l.unwrap_or_else(|| "-".into())))
                    .or_else(|| i.day.clone())
                    .unwrap_or_default();
                vec![
                    key,
                    format!("{:.3}", i.cpu_seconds),
                    format!("{:.1}", i.memory_gib_seconds),
                    format!("{:.1}", i.running_seconds),
                    i.egress_bytes.to_string(),
                ]
            })
            .collect(),
    );
    println!("from {} to {}", report.from, report.to);
    Ok(0)
}
