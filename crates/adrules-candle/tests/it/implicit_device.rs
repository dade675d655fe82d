//! [`Implicit`]: implicit functions whose solver and conditions are candle closures on the
//! inputs' device. The gradients of the fixed point `y = tanh(W·y + b)` agree with candle's
//! autograd of the unrolled iteration, with the dense (host) and the matrix-free (device)
//! pullbacks alike; the matrix-free pullback copies no tensor to or from the host (the
//! core's transfer counters); bad input is a typed error.

use adrules_candle::candle_core::{DType, Device, Tensor, Var};
use adrules_candle::{Implicit, adrules_error};
use adrules_core::Error;
use adrules_core::backend::transfers::Transfers;
use adrules_core::implicit::{Method, SolverOptions};

fn step(x: &[Tensor], h: &Tensor) -> candle_core::Result<Tensor> {
    let wh = x[0].matmul(&h.unsqueeze(1)?)?.squeeze(1)?;
    (wh + &x[1])?.tanh()
}

fn layer(method: Method) -> Implicit {
    Implicit::new(
        |x| {
            let mut h = x[1].zeros_like()?;
            for _ in 0..200 {
                h = step(x, &h)?;
            }
            Ok(h)
        },
        |x, h| step(x, h)? - h,
    )
    .with_linear_solver(SolverOptions::from(method))
}

/// `(W, b, r)` of size n, deterministic, `W` a contraction.
fn inputs(n: usize, dev: &Device) -> (Var, Var, Tensor) {
    let w: Vec<f64> = (0..n * n)
        .map(|k| (((k * 7919) % 1000) as f64 / 1000.0 - 0.5) * (1.0 / n as f64))
        .collect();
    let b: Vec<f64> = (0..n)
        .map(|i| ((i * 31) % 17) as f64 / 17.0 - 0.5)
        .collect();
    let r: Vec<f64> = (0..n).map(|i| (i % 5) as f64 - 2.0).collect();
    (
        Var::from_tensor(&Tensor::from_vec(w, (n, n), dev).unwrap()).unwrap(),
        Var::from_tensor(&Tensor::from_vec(b, n, dev).unwrap()).unwrap(),
        Tensor::from_vec(r, n, dev).unwrap(),
    )
}

fn grads(loss: &Tensor, w: &Var, b: &Var) -> (Vec<f64>, Vec<f64>) {
    let g = loss.backward().unwrap();
    let flat = |v: &Var| {
        g.get(v.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    (flat(w), flat(b))
}

fn close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    let scale = b.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * scale,
            "{what}: entry {k}: {x} vs {y}"
        );
    }
}

#[test]
fn gradients_match_unrolled_autograd_dense_and_matrix_free() {
    let dev = Device::Cpu;
    for n in [8, 40] {
        let (w, b, r) = inputs(n, &dev);
        // candle's autograd through 200 unrolled steps: the reference.
        let mut h = b.as_tensor().zeros_like().unwrap();
        for _ in 0..200 {
            h = step(&[w.as_tensor().clone(), b.as_tensor().clone()], &h).unwrap();
        }
        let want = grads(&(h * &r).unwrap().sum_all().unwrap(), &w, &b);
        for method in [Method::Lu, Method::Gmres, Method::Auto] {
            let y = layer(method)
                .apply(&[w.as_tensor(), b.as_tensor()])
                .unwrap();
            let got = grads(&(y * &r).unwrap().sum_all().unwrap(), &w, &b);
            close(&got.0, &want.0, 1e-9, &format!("n = {n}, {method:?}, W̄"));
            close(&got.1, &want.1, 1e-9, &format!("n = {n}, {method:?}, b̄"));
        }
    }
}

rusty_fork::rusty_fork_test! {
    #![rusty_fork(timeout_ms = 300_000)]

    /// The transfer counters are process-wide: this test runs in a child process of its own.
    #[test]
    fn the_matrix_free_pullback_copies_no_tensor() {
        let dev = Device::Cpu;
        let n = 300;
        let (w, b, r) = inputs(n, &dev);
        let y = layer(Method::Gmres)
            .apply(&[w.as_tensor(), b.as_tensor()])
            .unwrap();
        let loss = (y * &r).unwrap().sum_all().unwrap();
        let before = Transfers::now();
        let g = loss.backward().unwrap();
        let moved = Transfers::now().since(&before);
        assert!(g.get(b.as_tensor()).is_some());
        assert_eq!((moved.to_host, moved.from_host), (0, 0), "{moved:?}");
        assert!(moved.scalars > 10, "{moved:?}");
        // The dense pullback copies (x, y, ȳ to the host, x̄ back): the counters see copies.
        let y = layer(Method::Lu)
            .apply(&[w.as_tensor(), b.as_tensor()])
            .unwrap();
        let loss = (y * &r).unwrap().sum_all().unwrap();
        let before = Transfers::now();
        loss.backward().unwrap();
        let moved = Transfers::now().since(&before);
        assert!(moved.to_host >= 3 && moved.from_host >= 1, "{moved:?}");
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let dev = Device::Cpu;
    let (w, b, r) = inputs(4, &dev);
    let f = layer(Method::Auto);
    let e = adrules_error(&f.apply(&[]).unwrap_err()).unwrap().clone();
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "x"),
        "{e}"
    );
    let b32 = b.as_tensor().to_dtype(DType::F32).unwrap();
    let e = adrules_error(&f.apply(&[w.as_tensor(), &b32]).unwrap_err())
        .unwrap()
        .clone();
    assert!(
        matches!(e, Error::DTypeMismatch { ref arg, .. } if arg == "x[1]"),
        "{e}"
    );
    // A solver returning another dtype.
    let bad = Implicit::new(|x| x[1].to_dtype(DType::F32), |x, h| step(x, h)? - h);
    let e = adrules_error(&bad.apply(&[w.as_tensor(), b.as_tensor()]).unwrap_err())
        .unwrap()
        .clone();
    assert!(
        matches!(e, Error::DTypeMismatch { ref arg, .. } if arg.starts_with('y')),
        "{e}"
    );
    // Conditions with the wrong number of values fail in backward, typed; inputs intact.
    let before: Vec<f64> = b.as_tensor().to_vec1().unwrap();
    let bad = Implicit::new(|x| x[1].zeros_like(), |_, h| h.narrow(0, 0, 2));
    let y = bad.apply(&[w.as_tensor(), b.as_tensor()]).unwrap();
    let err = (y * &r).unwrap().sum_all().unwrap().backward().unwrap_err();
    let e = adrules_error(&err).unwrap().clone();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    assert_eq!(b.as_tensor().to_vec1::<f64>().unwrap(), before);
}
