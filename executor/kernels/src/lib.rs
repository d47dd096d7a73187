//! The kernel of `mscclpp-executor`: `exec_plan` runs one rank's encoded execution plan
//! ([`mscclpp_executor_device::ExecPlan::run`]), block `b` its thread block `b`.
#![no_std]
#![feature(abi_ptx)]

use mscclpp_device::poll::SpinBudget;
use mscclpp_executor_device::ExecPlan;

/// Runs this rank's plan; the grid has one block per thread block of the plan.
///
/// # Safety
/// Launched by `mscclpp_executor::Executor` on every rank, with a plan it encoded and whose
/// channels, tables and arena it keeps alive.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn exec_plan(plan: ExecPlan, budget: SpinBudget) {
    // SAFETY: forwarded from the launch contract.
    unsafe { plan.run(budget) }
}
