//! What the multi-rank tests and benchmarks of the mscclpp-rs crates share (collectives,
//! expert parallelism, the plan executor): [`runner`], the `main` of a program whose every rank
//! gets a GPU and a communicator (under `mpirun`, the built-in launcher, or as threads of one
//! process), and [`nccl`], NCCL loaded at run time as the baseline the benchmarks measure
//! against.

pub mod nccl;
pub mod runner;
