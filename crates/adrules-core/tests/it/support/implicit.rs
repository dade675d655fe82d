//! Helpers shared by the implicit-differentiation integration tests (`implicit_*.rs`).
#![allow(dead_code)] // each test binary uses a subset

use std::cell::Cell;
use std::rc::Rc;

use adrules_core::implicit::ImplicitScalar;
use adrules_core::{Complex64, Error, HostElement, HostTensor, Result};
use faer::Mat;
use faer::linalg::solvers::{PartialPivLu, Solve};

/// A row-major `f64` tensor.
pub fn t64(dims: &[usize], v: Vec<f64>) -> HostTensor {
    HostTensor::from_vec(dims, v).expect("length matches dims")
}

/// A typed tensor.
pub fn tensor<T: HostElement>(dims: &[usize], v: Vec<T>) -> HostTensor {
    HostTensor::from_vec(dims, v).expect("length matches dims")
}

/// The elements of a tensor of dtype `T`.
pub fn data<T: HostElement>(t: &HostTensor) -> Vec<T> {
    t.as_slice::<T>().expect("dtype").to_vec()
}

/// Wraps a solver so that it refuses to run more than once: a test that passes with it
/// took its derivatives from the implicit rule, not from re-running (or differentiating)
/// the solver. Also returns the call counter.
#[allow(clippy::type_complexity)]
pub fn refusing<Z, A: ?Sized>(
    solve: impl Fn(&[HostTensor], &A) -> Result<(HostTensor, Z)>,
) -> (
    impl Fn(&[HostTensor], &A) -> Result<(HostTensor, Z)>,
    Rc<Cell<usize>>,
) {
    let calls = Rc::new(Cell::new(0));
    let counter = Rc::clone(&calls);
    let wrapped = move |x: &[HostTensor], args: &A| {
        counter.set(counter.get() + 1);
        if counter.get() > 1 {
            return Err(Error::invalid(
                "solver",
                "called twice: derivatives must come from the implicit rule",
            ));
        }
        solve(x, args)
    };
    (wrapped, calls)
}

/// Largest `|a − e| / (atol + rtol·|e|)` over the elements.
pub fn violation(actual: &[Complex64], expected: &[Complex64], atol: f64, rtol: f64) -> f64 {
    assert_eq!(actual.len(), expected.len(), "lengths differ");
    actual
        .iter()
        .zip(expected)
        .map(|(a, e)| (a - e).norm() / (atol + rtol * e.norm()))
        .fold(0.0, f64::max)
}

/// Asserts `|a − e| ≤ atol + rtol·|e|` elementwise.
#[track_caller]
pub fn assert_close(
    actual: &[Complex64],
    expected: &[Complex64],
    atol: f64,
    rtol: f64,
    what: &str,
) {
    let v = violation(actual, expected, atol, rtol);
    assert!(
        v <= 1.0,
        "{what}: violation {v:.3e} (atol {atol:e}, rtol {rtol:e})\n  actual   {actual:?}\n  expected {expected:?}"
    );
}

/// Real values as `Complex64`.
pub fn c(v: &[f64]) -> Vec<Complex64> {
    v.iter().map(|&x| Complex64::new(x, 0.0)).collect()
}

/// The elements of a tensor as `Complex64`.
pub fn cv(t: &HostTensor) -> Vec<Complex64> {
    t.data().to_c64_vec()
}

/// The elements of several tensors, concatenated, as `Complex64`.
pub fn cat(ts: &[HostTensor]) -> Vec<Complex64> {
    ts.iter().flat_map(cv).collect()
}

/// Unit tangent `e_j` of the flattened inputs, split into one tensor per input (dtype `T`).
pub fn unit_tangent<T: HostElement>(x: &[HostTensor], j: usize) -> Vec<HostTensor> {
    let mut offset = 0;
    x.iter()
        .map(|t| {
            let mut v = vec![T::zero(); t.len()];
            if (offset..offset + t.len()).contains(&j) {
                v[j - offset] = T::one();
            }
            offset += t.len();
            tensor(t.dims(), v)
        })
        .collect()
}

/// Unit tensor `e_i` of shape `dims` (dtype `T`).
pub fn unit<T: HostElement>(dims: &[usize], i: usize) -> HostTensor {
    let n: usize = dims.iter().product();
    let mut v = vec![T::zero(); n];
    v[i] = T::one();
    tensor(dims, v)
}

/// The batch layout of a case: `nb` systems of size `n` with `k` right-hand sides each.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub nb: usize,
    pub n: usize,
    pub k: usize,
}

impl Layout {
    pub fn of(a: &HostTensor, b: &HostTensor) -> Layout {
        let r = a.dims().len();
        let n = a.dims()[r - 1];
        let nb = a.dims()[..r - 2].iter().product();
        let k = if b.dims().len() == r - 1 {
            1
        } else {
            b.dims()[r - 1]
        };
        Layout { nb, n, k }
    }
    /// elements of one matrix `a`, one block `y` (n×k, row-major)
    pub fn sizes(self) -> (usize, usize) {
        (self.n * self.n, self.n * self.k)
    }
}

/// The solver of `solve.jsonl`'s `y = solve(a, b)`: one faer LU per batch element (in the case's precision).
pub fn solve_batched<T: ImplicitScalar>(x: &[HostTensor], _: &()) -> Result<(HostTensor, ())> {
    let l = Layout::of(&x[0], &x[1]);
    let (a, b) = (data::<T>(&x[0]), data::<T>(&x[1]));
    let (sa, sy) = l.sizes();
    let mut y = vec![T::zero(); b.len()];
    for bt in 0..l.nb {
        let am = Mat::from_fn(l.n, l.n, |i, q| a[bt * sa + i * l.n + q]);
        let mut rhs = Mat::from_fn(l.n, l.k, |i, c| b[bt * sy + i * l.k + c]);
        PartialPivLu::new(am.as_ref()).solve_in_place(rhs.as_mut());
        for i in 0..l.n {
            for c in 0..l.k {
                y[bt * sy + i * l.k + c] = rhs[(i, c)];
            }
        }
    }
    Ok((tensor(x[1].dims(), y), ()))
}
