//! The peak heap of the infinite-lattice example's gradients ([`adrules_examples::ctm`]): the
//! implicit gradient's is flat in the number of CTM iterations, the unrolled gradient's
//! grows with it. The counting allocator is process-wide, so the test runs in a child
//! process of its own (`rusty_fork_test!`) and no other test allocates while it measures.

use adrules::strided::Strided;
use adrules_examples::HEAP;
use adrules_examples::ctm::{Ctm, CtmOptions};

rusty_fork::rusty_fork_test! {
    #![rusty_fork(timeout_ms = 300_000)]

    #[test]
    fn implicit_memory_is_flat_and_unrolled_memory_grows() {
        let ctm = Ctm::new(
            Strided,
            CtmOptions {
                chi: 8,
                ..CtmOptions::default()
            },
        )
        .unwrap();
        let peak = |f: &dyn Fn() -> f64| {
            let base = HEAP.current_usage();
            HEAP.reset_peak_usage();
            let u = f();
            (u, HEAP.peak_usage().saturating_sub(base))
        };
        let mut rows = Vec::new();
        for n in [20usize, 40, 80, 160] {
            let (ui, mi) = peak(&|| ctm.implicit_energy(2.5, n).unwrap());
            let (uu, mu) = peak(&|| ctm.unrolled_energy(2.5, n).unwrap());
            rows.push((n, ui, mi, uu, mu));
        }
        let (first, last) = (rows[0], rows[3]);
        // 8× the iterations: the unrolled tape grows (≥ 6× measured 7.9×), the implicit peak
        // does not (the converged step and the Krylov basis only)
        assert!(last.4 > 6 * first.4, "unrolled {rows:?}");
        assert!(
            last.2 * 10 < last.4,
            "implicit not below a tenth of unrolled: {rows:?}"
        );
        assert!(
            (last.2 as f64) < 1.2 * first.2 as f64,
            "implicit grew: {rows:?}"
        );
        // both gradients agree once converged
        assert!((last.1 - last.3).abs() < 1e-10, "{rows:?}");
    }
}
