//! Benchmarks and load tests of warren. Every number is printed next to a baseline measured
//! in the same run on the same machine (Docker's own CLI), as a ratio: machines here are
//! shared and noisy, so absolute numbers from different runs do not compare.
//! Every loop is bounded in count and time.

pub mod burst_bench;
pub mod checkpoint_bench;
pub mod churn_bench;
pub mod cluster_burst_bench;
pub mod cluster_node;
pub mod command;
pub mod commit_bench;
pub mod cpu;
pub mod egress_bench;
pub mod failover_bench;
pub mod host_work_bench;
pub mod html_report;
pub mod interpreter_bench;
pub mod metering_bench;
pub mod node;
pub mod placement_bench;
pub mod progress;
pub mod report;
pub mod scenarios;
pub mod snapshot_bench;
pub mod start_path_bench;
pub mod surface_bench;
pub mod userns_bench;
pub mod wan_exec_bench;
