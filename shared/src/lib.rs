//! `upgradeplan`: the UpgradePlan / UpgradeRun API types and the pure decision engine.
//!
//! Nothing in this crate performs I/O but the optional `prometheus` module (feature
//! `prometheus-client`: the signal gates' query client, used by both binaries). The controller and the kubectl plugin feed it objects they
//! read and the current time; it answers with decisions (what to patch, what status to write, when
//! to wake up next). Keeping every decision here gives both binaries identical answers. `send` is
//! the one loop that sends a step's writes, through a shell the controller (the API server) and
//! the simulation (its world) each provide: it orders and withholds, the shell does the I/O.
#![forbid(unsafe_code)]

pub mod api;
pub mod crd;
pub mod engine;
#[cfg(feature = "prometheus-client")]
pub mod prometheus;
pub mod rng;
pub mod send;
pub mod time;
