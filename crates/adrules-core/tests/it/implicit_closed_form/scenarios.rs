//! Scenarios T7–T13 of the closed-form suite (Newton 2×2, ridge regression, softmax with a multiplier, simplex projection, Solow steady state): solver, conditions and closed-form Jacobian each.

use super::*;

pub(super) fn t7() -> Scenario {
    Scenario {
        name: "T7 (Newton on 2×2)",
        x: vec![t64(&[1], vec![4.0])],
        args: vec![],
        solve: |x, _| {
            let a = data::<f64>(&x[0])[0];
            let (mut y0, mut y1) = (1.0f64, 4.0f64);
            for _ in 0..30 {
                let (f0, f1) = (y0 * y1 - a, y0 + y1 - a - 1.0);
                let det = y1 - y0;
                let (d0, d1) = ((f0 - y0 * f1) / det, (y1 * f1 - f0) / det);
                y0 -= d0;
                y1 -= d1;
            }
            Ok((t64(&[2], vec![y0, y1]), 0.0))
        },
        form: Form::Root,
        c: |p| {
            let (a, y) = (p.x_data::<f64>(0)?[0], p.y_data::<f64>()?);
            Ok(vec![y[0] * y[1] - a, y[0] + y[1] - a - 1.0])
        },
        dense: |p| {
            let y = p.y_data::<f64>()?;
            Ok((
                row_major(2, 2, &[y[1], y[0], 1.0, 1.0]),
                row_major(2, 1, &[-1.0, -1.0]),
            ))
        },
        maps: |p| {
            let y = ys(p)?;
            let y2 = Arc::clone(&y);
            Ok(FnMaps::<f64>::new(
                2,
                1,
                move |v, o| {
                    o[0] = y[1] * v[0] + y[0] * v[1];
                    o[1] = v[0] + v[1];
                },
                move |u, o| {
                    o[0] = y2[1] * u[0] + u[1];
                    o[1] = y2[0] * u[0] + u[1];
                },
                |v, o| o.fill(-v[0]),
                |u, o| o[0] = -u[0] - u[1],
            ))
        },
        // [[4, 1], [1, 1]] at the root: symmetric positive definite there.
        structure: Structure::PositiveDefinite,
        z: 0.0,
        y: vec![1.0, 4.0],
        j: vec![0.0, 1.0],
    }
}

/// `(Xᵀ·X, Xᵀ·t)` of the ridge data (3 samples, 2 features).
pub(super) fn t8_normal(args: &[HostTensor]) -> ([f64; 4], [f64; 2]) {
    let (x, t) = (data::<f64>(&args[0]), data::<f64>(&args[1]));
    let mut g = [0.0; 4];
    let mut r = [0.0; 2];
    for s in 0..3 {
        for a in 0..2 {
            r[a] += x[s * 2 + a] * t[s];
            for b in 0..2 {
                g[a * 2 + b] += x[s * 2 + a] * x[s * 2 + b];
            }
        }
    }
    (g, r)
}

pub(super) fn t8() -> Scenario {
    Scenario {
        name: "T8 (ridge regression, argmin form, rank-0 λ, data as args)",
        x: vec![t64(&[], vec![0.5])],
        args: vec![t64(&[3, 2], T8_X.to_vec()), t64(&[3], T8_T.to_vec())],
        solve: |x, args| {
            let lambda = data::<f64>(&x[0])[0];
            let (g, r) = t8_normal(args);
            let (a, b, c, d) = (g[0] + 3.0 * lambda, g[1], g[2], g[3] + 3.0 * lambda);
            let det = a * d - b * c;
            let w = vec![(d * r[0] - b * r[1]) / det, (a * r[1] - c * r[0]) / det];
            Ok((t64(&[2], w), 0.0))
        },
        form: Form::Argmin,
        c: |p| {
            let (lambda, w) = (p.x_data::<f64>(0)?[0], p.y_data::<f64>()?);
            let (g, r) = t8_normal(p.args);
            Ok((0..2)
                .map(|a| (g[a * 2] * w[0] + g[a * 2 + 1] * w[1] - r[a]) / 3.0 + lambda * w[a])
                .collect())
        },
        dense: |p| {
            let (lambda, w) = (p.x_data::<f64>(0)?[0], p.y_data::<f64>()?);
            let (g, _) = t8_normal(p.args);
            let a = Mat::from_fn(2, 2, |i, j| {
                g[i * 2 + j] / 3.0 + if i == j { lambda } else { 0.0 }
            });
            Ok((a, row_major(2, 1, w)))
        },
        maps: |p| {
            let (lambda, w) = (p.x_data::<f64>(0)?[0], ys(p)?);
            let w2 = Arc::clone(&w);
            let x: Arc<[f64]> = p.args[0].as_slice::<f64>()?.into();
            Ok(FnMaps::<f64>::hermitian(
                2,
                1,
                move |v, o| {
                    // (1/n)·Xᵀ(X·v) + λ·v, without forming XᵀX
                    let xv: Vec<f64> = (0..3)
                        .map(|s| x[s * 2] * v[0] + x[s * 2 + 1] * v[1])
                        .collect();
                    map_into(o, |a| {
                        (0..3).map(|s| x[s * 2 + a] * xv[s]).sum::<f64>() / 3.0 + lambda * v[a]
                    });
                },
                move |v, o| map_into(o, |a| w[a] * v[0]),
                move |u, o| o[0] = w2[0] * u[0] + w2[1] * u[1],
            ))
        },
        structure: Structure::PositiveDefinite,
        z: 0.0,
        y: vec![-0.049346879536, 0.261248185776],
        j: vec![0.283543386537, -0.208189652448],
    }
}

pub(super) fn softmax(x: &[f64]) -> (Vec<f64>, f64) {
    let s: f64 = x.iter().map(|v| v.exp()).sum();
    (x.iter().map(|v| v.exp() / s).collect(), s.ln() - 1.0)
}

pub(super) fn t10() -> Scenario {
    let x = vec![1.0, 2.0, 0.5];
    let (s, mu) = softmax(&x);
    assert_close(
        &c(&s),
        &c(&[0.231223897622, 0.628531719212, 0.140244383166]),
        5e-12,
        0.0,
        "T10 note y",
    );
    // rows 0..3: diag(s) − s·sᵀ; row 3 (the multiplier μ = log Σeˣ − 1): sᵀ
    let mut j: Vec<f64> = (0..9)
        .map(|k| if k / 3 == k % 3 { s[k / 3] } else { 0.0 } - s[k / 3] * s[k % 3])
        .collect();
    assert_close(
        &c(&j[..3]),
        &c(&[0.177759406791, -0.145331553895, -0.032427852895]),
        5e-12,
        0.0,
        "T10 note J",
    );
    j.extend_from_slice(&s);
    let mut y = s;
    y.push(mu);
    Scenario {
        name: "T10 (softmax as argmax over the simplex, unknowns (y, μ))",
        x: vec![t64(&[3], x)],
        args: vec![],
        solve: |x, _| {
            let (mut y, mu) = softmax(&data::<f64>(&x[0]));
            y.push(mu);
            Ok((t64(&[4], y), 0.0))
        },
        form: Form::Root,
        c: |p| {
            let (x, y) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?);
            let mut c: Vec<f64> = (0..3).map(|i| x[i] - y[i].ln() - 1.0 - y[3]).collect();
            c.push(y[..3].iter().sum::<f64>() - 1.0);
            Ok(c)
        },
        dense: |p| {
            let y = p.y_data::<f64>()?;
            let a = Mat::from_fn(4, 4, |i, j| match (i, j) {
                (3, 3) => 0.0,
                (3, _) => 1.0,
                (_, 3) => -1.0,
                _ if i == j => -1.0 / y[i],
                _ => 0.0,
            });
            let b = Mat::from_fn(4, 3, |i, j| if i == j { 1.0 } else { 0.0 });
            Ok((a, b))
        },
        maps: |p| {
            let y = ys(p)?;
            let y2 = Arc::clone(&y);
            Ok(FnMaps::<f64>::new(
                4,
                3,
                move |v, o| {
                    map_into(&mut o[..3], |i| -v[i] / y[i] - v[3]);
                    o[3] = v[0] + v[1] + v[2];
                },
                move |u, o| {
                    map_into(&mut o[..3], |i| -u[i] / y2[i] + u[3]);
                    o[3] = -(u[0] + u[1] + u[2]);
                },
                |v, o| {
                    o[..3].copy_from_slice(v);
                    o[3] = 0.0;
                },
                |u, o| o.copy_from_slice(&u[..3]),
            ))
        },
        structure: Structure::General,
        z: 0.0,
        y,
        j,
    }
}

/// Euclidean projection onto the probability simplex, and its threshold τ.
pub(super) fn project_simplex(v: &[f64]) -> (Vec<f64>, f64) {
    let mut u = v.to_vec();
    u.sort_by(|a, b| b.total_cmp(a));
    let (mut sum, mut tau) = (0.0, 0.0);
    for (k, &uk) in u.iter().enumerate() {
        sum += uk;
        let t = (sum - 1.0) / (k + 1) as f64;
        if uk - t > 0.0 {
            tau = t;
        }
    }
    (v.iter().map(|x| (x - tau).max(0.0)).collect(), tau)
}

/// The support indicator of the projection of the step `y − η(y − x)`.
pub(super) fn t11_support(p: &P) -> Result<Vec<f64>> {
    let (x, y) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?);
    let w: Vec<f64> = (0..x.len())
        .map(|i| y[i] - T11_ETA * (y[i] - x[i]))
        .collect();
    let (_, tau) = project_simplex(&w);
    Ok(w.iter().map(|&w| if w > tau { 1.0 } else { 0.0 }).collect())
}

/// `P·v` with `P = diag(s) − s·sᵀ/|S|`, the Jacobian of the projection on its support.
pub(super) fn simplex_jacobian(s: &[f64], scale: f64, v: &[f64], o: &mut [f64]) {
    let size: f64 = s.iter().sum();
    let mean = s.iter().zip(v).map(|(s, v)| s * v).sum::<f64>() / size;
    map_into(o, |i| scale * s[i] * (v[i] - mean));
}

pub(super) fn t11() -> Scenario {
    let s = [0.0, 1.0, 0.0, 1.0];
    let j: Vec<f64> = (0..16)
        .map(|k| s[k / 4] * (if k / 4 == k % 4 { 1.0 } else { 0.0 } - s[k % 4] / 2.0))
        .collect();
    Scenario {
        name: "T11 (simplex projection, fixed-point form)",
        x: vec![t64(&[4], vec![0.5, 1.2, -0.3, 0.9])],
        args: vec![],
        solve: |x, _| {
            let (y, _) = project_simplex(&data::<f64>(&x[0]));
            Ok((t64(&[4], y), 0.0))
        },
        form: Form::FixedPoint,
        c: |p| {
            let (x, y) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?);
            let w: Vec<f64> = (0..4).map(|i| y[i] - T11_ETA * (y[i] - x[i])).collect();
            Ok(project_simplex(&w).0)
        },
        dense: |p| {
            let s = t11_support(p)?;
            let size: f64 = s.iter().sum();
            let pm = Mat::from_fn(4, 4, |i, j| {
                s[i] * (if i == j { 1.0 } else { 0.0 } - s[j] / size)
            });
            Ok((
                Mat::from_fn(4, 4, |i, j| (1.0 - T11_ETA) * pm[(i, j)]),
                Mat::from_fn(4, 4, |i, j| T11_ETA * pm[(i, j)]),
            ))
        },
        maps: |p| {
            let s: Arc<[f64]> = t11_support(p)?.into();
            let (s2, s3) = (Arc::clone(&s), Arc::clone(&s));
            Ok(FnMaps::<f64>::hermitian(
                4,
                4,
                move |v, o| simplex_jacobian(&s, 1.0 - T11_ETA, v, o),
                move |v, o| simplex_jacobian(&s2, T11_ETA, v, o),
                move |u, o| simplex_jacobian(&s3, T11_ETA, u, o),
            ))
        },
        structure: Structure::NegativeDefinite,
        z: 0.0,
        y: vec![0.0, 0.65, 0.0, 0.35],
        j,
    }
}

pub(super) fn t13() -> Scenario {
    Scenario {
        name: "T13 (Solow steady state, rank-0 s, parameters as args)",
        x: vec![t64(&[], vec![0.2])],
        args: vec![t64(&[4], vec![1.0, 0.01, 0.05, 0.3])],
        solve: |x, args| {
            let s = data::<f64>(&x[0])[0];
            let p = data::<f64>(&args[0]);
            let k = (s * p[0] / (p[1] + p[2])).powf(1.0 / (1.0 - p[3]));
            Ok((t64(&[1], vec![k]), 0.0))
        },
        form: Form::Root,
        c: |p| {
            let (s, k, a) = (
                p.x_data::<f64>(0)?[0],
                p.y_data::<f64>()?[0],
                p.args[0].as_slice::<f64>()?,
            );
            Ok(vec![s * a[0] * k.powf(a[3]) - (a[1] + a[2]) * k])
        },
        dense: |p| {
            let (s, k, a) = (
                p.x_data::<f64>(0)?[0],
                p.y_data::<f64>()?[0],
                p.args[0].as_slice::<f64>()?,
            );
            Ok((
                diag(&[s * a[0] * a[3] * k.powf(a[3] - 1.0) - (a[1] + a[2])]),
                diag(&[a[0] * k.powf(a[3])]),
            ))
        },
        maps: |p| {
            let (s, k, a) = (
                p.x_data::<f64>(0)?[0],
                p.y_data::<f64>()?[0],
                p.args[0].as_slice::<f64>()?,
            );
            let da = s * a[0] * a[3] * k.powf(a[3] - 1.0) - (a[1] + a[2]);
            let db = a[0] * k.powf(a[3]);
            Ok(FnMaps::<f64>::hermitian(
                1,
                1,
                move |v, o| o[0] = da * v[0],
                move |v, o| o[0] = db * v[0],
                move |u, o| o[0] = db * u[0],
            ))
        },
        structure: Structure::NegativeDefinite,
        z: 0.0,
        y: vec![5.5843115041821845],
        j: vec![39.88793931558703],
    }
}
