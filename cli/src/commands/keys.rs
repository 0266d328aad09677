//! `warren key create|list|revoke`.

use super::client;
use crate::args::{Conn, KeyCommand};
use crate::output;
use warren_api::keys::KeyScope;

pub async fn key(conn: &Conn, cmd: KeyCommand) -> anyhow::Result<i32> {
    let c = client(conn)?;
    match cmd {
        KeyCommand::Create {
            tenant,
            admin,
            name,
        } => {
            let scope = if admin {
                KeyScope::Admin
            } else {
                KeyScope::Tenant
            };
            let k = c.create_key(&tenant, scope, name.as_deref()).await?;
            if conn.json {
                output::json(&k);
            } else {
                eprintln!(
                    "key {} ({} of tenant {}): shown only now",
                    k.id,
                    k.scope.as_str(),
                    k.tenant
                );
                println!("{}", k.key);
            }
        }
        KeyCommand::List => {
            let list = c.keys().await?;
            if conn.json {
                output::json(&list);
                return Ok(0);
            }
            output::table(
                &["ID", "TENANT", "SCOPE", "NAME", "CREATED", "LAST USED"],
                list.keys
                    .iter()
                    .map(|k| {
                        vec![
                            k.id.clone(),
                            k.tenant.clone(),
                            k.scope.as_str().to_string(),
                            k.name.clone().unwrap_or_default(),
                            k.created_at.clone(),
                            k.last_used_at.clone().unwrap_or_else(|| "-".into()),
                        ]
                    })
                    .collect(),
            );
        }
        KeyCommand::Revoke { ids } => {
            for id in ids {
                c.revoke_key(&id).await?;
            }
        }
    }
    Ok(0)
}
