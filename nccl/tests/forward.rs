//! The search for the real NCCL: `MSCCLPP_RS_NCCL` naming this library is refused (forwarding
//! to ourselves would recurse), and a missing library is an `ncclInvalidUsage` naming what was
//! needed. (One test: the search runs once per process.)

use std::path::PathBuf;

mod common;

#[test]
fn the_real_nccl_is_never_this_library() {
    let ours: PathBuf = common::library();
    // SAFETY: set before any other thread of this test binary reads the environment.
    unsafe { std::env::set_var("MSCCLPP_RS_NCCL", &ours) };
    let e = mscclpp_nccl::forward::real().err().expect("our own library must not pass for the real NCCL");
    assert_eq!(e.code, mscclpp_nccl::abi::ncclResult_t::ncclInvalidUsage);
    assert!(e.message.contains("is mscclpp-rs itself"), "{}", e.message);
    assert!(e.message.contains("MSCCLPP_RS_NCCL"), "{}", e.message);
    assert!(!mscclpp_nccl::forward::loaded());
}
