//! Builds the device programs in `ptx-tests/` to PTX (plain and with device-side argument checks)
//! and, when `ptxas` is installed, assembles them for sm_90 so that a PTX error fails the build.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let variants = [("ptx_tests.ptx", false), ("ptx_tests_checked.ptx", true)];
    for (file, checked) in variants {
        let mut b = nvptx_builder::Builder::new("ptx-tests");
        if checked {
            b = b.feature("checks");
        }
        let ptx = b.build().unwrap_or_else(|e| panic!("building ptx-tests ({file}): {e}"));
        let dst = out.join(file);
        std::fs::copy(&ptx.path, &dst).unwrap_or_else(|e| panic!("copying {}: {e}", ptx.path.display()));
        if nvptx_builder::find_tool("ptxas").is_some() && nvptx_builder::find_tool("cuobjdump").is_some() {
            if let Err(e) = nvptx_builder::assemble(&dst, "sm_90") {
                panic!("ptxas rejected {file}: {e}");
            }
        } else {
            println!("cargo:warning=ptxas/cuobjdump not found: {file} was not assembled at build time");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
