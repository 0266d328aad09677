//! End-to-end tests: a real `warren serve` process, real Docker containers, the HTTP API.
//! Run with `make test` (it builds the guest agent and sets up Docker and the base image).

mod e2e {
    pub mod cluster_harness;
    pub mod faults;
    pub mod harness;

    mod admission;
    mod certs;
    mod checkpoints;
    mod cli;
    mod cli_terminal;
    mod cluster;
    mod compose;
    mod deploy;
    mod dir_copy;
    mod egress;
    mod egress_transparent;
    mod errors;
    mod exec;
    mod failover_at_scale;
    mod files;
    mod git;
    mod hardening;
    mod histories;
    mod history;
    mod hostile;
    mod idle_cost;
    mod interpreter;
    mod join_tokens;
    mod lifecycle;
    mod listener;
    mod logs;
    mod majority_loss;
    mod membership;
    mod migration;
    mod moved_nodes;
    mod network;
    mod oci_runtime;
    mod openapi;
    mod ownership;
    mod preview;
    mod preview_session;
    mod processes;
    mod prometheus;
    mod raft_under_load;
    mod runtime_fill;
    mod s3;
    mod schemathesis;
    mod sdk;
    mod secrets_rotation;
    mod sessions;
    mod setup;
    mod shutdown;
    mod snapshots;
    mod stale_copies;
    mod stalled_node;
    mod tenants;
    mod terminals;
    mod usage;
    mod wan;
    mod warm;
    mod watch;
    pub mod web;
}
