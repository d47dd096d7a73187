//! Builds the kernel crate in `kernels/` to PTX with nvptx-builder.

fn main() {
    let ptx = nvptx_builder::Builder::new("kernels").build().unwrap_or_else(|e| panic!("{e}"));
    println!("cargo:rustc-env=MSCCLPP_NCCL_PTX={}", ptx.path.display());
}
