//! Builds the device programs in `ptx-tests/` to PTX (plain, with device-side argument checks, and
//! for sm_100a with the fp8 multimem forms) and, when `ptxas` is installed, assembles each one for
//! its architecture so that a PTX error fails the build (and fails it when the tools are missing
//! under `MSCCLPP_RS_REQUIRE_PTXAS=1`). It never downloads anything: `./x setup` installs the tools.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    // (file, target cpu, features)
    let variants: [(&str, &str, &[&str]); 3] = [
        ("ptx_tests.ptx", "sm_90", &[]),
        ("ptx_tests_checked.ptx", "sm_90", &["checks"]),
        ("ptx_tests_sm100a.ptx", "sm_100a", &["sm100a"]),
    ];
    for (file, cpu, features) in variants {
        let mut b = nvptx_builder::Builder::new("ptx-tests").target_cpu(cpu);
        for f in features {
            b = b.feature(*f);
        }
        let ptx = b.build().unwrap_or_else(|e| panic!("building ptx-tests ({file}): {e}"));
        let dst = out.join(file);
        std::fs::copy(&ptx.path, &dst).unwrap_or_else(|e| panic!("copying {}: {e}", ptx.path.display()));
        if nvptx_builder::find_tool("ptxas").is_some() && nvptx_builder::find_tool("cuobjdump").is_some() {
            if let Err(e) = nvptx_builder::assemble(&dst, cpu) {
                panic!("ptxas rejected {file}: {e}");
            }
        } else if std::env::var("MSCCLPP_RS_REQUIRE_PTXAS").is_ok_and(|v| v == "1") {
            panic!(
                "ptxas/cuobjdump not found and MSCCLPP_RS_REQUIRE_PTXAS=1: run `./x setup` (or set PTXAS/CUOBJDUMP)"
            );
        } else {
            println!(
                "cargo:warning=ptxas/cuobjdump not found: {file} was not assembled at build time (`./x setup` installs them)"
            );
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=MSCCLPP_RS_REQUIRE_PTXAS");
}
