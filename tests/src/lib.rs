pub mod harness;
pub mod sim;
