//! Warm containers: containers started (runc, link, guest) before anyone asks — of the
//! default image, and of the images named in `WarmPoolConfig::images` after it — so that a create, restore, wake or fork takes one and skips Docker's
//! start (about 0.3–0.45 s and 0.3–0.46 CPU-seconds each on the machines measured; see
//! docs/benchmarks.md).
//!
//! A warm container is named `wrn-<node>_warm_<token>` (a sandbox id has no underscore, so
//! it is never a sandbox's name). Taking one for a sandbox:
//! - renames it to the sandbox's container name (identity is the name: labels are fixed at
//!   create, so a taken container's `warren.sandbox` label still says `warm-<token>`);
//! - gives it the sandbox's CPU, memory and process limits (`docker update`);
//! - sets its host name (`/etc/hostname`, `/etc/hosts`, and the UTS namespace);
//! - writes a fork's files, or a snapshot's, through its mounted overlay.
//!
//! Until the rename is done, a failure removes the warm container and the sandbox starts
//! cold; after it, the container is the sandbox's and a failure is the create's.
//!
//! It fits a sandbox of the same image and, where the engine enforces disk sizes, the same
//! disk size. The sandbox's `env` reaches the guest from the manager (`PUT /config`), as it
//! does after every start of any container.
//!
//! How many are kept follows demand (`demand`), one pool per image: each as many as the most
//! requests for its image that came within a minute of the last horizon (ten minutes by
//! default); the default image's never below the floor, the others' from none; all of them
//! together within one ceiling and memory budget, shared max-min fairly
//! (`demand::targets`). The pools refill one
//! container at a time, once no container for a sandbox (taken or started) has been under
//! way for `QUIET`, and only while the host's CPU was at least `idle_reserve` idle just
//! before: refilling competes neither with the work that emptied it, nor with a burst of
//! creates, nor with busy sandboxes. Past the target (the burst aged out) it removes one at
//! a time, under the same quiet.

use super::{guest_secret_of, overlay_path, DockerRuntime, RuntimeError};
use crate::guest::connect::{self, GuestPeer};
use crate::runtime::{root_mount, ContainerSpec, WarmPoolConfig};
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub mod demand;
mod take;

use demand::{Demand, Step};
use take::HostName;
pub(super) use take::TakeFailed;

/// Marks a warm container's name.
pub(super) const WARM: &str = "_warm_";
/// How long after a container was taken the pool waits before starting another.
const QUIET: Duration = Duration::from_millis(500);
/// How long a new warm container's guest has to answer.
const GUEST_READY: Duration = Duration::from_secs(30);
/// How long the host's idle CPU is measured before a refill.
const IDLE_SAMPLE: Duration = Duration::from_millis(100);
/// How often a pool above its floor looks at its target again (arrivals age out).
const RECHECK: Duration = Duration::from_secs(1);

/// One started container nobody has taken yet.
pub(super) struct Warm {
    name: String,
    /// Its mounted root filesystem on this host, when this process sees it.
    merged: Option<PathBuf>,
    host: HostName,
}

impl Warm {
    /// Whether its container's main process (the guest) still runs.
    /// (Unknown, so taken as running, where this process cannot see the engine's pids.)
    fn alive(&self) -> bool {
        self.host.pid == 0 || std::path::Path::new(&format!("/proc/{}", self.host.pid)).exists()
    }
}

/// The warm containers of one image.
#[derive(Default)]
pub(super) struct ImagePool {
    ready: Vec<Warm>,
    /// Recent requests for a container of this image.
    demand: Demand,
    failures: u32,
    /// After a failure to start one of this image, no new try before this (the other
    /// images' pools go on).
    retry_at: Option<Instant>,
}

#[derive(Default)]
pub(super) struct WarmState {
    /// One per image of `WarmPoolConfig::images`, in its order (empty until started).
    pools: Vec<ImagePool>,
    /// A task is filling the pools.
    filling: bool,
    /// When the last container for a sandbox was ready (taken and written, or started).
    last_taken: Option<Instant>,
    /// Containers for sandboxes being made ready now (taken or started): the pool does not
    /// refill meanwhile.
    busy: usize,
    /// Cancelled when the node stops: no container is taken or started any more, and the
    /// fill task wakes from its waits.
    stop: CancellationToken,
    /// The fill task, awaited when the node stops (it removes the container it was starting).
    task: Option<tokio::task::JoinHandle<()>>,
}

impl WarmSetup {
    /// Each image's floor: the default image (the first) keeps the operator's, the others
    /// none.
    fn floors(&self) -> Vec<usize> {
        let mut floors = vec![0; self.cfg.images.len()];
        if let Some(f) = floors.first_mut() {
            *f = self.cfg.sizing.floor;
        }
        floors
    }
}

/// How long a stopping node waits for the fill task to finish the start it has under way.
const STOP_WITHIN: Duration = Duration::from_secs(60);

/// Sleeps for `d`, or until the node stops.
async fn pause(stop: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.cancelled() => {}
    }
}

impl WarmState {
    fn ready_total(&self) -> usize {
        self.pools.iter().map(|p| p.ready.len()).sum()
    }
}

/// The pool's settings once started.
pub(super) struct WarmSetup {
    cfg: WarmPoolConfig,
    ready: IntGauge,
    target: IntGauge,
    taken: IntCounterVec,
}

impl DockerRuntime {
    /// Removes warm containers a previous run of this node left, and starts keeping
    /// `cfg.sizing.floor` ready (more as demand asks). Registers the pool's metrics in `registry`.
    pub async fn start_warm_pool(
        self: &Arc<Self>,
        cfg: WarmPoolConfig,
        registry: &Registry,
    ) -> Result<(), RuntimeError> {
        let ready = IntGauge::with_opts(Opts::new(
            "warren_warm_containers",
            "Started containers waiting to be taken by a sandbox",
        ))
        .map_err(|e| RuntimeError::Other(e.to_string()))?;
        let target = IntGauge::with_opts(Opts::new(
            "warren_warm_target",
            "Warm containers the pool aims to keep ready now (follows recent demand)",
        ))
        .map_err(|e| RuntimeError::Other(e.to_string()))?;
        let taken = IntCounterVec::new(
            Opts::new(
                "warren_warm_takes_total",
                "Container starts by whether a warm container was taken (taken), none was ready or fit (cold), or taking one failed (failed)",
            ),
            &["outcome"],
        )
        .map_err(|e| RuntimeError::Other(e.to_string()))?;
        for m in [
            Box::new(ready.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(target.clone()),
            Box::new(taken.clone()),
        ] {
            registry
                .register(m)
                .map_err(|e| RuntimeError::Other(e.to_string()))?;
        }
        self.remove_warm_leftovers().await?;
        let floor = cfg.sizing.floor;
        target.set(floor as i64);
        self.warm.lock().expect("warm lock").pools =
            cfg.images.iter().map(|_| ImagePool::default()).collect();
        let setup = WarmSetup {
            cfg,
            ready,
            target,
            taken,
        };
        if self.warm_setup.set(setup).is_err() {
            return Err(RuntimeError::Other(
                "the warm pool was started twice".into(),
            ));
        }
        if floor > 0 {
            self.fill_warm_pool();
        }
        Ok(())
    }

    /// Starts no more warm containers, waits (at most `STOP_WITHIN`) for the fill task to
    /// finish the start it has under way and remove that container, and removes the ready
    /// ones: nothing of the pool outlives the node.
    pub async fn stop_warm_pool(&self) {
        let task = {
            let mut st = self.warm.lock().expect("warm lock");
            st.stop.cancel();
            st.task.take()
        };
        if let Some(task) = task {
            if tokio::time::timeout(STOP_WITHIN, task).await.is_err() {
                tracing::warn!("the warm pool's fill task did not stop in time");
            }
        }
        let ready: Vec<Warm> = {
            let mut st = self.warm.lock().expect("warm lock");
            st.pools
                .iter_mut()
                .flat_map(|p| std::mem::take(&mut p.ready))
                .collect()
        };
        for w in ready {
            if let Err(e) = self.remove_named(&w.name).await {
                tracing::warn!(container = %w.name, error = %e, "cannot remove a warm container");
            }
        }
        if let Some(s) = self.warm_setup.get() {
            s.ready.set(0);
        }
    }

    async fn remove_warm_leftovers(&self) -> Result<(), RuntimeError> {
        for c in self.list_summaries().await? {
            let Some(name) = c.names.and_then(|n| n.into_iter().next()) else {
                continue;
            };
            let name = name.trim_start_matches('/');
            if name.contains(WARM) {
                self.remove_named(name).await?;
            }
        }
        Ok(())
    }

    /// Keeps the pool at its target (unless a task already does): starts warm containers
    /// one at a time while it holds fewer, removes them one at a time while it holds more,
    /// and ends once it holds the target and the target cannot fall any more.
    fn fill_warm_pool(self: &Arc<Self>) {
        let mut st = self.warm.lock().expect("warm lock");
        if st.filling || st.stop.is_cancelled() {
            return;
        }
        st.filling = true;
        let stop = st.stop.clone();
        let me = self.clone();
        st.task = Some(tokio::spawn(async move {
            let Some(setup) = me.warm_setup.get() else {
                return;
            };
            let floors = setup.floors();
            loop {
                let (wait, next) = {
                    let mut st = me.warm.lock().expect("warm lock");
                    if st.stop.is_cancelled() {
                        st.filling = false;
                        return;
                    }
                    let now = Instant::now();
                    let peaks: Vec<usize> = st
                        .pools
                        .iter_mut()
                        .map(|p| p.demand.peak(now, setup.cfg.horizon))
                        .collect();
                    let targets = demand::targets(&setup.cfg.sizing, &floors, &peaks);
                    setup.target.set(targets.iter().sum::<usize>() as i64);
                    let ready: Vec<usize> = st.pools.iter().map(|p| p.ready.len()).collect();
                    let may_start: Vec<bool> = st
                        .pools
                        .iter()
                        .map(|p| p.retry_at.is_none_or(|t| t <= now))
                        .collect();
                    let quiet_at = match st.busy {
                        0 => st.last_taken.map(|t| t + QUIET),
                        _ => Some(now + QUIET),
                    };
                    match (
                        quiet_at.filter(|q| *q > now),
                        demand::next_move(&ready, &targets, &may_start),
                    ) {
                        (Some(q), _) => (Some(q - now), None),
                        (None, Some(m)) => (None, Some(m)),
                        (None, None) => {
                            // Short only where an image waits out a failure: until its retry.
                            let retry = st
                                .pools
                                .iter()
                                .zip(&targets)
                                .filter(|(p, t)| p.ready.len() < **t)
                                .filter_map(|(p, _)| p.retry_at)
                                .min();
                            match retry {
                                Some(r) => (Some(r.saturating_duration_since(now)), None),
                                // Every pool at its floor, which only an arrival raises:
                                // done until the next take calls again.
                                None if targets == floors => {
                                    st.filling = false;
                                    return;
                                }
                                // Holding above the floor: look again as arrivals age out.
                                None => (Some(RECHECK), None),
                            }
                        }
                    }
                };
                let Some((pool, step)) = next else {
                    pause(&stop, wait.unwrap_or(RECHECK)).await;
                    continue;
                };
                if step == Step::Shrink {
                    let extra = {
                        let mut st = me.warm.lock().expect("warm lock");
                        let ready = &mut st.pools[pool].ready;
                        let w = (!ready.is_empty()).then(|| ready.remove(0));
                        setup.ready.set(st.ready_total() as i64);
                        w
                    };
                    if let Some(w) = extra {
                        tracing::debug!(container = %w.name, "demand fell: removing a warm container");
                        if let Err(e) = me.remove_named(&w.name).await {
                            tracing::warn!(container = %w.name, error = %e, "cannot remove a warm container");
                        }
                    }
                    continue;
                }
                if setup.cfg.safety.check().is_err() {
                    // No container while the boundary is not whole (no firewall, say).
                    pause(&stop, Duration::from_secs(1)).await;
                    continue;
                }
                let short_of_memory = crate::runtime::host_load::memory_available_mb()
                    .is_some_and(|mb| mb < setup.cfg.memory_reserve_mb);
                if short_of_memory {
                    // The sandboxes that run need it more than the next one does.
                    pause(&stop, Duration::from_secs(1)).await;
                    continue;
                }
                if setup.cfg.idle_reserve > 0.0 {
                    let idle = crate::runtime::host_load::idle_over(IDLE_SAMPLE).await;
                    if !demand::may_refill(idle, setup.cfg.idle_reserve) {
                        // Sandboxes use the CPU: they come first.
                        pause(&stop, QUIET).await;
                        continue;
                    }
                }
                let t = Instant::now();
                let image = &setup.cfg.images[pool];
                match me.start_warm(&setup.cfg, image).await {
                    Ok(w) => {
                        tracing::debug!(container = %w.name, ms = t.elapsed().as_millis() as u64, "warm container ready");
                        let unwanted = {
                            let mut st = me.warm.lock().expect("warm lock");
                            if st.stop.is_cancelled() {
                                Some(w)
                            } else {
                                let p = &mut st.pools[pool];
                                p.failures = 0;
                                p.retry_at = None;
                                p.ready.push(w);
                                setup.ready.set(st.ready_total() as i64);
                                None
                            }
                        };
                        if let Some(w) = unwanted {
                            let _ = me.remove_named(&w.name).await;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(image = %image, error = %e, "cannot start a warm container");
                        let mut st = me.warm.lock().expect("warm lock");
                        let p = &mut st.pools[pool];
                        p.failures += 1;
                        // 2 s, 4 s, … up to a minute between tries.
                        let backoff = Duration::from_secs(1 << p.failures.min(6));
                        p.retry_at = Some(Instant::now() + backoff.min(Duration::from_secs(60)));
                    }
                }
            }
        }));
    }

    /// Creates and starts one warm container and waits for its guest.
    async fn start_warm(
        self: &Arc<Self>,
        cfg: &WarmPoolConfig,
        image: &str,
    ) -> Result<Warm, RuntimeError> {
        let token = hex::encode(rand::random::<[u8; 4]>());
        let name = format!("wrn-{}{WARM}{token}", self.node_id);
        let spec = ContainerSpec {
            sandbox_id: format!("warm-{token}"),
            image: image.to_string(),
            resources: cfg.resources,
            env: BTreeMap::new(),
            guest_binary: cfg.guest_binary.clone(),
            run_dir_mb: cfg.run_dir_mb,
            seed: None,
        };
        let started = async {
            self.create_container(&spec, &name).await?;
            let c = self.start_named(&name).await?;
            let host = HostName::of(&c, self.hosts_file(&c));
            self.limit_userns(&name, host.pid).await?;
            let merged = overlay_path(&c, "MergedDir")
                .filter(|p| matches!(root_mount::open_if_mounted(p), Ok(Some(_))));
            let peer = GuestPeer {
                sandbox_id: spec.sandbox_id.clone(),
                pid: host.pid,
                secret: guest_secret_of(c.config.as_ref()).ok_or_else(|| {
                    RuntimeError::Other("the warm container has no guest secret".into())
                })?,
            };
            wait_guest_answers(&peer).await?;
            Ok(Warm {
                name: name.clone(),
                merged,
                host,
            })
        }
        .await;
        if started.is_err() {
            let _ = self.remove_named(&name).await;
        }
        started
    }

    /// A ready warm container that fits `spec`, taken out of the pool (which then refills).
    pub(super) fn take_warm(self: &Arc<Self>, spec: &ContainerSpec) -> Option<Warm> {
        let setup = self.warm_setup.get()?;
        if setup.cfg.sizing.most() == 0 {
            return None;
        }
        let cfg = &setup.cfg;
        let pool = cfg
            .images
            .iter()
            .position(|i| *i == spec.image)
            .filter(|_| {
                !self.disk_limits.load(Ordering::Relaxed)
                    || spec.resources.disk_mb == cfg.resources.disk_mb
            });
        let mut dead = Vec::new();
        let taken = pool.and_then(|pool| {
            let mut st = self.warm.lock().expect("warm lock");
            if st.stop.is_cancelled() {
                return None;
            }
            let now = Instant::now();
            st.last_taken = Some(now);
            let p = &mut st.pools[pool];
            p.demand.record(now);
            // One whose guest is gone (killed, out of memory) goes, not to a sandbox.
            let (alive, gone): (Vec<Warm>, Vec<Warm>) = std::mem::take(&mut p.ready)
                .into_iter()
                .partition(Warm::alive);
            p.ready = alive;
            dead = gone;
            // A fork's files go through the mount: only where this process sees it.
            let i = p
                .ready
                .iter()
                .rposition(|w| spec.seed.is_none() || w.merged.is_some());
            let w = i.map(|i| p.ready.remove(i));
            setup.ready.set(st.ready_total() as i64);
            w
        });
        if !dead.is_empty() {
            let me = self.clone();
            tokio::spawn(async move {
                for w in dead {
                    tracing::warn!(container = %w.name, "a warm container stopped while it waited; removing it");
                    let _ = me.remove_named(&w.name).await;
                }
            });
        }
        if taken.is_none() {
            setup.taken.with_label_values(&["cold"]).inc();
        }
        self.fill_warm_pool();
        taken
    }

    pub(super) fn count_take(&self, outcome: &str) {
        if let Some(s) = self.warm_setup.get() {
            s.taken.with_label_values(&[outcome]).inc();
        }
    }
}

/// A container for a sandbox being made ready (see `WarmState::busy`), until dropped.
pub(super) struct Busy<'a>(&'a DockerRuntime);

impl<'a> Busy<'a> {
    pub(super) fn new(rt: &'a DockerRuntime) -> Self {
        rt.warm.lock().expect("warm lock").busy += 1;
        Busy(rt)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut st = self.0.warm.lock().expect("warm lock");
        st.busy = st.busy.saturating_sub(1);
        st.last_taken = Some(Instant::now());
    }
}

/// Waits until the warm container's guest answers and authenticates.
async fn wait_guest_answers(peer: &GuestPeer) -> Result<(), RuntimeError> {
    let deadline = Instant::now() + GUEST_READY;
    loop {
        match connect::connect(peer).await {
            Ok(_) => return Ok(()),
            Err(connect::ConnectError::Refused(why)) => {
                return Err(RuntimeError::Other(format!(
                    "the warm container's guest was refused: {why}"
                )))
            }
            Err(_) if Instant::now() > deadline => {
                return Err(RuntimeError::Other(format!(
                    "the warm container's guest did not answer within {GUEST_READY:?}"
                )))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}
