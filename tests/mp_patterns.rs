//! Multi-rank pattern tests (filled in by the multi-rank work).

fn main() {}
