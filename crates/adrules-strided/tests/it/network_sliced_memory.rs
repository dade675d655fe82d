//! A sliced network's gradient within its memory target, measured: the heap's peak above the
//! caller's data, counted by this binary's global allocator (`network_alloc_count`), in a
//! child process of its own on one rayon thread, with the buffer cache off (a freed buffer
//! goes back to the system at once).

use adrules_core::network::{MemoryTarget, Network, NetworkPlan, Order, SlicedPlan};
use adrules_core::{Backend, DType};
use adrules_strided::{Strided, Tensor, cache};
use adrules_testing::Rng;
use adrules_testing::networks::random_regular;

use crate::network_alloc_count::peak_bytes;

fn max_rel(x: &Tensor, y: &Tensor) -> f64 {
    let (x, y) = (x.to_vec::<f64>().unwrap(), y.to_vec::<f64>().unwrap());
    let scale = y.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let err = x
        .iter()
        .zip(&y)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    err / scale
}

rusty_fork::rusty_fork_test! {
    #![rusty_fork(timeout_ms = 300_000)]
    #[test]
    fn a_sliced_gradient_stays_within_its_bytes_target() {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build_global()
            .expect("the global rayon pool is configured once, here");
        cache::set_limit(0);
        let be = Strided;
        // a random 3-regular graph, bond 2: intermediates far larger than the operands
        let g = random_regular(48, 2, 11);
        let net = Network::ncon(&g.labels, None).unwrap();
        let dims = g.shapes();
        let plan = NetworkPlan::new(&net, &dims, &Order::Default).unwrap();
        let whole = SlicedPlan::new(&net, &dims, &Order::Default, MemoryTarget::Elements(usize::MAX))
            .unwrap();
        let f64_bytes = DType::F64.size_of() as f64;
        let largest_bytes = whole.unsliced_elements().largest * f64_bytes;
        // the target: a sixteenth of the unsliced tree's largest intermediate
        let limit = (largest_bytes / 16.0) as usize;
        let target = MemoryTarget::Bytes { bytes: limit, dtype: DType::F64 };
        let sliced = SlicedPlan::new(&net, &dims, &Order::Default, target).unwrap();
        assert!(sliced.num_slices() >= 16, "{} slices", sliced.num_slices());

        let mut rng = Rng::seed(5);
        let xs: Vec<Tensor> = dims
            .iter()
            .map(|d| be.from_host(rng.tensor(d, DType::F64)).unwrap())
            .collect();
        let refs: Vec<&Tensor> = xs.iter().collect();
        let c_bar = be.from_host(rng.tensor(&[], DType::F64)).unwrap();
        let active = vec![true; refs.len()];
        // what the call returns: the value and one cotangent per operand
        let operand_bytes: usize = dims.iter().map(|d| d.iter().product::<usize>()).sum::<usize>() * 8;
        let returned = operand_bytes + 8;

        // warm-up (faer's and rayon's thread-local state), then the measured runs
        let (v, g) = sliced.value_and_gradient(&be, &refs, &c_bar, &active).unwrap();
        drop(sliced.execute(&be, &refs).unwrap());
        let sliced_grad = peak_bytes(|| sliced.value_and_gradient(&be, &refs, &c_bar, &active).unwrap());
        let sliced_value = peak_bytes(|| sliced.execute(&be, &refs).unwrap());
        let unsliced = || {
            let (c, pb) = plan.rrule(&be, &refs, &active).unwrap();
            (c, pb.pullback(&c_bar).unwrap())
        };
        drop(unsliced()); // the first large GEMMs grow faer's and rayon's thread-local state
        let unsliced_grad = peak_bytes(unsliced);
        eprintln!(
            "target {limit} B, slices {}, largest intermediate unsliced {largest_bytes} B; peak \
             above the operands: sliced gradient {sliced_grad} B (estimate {:.0} B + returned \
             {returned} B), sliced value {sliced_value} B, unsliced gradient {unsliced_grad} B",
            sliced.num_slices(),
            sliced.slice_bytes(DType::F64).1
        );
        assert!(
            sliced_grad <= limit + returned,
            "the sliced gradient's peak {sliced_grad} B exceeds the target {limit} B + the \
             returned {returned} B"
        );
        assert!(sliced_value <= limit);
        // the estimates hold for the unsliced plan as well
        assert!(unsliced_grad as f64 <= whole.slice_bytes(DType::F64).1 + returned as f64);
        assert!(unsliced_grad > 16 * limit);

        // and the results are the unsliced ones
        let (c, pb) = plan.rrule(&be, &refs, &active).unwrap();
        assert!(max_rel(&v, &c) < 1e-12);
        let want = pb.pullback(&c_bar).unwrap();
        for (a, b) in g.iter().zip(&want) {
            assert!(max_rel(a.as_ref().unwrap(), b.as_ref().unwrap()) < 1e-12);
        }
    }
}
