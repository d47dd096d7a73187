//! Communication algorithms as data.
//!
//! MSCCL++ lets users describe a collective as a program over channels, buffers and thread
//! blocks, compiled to an execution plan that one generic kernel interprets. This crate is the
//! host-side half of that idea for mscclpp-rs:
//!
//! - [`Program`] and the channel handles ([`MemoryChannel`], [`PortChannel`],
//!   [`SwitchChannel`], [`Rank`]) form a builder that mirrors the DSL's operations and
//!   parameters and rejects the DSL's errors at build time with a [`PlanError`] naming the
//!   operation;
//! - [`check()`] proves, before anything runs, that signals and waits match, that the plan cannot
//!   deadlock and that no chunk is accessed without the synchronization that orders it after
//!   the write it depends on (see the [`check`](mod@check) module for the model);
//! - plans serialize to and from JSON ([`Program::to_json`], [`Program::from_json`]) and
//!   [`mscclpp_json::read`] imports MSCCL++'s own execution-plan JSON for these operations;
//! - [`interpret::run`] runs a plan on the host, on 32-bit words with wrapping sums: the
//!   reference a run on GPUs is compared with;
//! - [`examples`] holds checked plans: packet one-shot allreduce, two-shot allreduce over
//!   memory channels (reduce-scatter through scratch, or by reading the peers' inputs with
//!   channel reductions), allreduce over switch channels, allgather over memory channels and
//!   over port channels.
//!
//! # Example
//!
//! ```
//! use mscclpp_plan::{Chunk, Program, SyncType, check};
//!
//! // Rank 0 sends its input to rank 1's output, then tells it so.
//! let mut p = Program::new("send", "sendrecv", 2, 1, 1, 0);
//! let to1 = p.memory_channel(1, 0)?;
//! let from0 = p.memory_channel(0, 1)?;
//! to1.put(&mut p, Chunk::output(1, 0, 1), Chunk::input(0, 0, 1), 0)?;
//! to1.signal(&mut p, 0, SyncType::Both, false)?;
//! from0.wait(&mut p, 0, SyncType::Both, false)?;
//! assert!(check(&p).is_ok());
//!
//! // Without the wait, rank 1 could finish before the data arrives.
//! let mut q = p.clone();
//! q.ranks[1].threadblocks.clear();
//! let errors = check(&q).unwrap_err();
//! assert!(errors[0].to_string().contains("1 signal(s) but 0 wait(s)"));
//! # Ok::<(), mscclpp_plan::PlanError>(())
//! ```
//!
//! Only the CPU side lives here: `mscclpp-executor` runs plans on GPUs. Nothing in this crate
//! touches a device.
#![forbid(unsafe_code)]

pub mod builder;
pub mod check;
pub mod examples;
pub mod interpret;
pub mod mscclpp_json;
pub mod plan;

pub use builder::{
    MAX_RANKS, MAX_THREADBLOCKS, MemoryChannel, PlanError, PortChannel, Rank, SwitchChannel, Tb, ThreadBlockGroup,
};
pub use check::{CHECK_MEMORY_BUDGET, CHECK_STEP_BUDGET, CheckError, CheckReport, check};
pub use plan::*;
