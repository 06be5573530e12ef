pub mod harness;
pub mod proxy;
pub mod sim;
