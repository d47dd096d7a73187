//! NCCL's C interface on mscclpp-rs: `libmscclpp_nccl.so`, a library that programs written for
//! NCCL (PyTorch, cudarc and candle, C and C++ engines) load in NCCL's place, unchanged.
//!
//! ```text
//!  program ──ncclAllReduce(..)──► api (arguments checked, errors as NCCL codes + ncclGetLastError)
//!                                   ├─ served (every rank on this machine): engine::Served
//!                                   │     mscclpp-collectives for sums of f32/f16/bf16/i32/u32,
//!                                   │     this crate's kernels for every other type, reduction
//!                                   │     and operation; send/recv through the group engine
//!                                   └─ forwarded (ranks on several machines): the real NCCL
//! ```
//!
//! * [`abi`]: the C types at NCCL 2.28's ABI; [`api`]: the exported functions;
//!   [`table::TABLE`]: what is served, forwarded or refused.
//! * [`comm`]: creation (the unique id carries rank 0's bootstrap address and a random session
//!   token, [`id`]), the served/forwarded decision, split, user-defined reductions.
//! * [`engine`]: the served operations, stream-ordered and graph-capturable; [`group`]: groups
//!   of sends and receives; [`forward`]: finding and calling the real NCCL.
//!
//! Two ranks may share one GPU (NCCL refuses that; this library serves it, which is also how it
//! is tested on a machine with one GPU).

pub mod abi;
pub mod api;
pub mod comm;
pub mod engine;
pub mod error;
pub mod forward;
pub mod group;
pub mod id;
pub mod table;
pub mod window;

pub use error::{Error, Result};
