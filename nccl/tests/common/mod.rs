//! What the NCCL interface's tests share.

use std::path::PathBuf;

/// `target/<profile>/libmscclpp_nccl.so`, the library's cdylib, found above the test executable.
pub fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let mut dir = exe.parent().unwrap().to_path_buf();
    while !dir.join("libmscclpp_nccl.so").exists() {
        assert!(
            dir.pop(),
            "libmscclpp_nccl.so not found above {}: build it first (cargo build -p mscclpp-nccl --lib; ./x test does)",
            exe.display()
        );
    }
    dir.join("libmscclpp_nccl.so")
}
