//! `secret set|list|rm`, `egress get|set`.

use super::client;
use crate::args::{Conn, EgressCommand, SecretCommand};
use crate::output;
use anyhow::Context;
use std::io::Read;

pub async fn secret(conn: &Conn, cmd: SecretCommand) -> anyhow::Result<i32> {
    let c = client(conn)?;
    match cmd {
        SecretCommand::Set { name, from_file } => {
            let mut value = match from_file {
                Some(f) => std::fs::read_to_string(&f)
                    .with_context(|| format!("cannot read {}", f.display()))?,
                None => {
                    let mut v = String::new();
                    std::io::stdin()
                        .read_to_string(&mut v)
                        .context("cannot read the value from stdin")?;
                    v
                }
            };
            // One trailing line break is the terminal's or the file's, not the value's.
            if value.ends_with('\n') {
                value.pop();
                if value.ends_with('\r') {
                    value.pop();
                }
            }
            c.put_secret(&name, &value).await?;
        }
        SecretCommand::List => {
            let list = c.secrets().await?;
            if conn.json {
                output::json(&list);
                return Ok(0);
            }
            output::table(
                &["NAME", "CREATED", "UPDATED", "KEY"],
                list.secrets
                    .iter()
                    .map(|s| {
                        vec![
                            s.name.clone(),
                            s.created_at.clone(),
                            s.updated_at.clone(),
                            s.key_id.clone(),
                        ]
                    })
                    .collect(),
            );
        }
        SecretCommand::Rm { names } => {
            for n in names {
                c.delete_secret(&n).await?;
            }
        }
    }
    Ok(0)
}

pub async fn egress(conn: &Conn, cmd: EgressCommand) -> anyhow::Result<i32> {
    let c = client(conn)?;
    let policy = match cmd {
        EgressCommand::Get { id } => c.egress(&id).await?,
        EgressCommand::Set { id, file } => {
            let text = if file == "-" {
                let mut t = String::new();
                std::io::stdin().read_to_string(&mut t)?;
                t
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("cannot read {file}"))?
            };
            let policy = serde_json::from_str(&text).context("the policy is not valid JSON")?;
            c.put_egress(&id, &policy).await?
        }
    };
    output::json(&policy);
    Ok(0)
}
