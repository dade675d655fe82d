//! Sets `cfg(cube)` when one of burn's cubecl backends is compiled in through this crate's
//! features (they all share one backend type, `burn_cubecl::Cube`, as in burn-dispatch).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(cube)");
    let cube = ["WGPU", "VULKAN", "WEBGPU", "METAL", "CUDA", "ROCM"];
    if cube
        .iter()
        .any(|f| std::env::var_os(format!("CARGO_FEATURE_{f}")).is_some())
    {
        println!("cargo::rustc-cfg=cube");
    }
}
