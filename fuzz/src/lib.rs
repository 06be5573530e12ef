//! Fuzz targets for the engine (issue #10): each takes raw bytes, exercises one parser or
//! decision, checks the invariants that must hold for any input, and panics when one does not.
//! The driver in `main.rs` feeds them mutated inputs for a bounded time; `tests/regressions.rs`
//! replays the seeds and every saved finding on each `make test`.
//!
//! A target returns a short *signature* of what the input reached (which error, which branch);
//! the driver keeps inputs that reach a signature it has not seen, a cheap stand-in for coverage
//! feedback that works on the stable toolchain.

pub mod mutate;
pub mod targets;

pub use targets::{Target, TARGETS};
