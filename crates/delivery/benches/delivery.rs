//! Placeholder until the delivery benchmarks land.

fn main() {}
