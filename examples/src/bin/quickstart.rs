//! Quickstart: contract a small tensor network on the embedded strided backend.
//!
//! `T[a,e,f] = Σ_{b,c,d} A[a,b,c]·B[b,d,e]·C[c,d,f]` (all dimensions 32), evaluated as two
//! pairwise contractions through the `Backend` trait, followed by the squared norm ⟨T, T⟩.
//! Set `RAYON_NUM_THREADS` to choose the number of threads.
//!
//! Run with `cargo run --release -p adrules-examples --bin quickstart`.

use std::time::Instant;

use adrules::strided::{Strided, Tensor};
use adrules::{Backend, Conj, ContractSpec, DType, Result};

/// A tensor of deterministic pseudo-random values in [-1, 1).
fn random(dims: &[usize], seed: u64) -> Result<Tensor> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let n = dims.iter().product();
    let data = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect();
    Tensor::from_vec(dims, data)
}

/// `a·b` contracted as the Einstein labels say (`"abc", "bde", "acde"`), into a new tensor.
fn contract(be: &Strided, a: &Tensor, b: &Tensor, labels: [&str; 3]) -> Result<Tensor> {
    let spec = ContractSpec::from_labels(labels[0], labels[1], labels[2])?;
    let mut c = be.zeros(&spec.output_dims(a.dims(), b.dims())?, DType::F64)?;
    be.contract(
        &mut c,
        a,
        b,
        &spec,
        Conj::No,
        Conj::No,
        1.0.into(),
        0.0.into(),
    )?;
    Ok(c)
}

/// The network, as two pairwise contractions.
fn network(be: &Strided, a: &Tensor, b: &Tensor, c: &Tensor) -> Result<Tensor> {
    let ab = contract(be, a, b, ["abc", "bde", "acde"])?; // sum over b
    contract(be, &ab, c, ["acde", "cdf", "aef"]) // sum over c and d
}

fn main() -> Result<()> {
    let be = Strided;
    let d = 32;
    let (a, b, c) = (
        random(&[d; 3], 1)?,
        random(&[d; 3], 2)?,
        random(&[d; 3], 3)?,
    );

    // The first evaluation also starts the thread pool and maps fresh memory; time the second.
    network(&be, &a, &b, &c)?;
    let start = Instant::now();
    let t = network(&be, &a, &b, &c)?;
    let seconds = start.elapsed().as_secs_f64();

    let norm2 = be.inner(&t, &t)?;
    let flops = 2.0 * 2.0 * (d as f64).powi(5);
    println!("T = Σ_bcd A[a,b,c]·B[b,d,e]·C[c,d,f], shape {:?}", t.dims());
    println!(
        "T[0,0,0] = {:.6}",
        t.view::<f64>()?.get(&[0, 0, 0]).unwrap_or(f64::NAN)
    );
    println!("⟨T, T⟩   = {norm2}");
    println!(
        "two pairwise contractions: {:.2} ms ({:.1} GFLOP/s, {} rayon threads)",
        seconds * 1e3,
        flops / seconds / 1e9,
        rayon::current_num_threads()
    );
    Ok(())
}
