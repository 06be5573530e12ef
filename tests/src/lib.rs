pub mod harness;
#[cfg(test)]
mod kratix_schema;
pub mod proxy;
pub mod sim;
pub mod simulation;
