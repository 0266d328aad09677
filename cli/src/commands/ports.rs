//! `expose`, `unexpose`, `ports`: preview URLs of ports inside a sandbox.

use super::client;
use crate::args::{Conn, ExposeArgs};
use crate::output;
use warren_api::ports::ExposeRequest;

pub async fn expose(conn: &Conn, a: ExposeArgs) -> anyhow::Result<i32> {
    let c = client(conn)?;
    let exposed = c
        .expose_port(
            &a.id,
            &ExposeRequest {
                port: a.port,
                name: a.name,
                token: a.token,
                public: a.public,
            },
        )
        .await?;
    if conn.json {
        output::json(&exposed);
    } else {
        println!("{}", exposed.url);
    }
    Ok(0)
}

pub async fn unexpose(conn: &Conn, id: &str, port: u16) -> anyhow::Result<i32> {
    client(conn)?.unexpose_port(id, port).await?;
    Ok(0)
}

pub async fn ports(conn: &Conn, id: &str) -> anyhow::Result<i32> {
    let list = client(conn)?.ports(id).await?;
    if conn.json {
        output::json(&list);
        return Ok(0);
    }
    output::table(
        &["PORT", "NAME", "URL"],
        list.ports
            .iter()
            .map(|p| {
                vec![
                    p.port.to_string(),
                    p.name.clone().unwrap_or_default(),
                    p.url.clone(),
                ]
            })
            .collect(),
    );
    Ok(0)
}
