// build.rs
fn main() {
    // Builds kernels/ to PTX (a nested cargo for nvptx64; a failure shows its output).
    let ptx = nvptx_builder::Builder::new("kernels").build().unwrap_or_else(|e| panic!("{e}"));
    println!("cargo:rustc-env=KERNELS_PTX={}", ptx.path.display());
}
