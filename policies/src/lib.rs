//! tern's policies. Every function here is pure and synchronous: no IO, no clock reads (time is
//! an argument), no randomness without a seed. That keeps them testable against brute force and
//! replayable on traces.

pub mod capacity;
pub mod deadline;
pub mod fleet;
pub mod forecast;
pub mod migrate;
