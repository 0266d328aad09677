//! A WAN on one machine, for `warren local-cluster --wan`, the multi-region tests and the
//! benchmarks: chosen round trips (and loss) between regions, applied in user space.

mod matrix;
mod relay;

pub use matrix::DelayMatrix;
pub use relay::WanRelay;
