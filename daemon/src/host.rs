//! What a node's settings mean for its sandbox host: the node configuration, and the warm
//! pools' bounds. Pure translations, no IO beyond reading the host's memory size.

use crate::settings::Settings;
use anyhow::Context;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warren_node::runtime::docker::WarmSizing;
use warren_node::runtime::subnets::Cidr;
use warren_node::runtime::{WarmPoolConfig, WARM_IDLE_MB};
use warren_node::safety::Safety;
use warren_node::NodeConfig;

/// The sandbox host's configuration from the settings, its subnet pool, and the host's
/// memory (MiB, when known: the defaults of the reserve and the warm pools' budget are
/// shares of it).
pub fn node_config(
    s: &Settings,
    data_dir: &Path,
    guest: PathBuf,
) -> anyhow::Result<(NodeConfig, Cidr, Option<u64>)> {
    let pool = Cidr::parse(&s.subnet_pool)
        .context("subnet_pool must be an IPv4 CIDR such as 10.200.0.0/16")?;
    let mut cfg = NodeConfig::new(&s.name, data_dir, guest);
    cfg.region = s.region.clone();
    cfg.docker_host = s.docker_host.clone();
    if let Some(i) = &s.image {
        cfg.default_image = i.clone();
    }
    cfg.subnet_pool = (Ipv4Addr::from(pool.base), pool.prefix);
    cfg.firewall = s.firewall;
    cfg.firewall_tools = warren_node::runtime::firewall::Tools {
        iptables: s.iptables.clone(),
        ip6tables: s.ip6tables.clone(),
    };
    cfg.allow_host_root = s.allow_host_root;
    cfg.run_dir_mb = s.run_dir_mb;
    cfg.disk_check_every = std::time::Duration::from_millis(s.disk_check_ms);
    cfg.usage_export_every = std::time::Duration::from_millis(s.usage_export_ms);
    cfg.usage_retention = std::time::Duration::from_secs(s.usage_retention_days * 86_400);
    cfg.usage_sample_every = std::time::Duration::from_millis(s.usage_sample_ms);
    cfg.max_sandboxes = s.max_sandboxes;
    // What the defaults of the reserve and the warm pool's budget are shares of.
    let host_memory_mb = warren_node::runtime::host_load::memory_total_mb();
    cfg.capacity = warren_node::sandbox::admission::Capacity {
        max_cpus: (s.max_cpus > 0.0).then_some(s.max_cpus),
        max_memory_mb: (s.max_memory_mb > 0).then_some(s.max_memory_mb),
        memory_reserve_mb: s
            .memory_reserve_mb
            .unwrap_or_else(|| host_memory_mb.map_or(256, |total| (total / 20).clamp(256, 4096))),
    };
    if let Some(o) = &s.object_store {
        cfg.object_store = o.clone();
    }
    cfg.chunk_cache_bytes = s.chunk_cache_mb << 20;
    cfg.snapshot_gc_grace = std::time::Duration::from_secs(s.snapshot_gc_grace_s);
    cfg.preview.domain = s.preview_domain.trim_matches('.').to_ascii_lowercase();
    cfg.preview.scheme = s.preview_scheme.clone();
    cfg.checkpoint_every = std::time::Duration::from_secs(s.checkpoint_every_s);
    cfg.pack_in_node = !s.pack_in_guest;
    cfg.fill_while_starting = !s.restore_after_start;
    Ok((cfg, pool, host_memory_mb))
}

/// The warm pools' configuration: bounds from the settings, containers of the default
/// instance type, one pool for the default image and one for each of `warm_images`.
pub fn warm_pool_config(
    s: &Settings,
    cfg: &NodeConfig,
    host_memory_mb: Option<u64>,
    guest_binary: PathBuf,
    safety: Arc<Safety>,
) -> anyhow::Result<WarmPoolConfig> {
    Ok(WarmPoolConfig {
        sizing: WarmSizing {
            floor: s.warm_containers,
            ceiling: s.warm_max,
            memory_budget_mb: match s.warm_memory_mb {
                0 => host_memory_mb.map_or(512, |total| (total / 8).min(2048)),
                mb => mb,
            },
            idle_mb: WARM_IDLE_MB,
        },
        horizon: std::time::Duration::from_secs(s.warm_horizon_s),
        memory_reserve_mb: cfg.capacity.memory_reserve_mb,
        idle_reserve: s.warm_idle_reserve,
        images: warm_images(&cfg.default_image, &s.warm_images)?,
        resources: warren_api::sandbox::instance_type(warren_api::sandbox::DEFAULT_INSTANCE_TYPE)?,
        guest_binary,
        run_dir_mb: cfg.run_dir_mb,
        safety,
    })
}

/// The images of the warm pools: the default image first (it keeps the floor), then the
/// others named, each once.
pub fn warm_images(default: &str, more: &[String]) -> anyhow::Result<Vec<String>> {
    let mut images = vec![default.to_string()];
    for image in more {
        warren_api::sandbox::validate_image(image)
            .map_err(|e| anyhow::anyhow!("warm_images: {}", e.message))?;
        if !images.contains(image) {
            images.push(image.clone());
        }
    }
    Ok(images)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_images_put_the_default_first_once_and_refuse_bad_references() {
        let more = vec!["b:1".to_string(), "a:1".to_string(), "b:1".to_string()];
        assert_eq!(warm_images("a:1", &more).unwrap(), vec!["a:1", "b:1"]);
        assert!(warm_images("a:1", &["bad ref".to_string()]).is_err());
    }
}
