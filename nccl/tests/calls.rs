//! Calls that need no GPU, through the exported C functions: refusals with a code and a message,
//! bad handles, groups, and the search for a real NCCL that never finds this library itself.

use std::ffi::c_int;
use std::ptr::{null, null_mut};

use mscclpp_nccl::abi::ncclResult_t::{self, *};
use mscclpp_nccl::api::*;
use mscclpp_nccl::table::{Disposition, TABLE};

fn last() -> String {
    // SAFETY: ncclGetLastError returns a NUL-terminated string.
    unsafe { text(ncclGetLastError(null_mut())) }
}

#[test]
fn refused_calls_say_why() {
    // SAFETY: every pointer is null or valid; the functions check their arguments.
    unsafe {
        assert_eq!(ncclGroupSimulateEnd(null_mut()), ncclInvalidUsage);
        assert!(last().contains("does not simulate"), "{}", last());
        assert_eq!(
            ncclLsaBarrierCreateRequirement(NcclTeam { nRanks: 1, rank: 0, stride: 1 }, 1, null_mut(), null_mut()),
            ncclInvalidUsage
        );
        assert!(last().contains("device API"), "{}", last());
        assert_eq!(ncclLLA2ACreateRequirement(1, 1, null_mut(), null_mut()), ncclInvalidUsage);
        assert_eq!(ncclLLA2ACalcSlots(1, 1), -1);
        // The refusals that take a communicator refuse a NULL one first.
        for r in [ncclCommRevoke(null_mut(), 0), ncclDevCommDestroy(null_mut(), null())] {
            assert_eq!(r, ncclInvalidArgument);
            assert!(last().contains("NULL"), "{}", last());
        }
    }
    let refused = TABLE.iter().filter(|(_, d)| *d == Disposition::Refused).count();
    assert!(refused >= 8, "the table lists {refused} refused functions");
}

#[test]
fn bad_handles_and_arguments_are_errors_not_crashes() {
    let mut v: c_int = 0;
    let garbage = &mut v as *mut c_int as *mut std::ffi::c_void;
    // SAFETY: as above; `garbage` is a valid pointer that is no communicator.
    unsafe {
        assert_eq!(ncclCommCount(garbage, &mut v), ncclInvalidArgument);
        assert!(last().contains("not a live communicator"), "{}", last());
        assert_eq!(ncclCommUserRank(null_mut(), &mut v), ncclInvalidArgument);
        assert_eq!(ncclAllReduce(null(), null_mut(), 1, 7, 0, garbage, null_mut()), ncclInvalidArgument);
        assert_eq!(ncclSend(null(), 1, 99, 0, null_mut(), null_mut()), ncclInvalidArgument);
        assert_eq!(ncclGetVersion(null_mut()), ncclInvalidArgument);
        assert_eq!(ncclGetUniqueId(null_mut()), ncclInvalidArgument);
        assert_eq!(ncclCommInitRank(null_mut(), 1, std::mem::zeroed(), 0), ncclInvalidArgument);
        let mut comm = garbage;
        assert_eq!(ncclCommInitRank(&mut comm, 0, std::mem::zeroed(), 0), ncclInvalidArgument);
        assert!(comm.is_null(), "a failed init leaves NULL behind");
        assert!(last().contains("nranks 0"), "{}", last());
        assert_eq!(ncclCommAbort(null_mut()), ncclSuccess, "NCCL accepts aborting NULL");
        assert_eq!(ncclCommDestroy(null_mut()), ncclInvalidArgument);
        assert_eq!(ncclMemFree(null_mut()), ncclSuccess);
        for r in 0..=8 {
            assert!(!text(ncclGetErrorString(r)).is_empty());
        }
        assert_eq!(text(ncclGetErrorString(-1)), "unknown result code");
    }
}

#[test]
fn an_error_inside_a_group_is_returned_by_its_end() {
    // SAFETY: as above.
    unsafe {
        assert_eq!(ncclGroupEnd(), ncclInvalidUsage, "an end without a start");
        assert_eq!(ncclGroupStart(), ncclSuccess);
        assert_eq!(ncclGroupStart(), ncclSuccess);
        assert_eq!(ncclRecv(null_mut(), 4, 7, 1, null_mut(), null_mut()), ncclInvalidArgument);
        assert_eq!(ncclGroupEnd(), ncclSuccess, "an inner end runs nothing");
        assert_eq!(ncclGroupEnd(), ncclInvalidArgument, "the outermost end returns the group's first error");
        assert_eq!(ncclGroupStart(), ncclSuccess);
        assert_eq!(ncclGroupEnd(), ncclSuccess, "the error was returned once");
        assert_eq!(ncclGroupEnd(), ncclInvalidUsage);
    }
}

#[test]
fn codes_match_the_enum() {
    let all: Vec<c_int> = ncclResult_t::ALL.iter().map(|r| *r as c_int).collect();
    assert_eq!(all, (0..8).collect::<Vec<_>>());
}
