//! Sliced networks ([`SlicedPlan`]): value, pullback, pushforward and HVP equal the unsliced
//! plan's (1e-12 relative, f64 and c64), on networks with hyperedges, diagonals, batch labels,
//! conjugated operands and an open output; the adjoint identity of the sliced rules; the
//! choice of labels against the target; parallel slices; the typed errors.

use adrules_core::network::{
    Label, MemoryTarget, Network, NetworkPlan, Optimizer, Order, SecondOrder, SlicedPlan,
};
use adrules_core::{Backend, Complex64, Conj, DType, Error};
use adrules_strided::{Strided, Tensor};
use adrules_testing::Rng;
use adrules_testing::networks::{lattice, random_regular};

fn host(t: &Tensor) -> Vec<Complex64> {
    Strided.to_host(t).unwrap().data().to_c64_vec()
}

/// `max |x − y| / max |y|`.
fn rel(x: &Tensor, y: &Tensor) -> f64 {
    let (x, y) = (host(x), host(y));
    assert_eq!(x.len(), y.len());
    let scale = y.iter().fold(0.0f64, |m, v| m.max(v.norm()));
    let err = x
        .iter()
        .zip(&y)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).norm()));
    err / scale.max(f64::MIN_POSITIVE)
}

fn close(x: &Tensor, y: &Tensor, what: &str) {
    let r = rel(x, y);
    assert!(r < 1e-12, "{what}: relative difference {r:e}");
}

struct Case {
    network: Network,
    dims: Vec<Vec<usize>>,
    /// a sixteenth of the unsliced tree's largest intermediate
    target: usize,
}

impl Case {
    fn new(network: Network, dims: Vec<Vec<usize>>) -> Case {
        let whole = SlicedPlan::new(
            &network,
            &dims,
            &Order::Default,
            MemoryTarget::Elements(usize::MAX),
        )
        .unwrap();
        let target = (whole.unsliced_elements().largest / 16.0) as usize;
        Case {
            network,
            dims,
            target,
        }
    }
}

/// A 3×3 lattice with bond 4 (closed); an open network with a hyperedge (`x` on three
/// operands), a diagonal (`cc`), a batch label (`b`) and conjugated operands; and a closed
/// network sliced down to single elements (target 1), whose sliced hyperedge `x` is also a
/// diagonal of operand 0.
fn cases() -> Vec<Case> {
    let g = lattice(3, 4);
    let lat = Network::ncon(&g.labels, None).unwrap();
    let open = Network::einsum("bxacc,bxde,xef,fag->bdg")
        .unwrap()
        .with_conj(&[Conj::Yes, Conj::No, Conj::Yes, Conj::No])
        .unwrap();
    let diagonal = Network::einsum("xxab,bxc,cax->")
        .unwrap()
        .with_conj(&[Conj::No, Conj::Yes, Conj::No])
        .unwrap();
    vec![
        Case {
            network: diagonal,
            dims: vec![vec![4, 4, 3, 5], vec![5, 4, 3], vec![3, 3, 4]],
            target: 1,
        },
        Case::new(lat, g.shapes()),
        Case::new(
            open,
            vec![
                vec![2, 6, 8, 3, 3],
                vec![2, 6, 3, 8],
                vec![6, 8, 8],
                vec![8, 8, 2],
            ],
        ),
    ]
}

fn operands(rng: &mut Rng, dims: &[Vec<usize>], dtype: DType) -> Vec<Tensor> {
    dims.iter()
        .map(|d| Strided.from_host(rng.tensor(d, dtype)).unwrap())
        .collect()
}

fn both(case: &Case, order: &Order) -> (NetworkPlan, SlicedPlan) {
    let plan = NetworkPlan::new(&case.network, &case.dims, order).unwrap();
    let sliced = SlicedPlan::new(
        &case.network,
        &case.dims,
        order,
        MemoryTarget::Elements(case.target),
    )
    .unwrap();
    (plan, sliced)
}

#[test]
fn sliced_value_and_first_order_rules_equal_the_unsliced_ones() {
    for (i, case) in cases().iter().enumerate() {
        for dtype in [DType::F64, DType::C64] {
            let (plan, sliced) = both(case, &Order::Optimize(Optimizer::Greedy));
            // the slicing is real: the unsliced tree is at least 16× over the target
            let unsliced = sliced.unsliced_elements().largest;
            assert!(
                unsliced >= 16.0 * case.target as f64,
                "case {i}: {unsliced}"
            );
            assert!(sliced.slice_elements().largest <= case.target as f64);
            if case.target == 1 {
                // everything an intermediate holds is sliced, the diagonal hyperedge too
                let labels = sliced.sliced_labels();
                assert!(labels.contains(&Label::Char('x')), "{labels:?}");
                assert_eq!(sliced.slice_elements().largest, 1.0);
            }
            assert!(sliced.num_slices() > 1);
            assert_eq!(
                sliced.num_slices(),
                sliced.sliced_dims().iter().product::<usize>()
            );
            let mut rng = Rng::seed(10 + i as u64);
            let xs = operands(&mut rng, &case.dims, dtype);
            let refs: Vec<&Tensor> = xs.iter().collect();
            let before: Vec<_> = xs.iter().map(host).collect();
            let what = |s: &str| format!("case {i} {dtype}: {s}");
            let c = plan.execute(&Strided, &refs).unwrap();
            close(
                &sliced.execute(&Strided, &refs).unwrap(),
                &c,
                &what("value"),
            );
            // gradient: a mixed activity, one pass and through rrule's pullback
            let active: Vec<bool> = (0..refs.len()).map(|k| k % 3 != 1).collect();
            let c_bar = Strided
                .from_host(rng.tensor(plan.output_dims(), dtype))
                .unwrap();
            let (_, pb) = plan.rrule(&Strided, &refs, &active).unwrap();
            let want = pb.pullback(&c_bar).unwrap();
            let (v, got) = sliced
                .value_and_gradient(&Strided, &refs, &c_bar, &active)
                .unwrap();
            close(&v, &c, &what("value of value_and_gradient"));
            let (v2, spb) = sliced.rrule(&Strided, &refs, &active).unwrap();
            close(&v2, &c, &what("value of rrule"));
            let again = spb.pullback(&c_bar).unwrap();
            for k in 0..refs.len() {
                assert_eq!(got[k].is_some(), active[k], "{}", what("activity"));
                if let (Some(g), Some(w), Some(a)) = (&got[k], &want[k], &again[k]) {
                    close(g, w, &what(&format!("cotangent {k}")));
                    close(a, w, &what(&format!("rrule cotangent {k}")));
                }
            }
            // pushforward, with one zero tangent
            let dx = operands(&mut rng, &case.dims, dtype);
            let tangents: Vec<Option<&Tensor>> = dx
                .iter()
                .enumerate()
                .map(|(k, t)| (k != 0).then_some(t))
                .collect();
            let (_, dc) = plan.frule(&Strided, &refs, &tangents).unwrap();
            let (v3, sdc) = sliced.frule(&Strided, &refs, &tangents).unwrap();
            close(&v3, &c, &what("value of frule"));
            close(&sdc, &dc, &what("tangent"));
            // adjoint identity of the sliced rules: Re⟨C̄, Ċ⟩ = Σ_k Re⟨T̄_k, Ṫ_k⟩
            let all = vec![true; refs.len()];
            let (_, g_all) = sliced
                .value_and_gradient(&Strided, &refs, &c_bar, &all)
                .unwrap();
            let lhs = Strided.inner(&c_bar, &sdc).unwrap().re();
            let rhs: f64 = g_all
                .iter()
                .zip(&tangents)
                .filter_map(|(g, t)| Some(Strided.inner(g.as_ref()?, t.as_ref()?).unwrap().re()))
                .sum();
            assert!(
                (lhs - rhs).abs() <= 1e-12 * lhs.abs().max(1.0),
                "{}: {lhs} vs {rhs}",
                what("adjoint identity")
            );
            // the caller's operands are untouched
            let after: Vec<_> = xs.iter().map(host).collect();
            assert_eq!(before, after, "{}", what("operands changed"));
        }
    }
}

#[test]
fn sliced_hvp_and_second_order_equal_the_unsliced_ones() {
    for (i, case) in cases().iter().enumerate() {
        let dtype = DType::C64;
        let (plan, sliced) = both(case, &Order::Default);
        assert!(sliced.num_slices() > 1);
        let mut rng = Rng::seed(20 + i as u64);
        let xs = operands(&mut rng, &case.dims, dtype);
        let refs: Vec<&Tensor> = xs.iter().collect();
        let dx = operands(&mut rng, &case.dims, dtype);
        let tangents: Vec<Option<&Tensor>> = dx
            .iter()
            .enumerate()
            .map(|(k, t)| (k % 2 == 0).then_some(t))
            .collect();
        let active: Vec<bool> = (0..refs.len()).map(|k| k != 1).collect();
        let c_bar = Strided
            .from_host(rng.tensor(plan.output_dims(), dtype))
            .unwrap();
        let c_bar_dot = Strided
            .from_host(rng.tensor(plan.output_dims(), dtype))
            .unwrap();
        let request = SecondOrder {
            c_bar: &c_bar,
            c_bar_dot: Some(&c_bar_dot),
            tangents: &tangents,
            active: &active,
            gradient: true,
        };
        let pool = adrules_core::HeapAllocator;
        let want = plan.second_order(&Strided, &pool, &refs, &request).unwrap();
        let got = sliced
            .second_order(&Strided, &pool, &refs, &request)
            .unwrap();
        close(&got.value, &want.value, &format!("case {i}: value"));
        for (k, &act) in active.iter().enumerate() {
            assert_eq!(got.hvp[k].is_some(), act);
            if let (Some(g), Some(w)) = (&got.hvp[k], &want.hvp[k]) {
                close(g, w, &format!("case {i}: HVP {k}"));
            }
            if let (Some(g), Some(w)) = (&got.gradient[k], &want.gradient[k]) {
                close(g, w, &format!("case {i}: gradient {k}"));
            }
        }
        let h = sliced
            .hvp(&Strided, &refs, &c_bar, &tangents, &active)
            .unwrap();
        let h0 = plan
            .hvp(&Strided, &refs, &c_bar, &tangents, &active)
            .unwrap();
        for (g, w) in h.hvp.iter().zip(&h0.hvp) {
            if let (Some(g), Some(w)) = (g, w) {
                close(g, w, &format!("case {i}: hvp"));
            }
        }
    }
}

#[test]
fn parallel_slices_equal_sequential_ones() {
    let case = &cases()[1];
    let (_, sliced) = both(case, &Order::Default);
    let mut rng = Rng::seed(30);
    let xs = operands(&mut rng, &case.dims, DType::F64);
    let refs: Vec<&Tensor> = xs.iter().collect();
    let c_bar = Strided.from_host(rng.tensor(&[], DType::F64)).unwrap();
    let active = vec![true; refs.len()];
    let target = MemoryTarget::Elements(case.target);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    pool.install(|| {
        assert_eq!(sliced.parallelism(&target, 1), 3.min(sliced.num_slices()));
        let seq = sliced.execute(&Strided, &refs).unwrap();
        let par = sliced.execute_par(&Strided, &refs, &target).unwrap();
        close(&par, &seq, "parallel value");
        let (v, g) = sliced
            .value_and_gradient(&Strided, &refs, &c_bar, &active)
            .unwrap();
        let (pv, pg) = sliced
            .value_and_gradient_par(&Strided, &refs, &c_bar, &active, &target)
            .unwrap();
        close(&pv, &v, "parallel value of the gradient");
        for (a, b) in pg.iter().zip(&g) {
            close(
                a.as_ref().unwrap(),
                b.as_ref().unwrap(),
                "parallel cotangent",
            );
        }
    });
    // a bytes target that holds one slice but not two runs them one at a time
    let (_, per) = sliced.slice_bytes(DType::F64);
    let one = MemoryTarget::Bytes {
        bytes: per as usize + 64,
        dtype: DType::F64,
    };
    assert_eq!(pool.install(|| sliced.parallelism(&one, 1)), 1);
}

/// A random 3-regular graph of 40 vertices with bond 2: intermediates far larger than the
/// operands, the case slicing is for.
fn random_graph() -> (Network, Vec<Vec<usize>>) {
    let g = random_regular(40, 2, 7);
    (Network::ncon(&g.labels, None).unwrap(), g.shapes())
}

#[test]
fn the_slicer_meets_bytes_targets_and_keeps_a_fitting_network_whole() {
    let (net, dims) = random_graph();
    let whole = SlicedPlan::new(
        &net,
        &dims,
        &Order::Default,
        MemoryTarget::Elements(usize::MAX),
    )
    .unwrap();
    assert_eq!(whole.num_slices(), 1);
    assert!(whole.sliced_labels().is_empty());
    let plan = NetworkPlan::new(&net, &dims, &Order::Default).unwrap();
    assert_eq!(whole.cost(), plan.cost());
    let (_, unsliced_bytes) = whole.slice_bytes(DType::F64);
    let limit = (unsliced_bytes / 16.0) as usize;
    let target = MemoryTarget::Bytes {
        bytes: limit,
        dtype: DType::F64,
    };
    let sliced = SlicedPlan::new(&net, &dims, &Order::Default, target).unwrap();
    let (fwd, grad) = sliced.slice_bytes(DType::F64);
    assert!(grad <= limit as f64 && fwd <= grad, "{fwd} {grad} {limit}");
    assert!(sliced.num_slices() > 1);
    // slicing repeats work: never cheaper than the whole
    assert!(sliced.cost() >= whole.unsliced_cost());
    // the same network and target plan the same labels
    let again = SlicedPlan::new(&net, &dims, &Order::Default, target).unwrap();
    assert_eq!(again.sliced_labels(), sliced.sliced_labels());
    // and the value is the whole network's
    let mut rng = Rng::seed(50);
    let xs = operands(&mut rng, &dims, DType::F64);
    let refs: Vec<&Tensor> = xs.iter().collect();
    close(
        &sliced.execute(&Strided, &refs).unwrap(),
        &plan.execute(&Strided, &refs).unwrap(),
        "random graph value",
    );
}

#[test]
fn unreachable_targets_and_bad_operands_are_typed_errors() {
    // the output alone is 4·4 elements; only the output labels are left to slice
    let net = Network::einsum("ab,bc,cd->ad").unwrap();
    let dims = [vec![4, 8], vec![8, 8], vec![8, 4]];
    let e = SlicedPlan::new(&net, &dims, &Order::Default, MemoryTarget::Elements(1)).unwrap_err();
    assert!(
        matches!(&e, Error::MemoryLimit { arg, limit: 1, unit, .. } if arg == "target" && unit == "elements"),
        "{e:?}"
    );
    // two operands: no intermediate at all, so a bytes target below the operands' fails
    let two = Network::einsum("ab,bc->ac").unwrap();
    let e = SlicedPlan::new(
        &two,
        &[vec![4, 4], vec![4, 4]],
        &Order::Default,
        MemoryTarget::Bytes {
            bytes: 8,
            dtype: DType::F64,
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::MemoryLimit { .. }), "{e:?}");
    // planning errors come first
    assert!(matches!(
        SlicedPlan::new(
            &net,
            &dims[..2],
            &Order::Default,
            MemoryTarget::Elements(64)
        ),
        Err(Error::CountMismatch { .. })
    ));
    let sliced = SlicedPlan::new(&net, &dims, &Order::Default, MemoryTarget::Elements(16)).unwrap();
    assert!(sliced.num_slices() > 1);
    let mut rng = Rng::seed(40);
    let xs = operands(&mut rng, &dims, DType::F64);
    let refs: Vec<&Tensor> = xs.iter().collect();
    assert!(matches!(
        sliced.execute(&Strided, &refs[..2]),
        Err(Error::CountMismatch { .. })
    ));
    let wrong = Strided.from_host(rng.tensor(&[4, 9], DType::F64)).unwrap();
    assert!(matches!(
        sliced.execute(&Strided, &[&wrong, refs[1], refs[2]]),
        Err(Error::ShapeMismatch { arg, .. }) if arg == "operand 0"
    ));
    let c_bar = Strided.from_host(rng.tensor(&[4, 4], DType::F64)).unwrap();
    assert!(matches!(
        sliced.value_and_gradient(&Strided, &refs, &c_bar, &[true]),
        Err(Error::CountMismatch { arg, .. }) if arg == "active"
    ));
    let bad_bar = Strided.from_host(rng.tensor(&[4, 5], DType::F64)).unwrap();
    assert!(matches!(
        sliced.value_and_gradient(&Strided, &refs, &bad_bar, &[true, true, true]),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        sliced.frule(&Strided, &refs, &[None]),
        Err(Error::CountMismatch { arg, .. }) if arg == "tangents"
    ));
}

/// `*_slices` summed over `slice_ranges(p)` equals the one-process rules for every split,
/// more parts than slices (empty ranges) included; `between` sees every slice of its range
/// in order and stops the run with its error; bad ranges and part counts are typed errors.
#[test]
fn partial_sums_over_any_split_of_the_slices_equal_the_whole() {
    let case = &cases()[1];
    let (_, sliced) = both(case, &Order::Default);
    let n = sliced.num_slices();
    assert!(n >= 2);
    let mut rng = Rng::seed(40);
    let xs = operands(&mut rng, &case.dims, DType::C64);
    let refs: Vec<&Tensor> = xs.iter().collect();
    let c_bar = Strided
        .from_host(rng.tensor(sliced.output_dims(), DType::C64))
        .unwrap();
    let active: Vec<bool> = (0..refs.len()).map(|k| k != 1).collect();
    let dx = operands(&mut rng, &case.dims, DType::C64);
    let tangents: Vec<Option<&Tensor>> = dx.iter().map(Some).collect();
    let value = sliced.execute(&Strided, &refs).unwrap();
    let (_, grads) = sliced
        .value_and_gradient(&Strided, &refs, &c_bar, &active)
        .unwrap();
    let (_, dc) = sliced.frule(&Strided, &refs, &tangents).unwrap();
    let add = |acc: &mut Tensor, x: &Tensor| {
        let id = adrules_core::Permutation::identity(Strided.rank(acc));
        let one = adrules_core::DynScalar::one(DType::C64);
        Strided.add(acc, x, &id, Conj::No, one, one).unwrap();
    };
    for parts in [1, 2, 3, n, n + 2] {
        let ranges = sliced.slice_ranges(parts).unwrap();
        assert_eq!(ranges.len(), parts);
        assert_eq!(ranges.iter().map(|r| r.len()).sum::<usize>(), n);
        let lens: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
        let (lo, hi) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
        assert!(hi - lo <= 1, "{lens:?}");
        let (mut c, mut g, mut t) = (None::<Tensor>, vec![None::<Tensor>; refs.len()], None);
        for range in ranges {
            let mut seen = Vec::new();
            let mut hook = |j: usize| {
                seen.push(j);
                Ok(())
            };
            let cj = sliced
                .execute_slices(
                    &Strided,
                    &adrules_core::HeapAllocator,
                    &refs,
                    range.clone(),
                    &mut hook,
                )
                .unwrap();
            assert_eq!(seen, range.clone().collect::<Vec<_>>());
            let (_, gj) = sliced
                .value_and_gradient_slices(
                    &Strided,
                    &refs,
                    &c_bar,
                    &active,
                    range.clone(),
                    &mut |_| Ok(()),
                )
                .unwrap();
            let (_, tj) = sliced
                .frule_slices(&Strided, &refs, &tangents, range, &mut |_| Ok(()))
                .unwrap();
            match &mut c {
                None => c = Some(cj),
                Some(c) => add(c, &cj),
            }
            match &mut t {
                None => t = Some(tj),
                Some(t) => add(t, &tj),
            }
            for (k, gk) in gj.into_iter().enumerate() {
                assert_eq!(gk.is_some(), active[k]);
                match (&mut g[k], gk) {
                    (None, x) => g[k] = x,
                    (Some(acc), Some(x)) => add(acc, &x),
                    (Some(_), None) => unreachable!(),
                }
            }
        }
        let c = sliced.finish_value(&Strided, &refs, c.unwrap()).unwrap();
        close(&c, &value, &format!("{parts} parts: value"));
        let t = sliced
            .finish_frule(&Strided, &refs, &tangents, c.clone(), t.unwrap())
            .unwrap()
            .1;
        close(&t, &dc, &format!("{parts} parts: tangent"));
        let (_, g) = sliced
            .finish_gradient(&Strided, &refs, &c_bar, c, g)
            .unwrap();
        for k in 0..refs.len() {
            if let (Some(a), Some(b)) = (&g[k], &grads[k]) {
                close(a, b, &format!("{parts} parts: cotangent {k}"));
            }
        }
    }
    // the hook stops the run before the slice it refuses
    let mut stop = |j: usize| {
        if j == 1 {
            Err(Error::Interrupted {
                arg: "between".into(),
                at: j,
                reason: "test".into(),
            })
        } else {
            Ok(())
        }
    };
    let err = sliced
        .value_and_gradient_slices(&Strided, &refs, &c_bar, &active, 0..n, &mut stop)
        .unwrap_err();
    assert!(matches!(err, Error::Interrupted { at: 1, .. }), "{err}");
    // bad ranges and part counts
    assert!(
        matches!(sliced.slice_ranges(0), Err(Error::InvalidArgument { arg, .. }) if arg == "parts")
    );
    for bad in [0..n + 1, n + 1..n + 2] {
        let err = sliced
            .frule_slices(&Strided, &refs, &tangents, bad.clone(), &mut |_| Ok(()))
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { arg, .. } if arg == "range"),
            "{bad:?}: {err}"
        );
    }
    // an empty range checks `c_bar` as a slice's pullback would
    let bad = Strided.from_host(rng.tensor(&[3], DType::C64)).unwrap();
    let err = sliced
        .value_and_gradient_slices(&Strided, &refs, &bad, &active, n..n, &mut |_| Ok(()))
        .unwrap_err();
    assert!(
        matches!(&err, Error::ShapeMismatch { arg, .. } if arg == "c_bar"),
        "{err}"
    );
    // which operands carry a sliced label
    let sliced_ops = sliced.sliced_operands();
    assert_eq!(sliced_ops.len(), refs.len());
    assert!(sliced_ops.iter().any(|&s| s));
}
