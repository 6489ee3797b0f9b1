//! The simulated cloud as the controller meets it: the traces it replays, `tern sim serve`'s
//! HTTP server and the [`RemoteSim`] provider that talks to it. (The simulator itself, a
//! product feature, is the `tern-sim` crate.)

pub mod clock;
pub mod closed_loop;
pub mod hosts;
pub mod policy;
pub mod remote;
pub mod replay_report;
pub mod server;
pub mod soak;
mod traces;
pub mod wire;

pub use remote::RemoteSim;
pub use traces::{
    DemoPools, SetupError, SimTraces, default_traces, demo_pools, regions_of, sim_traces,
};
