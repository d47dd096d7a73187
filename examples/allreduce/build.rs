//! Builds the kernel crate in `kernels/` to PTX (see the nvptx-builder README).

fn main() {
    let ptx = nvptx_builder::Builder::new("kernels").build().unwrap_or_else(|e| panic!("{e}"));
    println!("cargo:rustc-env=ALLREDUCE_KERNELS_PTX={}", ptx.path.display());
}
