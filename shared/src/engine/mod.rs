//! The decision engine: pure functions from (objects, now) to decisions.
//!
//! Nothing here reads a clock or talks to an API server; callers pass `now` and the objects.

pub mod admission;
pub mod admitted;
pub mod budget;
pub mod compile;
pub mod concurrency;
pub mod counters;
pub mod cron;
pub mod forecast;
pub mod freeze;
pub mod gate;
pub mod health;
pub mod lifecycle;
pub mod localtime;
pub mod naming;
pub mod outcome;
pub mod problem;
pub mod record;
pub mod retry;
pub mod revert;
pub mod run;
pub mod schedule;
pub mod selector;
pub mod snapshot;
pub mod stage;
pub mod starts;
pub mod texts;
pub mod upgrade_budget;
pub mod validate;
pub mod version;
pub mod view;
pub mod window;
pub mod write;

pub use validate::{validate_plan, Problem};
