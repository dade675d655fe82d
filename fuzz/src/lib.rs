//! A fuzz of adrules' public API, run by `cargo xtask fuzz` (and for a few seconds by
//! `cargo xtask test-all`): every input is derived from one `u64` seed, so a failing input
//! is reproduced by its target and seed alone.
//!
//! Targets ([`Target`]):
//! - **einsum**: random strings and shapes over torch's whole grammar
//!   ([`adrules_testing::fuzz::einsum_case`]) in the four dtypes, on the strided backend,
//!   against the brute-force evaluator [`adrules_testing::naive_einsum`]: the same calls
//!   accepted, the same values (per-dtype tolerance);
//! - **linalg**: `svd` (thin, full), `qr` (reduced, complete) and `eigh` with their pullbacks
//!   on matrices up to 4×4 (zero-size included, optionally batched) that are random, zero,
//!   rank one, degenerate (a multiple of the identity), scaled to subnormal or huge entries,
//!   or hold a NaN or an infinity: a non-finite input must be refused, a finite one must give
//!   finite factors that reconstruct it, and a pullback must return a finite cotangent or a
//!   typed error;
//! - **sizes**: [`adrules::strided::cache::parse_size`] on random text and on well-formed
//!   sizes, which must parse to their value;
//! - **gradient**: the pullback of random valid networks (f64, c64) against central finite
//!   differences of the value along a random direction, and the pushforward against the
//!   pullback (adjoint identity);
//! - **planner**: every optimizer (`Auto`, `Greedy`, `Exhaustive`, `TreeSa`) under budgets of
//!   0.2–2.2 ms: planning within the budget plus 250 ms of slack, a finite cost, the default
//!   order's value;
//! - **threads**: the one-call einsum (global plan cache, process-wide buffer cache, 1 MiB
//!   buffers in a quarter of the inputs) and a pooled execution sharing one `BufferPool`, from
//!   8 threads at once: the single-threaded values on every thread;
//! - **candle**, **burn**, **dfdx**: each adapter's `einsum` on the einsum target's calls
//!   (candle: f32 and f64 on its CPU device; burn: f32 and f64 on Flex with autodiff; dfdx:
//!   f64 with a `Vec` of operands of one rank), then the engine's own backward pass of
//!   `Σ C ⊙ C̄`: the same calls accepted as the core, the same values, the core pullback's
//!   gradients, the operands unchanged;
//! - **candle-linalg**, **burn-linalg**: the decompositions as engine nodes
//!   (`adrules::candle::linalg`, `adrules::burn::linalg`: `svd` thin and full, `qr` reduced
//!   and complete, `eigh`; f32 and f64) on the linalg target's special matrices: the same
//!   refusals as the core's rrules (the same kind of typed error), the core's factors, and
//!   from the engine's own backward pass of a gauge-invariant loss (`Σ W ⊙ S`, `Σ W ⊙ λ`,
//!   `Σ W_Q ⊙ Q + Σ W_R ⊙ R`) the core pullback's cotangent of `A` or the same kind of
//!   typed error (`try_backward`), `A` unchanged;
//! - **rules**: the engines' rule bridges (`apply_rule` of candle, burn and dfdx) with the
//!   sample rules of [`adrules_testing::samples`] (`Mul`, `Split`, `Fma`, `Failing`) on
//!   random shapes of rank 0 to 3 (zero-size axes, mismatched shapes): the same refusals as
//!   the core's driver [`adrules::rule::rrule`], its outputs and its pullback's cotangents
//!   bit for bit, `Failing` a typed error of `try_backward`, dfdx's `Split` an
//!   `Error::Unsupported`, the inputs unchanged;
//! - **implicit**: the engines' `Implicit` (candle, burn) with the conditions
//!   `c = A·y − x` written as engine closures and a dense solver, on random,
//!   ill-conditioned, singular and non-finite systems and cotangents: the closed form
//!   `x̄ = A⁻ᵀ·ȳ`, `Ā = −x̄·yᵀ` (up to a backward error), or a typed error (a non-finite
//!   input refused in the forward pass, a non-finite cotangent or a singular adjoint system
//!   in the backward pass), never a NaN gradient;
//! - **layers**: the engines' layers (`adrules::candle::nn`, `adrules::burn::nn`: the einsum
//!   layer on the einsum target's calls, the deep-equilibrium layer on random
//!   configurations) on valid and invalid configurations and inputs: the core's refusals
//!   (`adrules::layers`), the core's einsum value, a fixed point, finite gradients;
//! - **dense**: the dense linear-algebra rules (`adrules::linalg::{CholeskyRule, …,
//!   MatrixNormRule}`) on the linalg target's special matrices, small and batched, four
//!   dtypes, through the core's drivers: a typed error or finite outputs and cotangents,
//!   non-finite inputs refused, the inputs unchanged.
//!
//! Inputs are dealt to the targets by a fixed [`SCHEDULE`] (the cheap targets get more of
//! them; every target at least 2 of its 64 slots). A failing input is reduced by [`shrink`]: the smallest input of the same target and
//! kind of finding among related seeds, saved as the reproducer.
//!
//! For every input the fuzz records a panic (caught), a wrong value, a mutated input (every
//! operand is compared with a copy after the call), or a hang (an input that took longer
//! than [`HANG_SECONDS`]; the input is not interrupted).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rayon::prelude::*;

mod adapters;
mod bridges;
mod dense;
mod engines;
mod implicit;
mod layers;
mod rules;
mod targets;

/// An input that took longer than this many seconds is reported as a hang.
pub const HANG_SECONDS: f64 = 10.0;

/// What is fuzzed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// the planned einsum against the brute-force evaluator
    Einsum,
    /// decompositions and their pullbacks on special matrices
    Linalg,
    /// the cache-size parser
    Sizes,
    /// network gradients against finite differences
    Gradient,
    /// the optimizers under budgets
    Planner,
    /// the shared caches from 8 threads
    Threads,
    /// the candle adapter's einsum and candle's backward
    Candle,
    /// the burn adapter's einsum and burn's backward
    Burn,
    /// the dfdx adapter's einsum and dfdx's backward
    Dfdx,
    /// the decompositions as candle nodes against the core's rrules
    CandleLinalg,
    /// the decompositions as burn nodes against the core's rrules
    BurnLinalg,
    /// the engines' rule bridges (`apply_rule`) against the core's driver
    Rules,
    /// the engines' implicit functions on a dense linear system
    Implicit,
    /// the engines' layers (einsum, deep equilibrium)
    Layers,
    /// the dense linear-algebra rules (Cholesky, solves, inverse, determinants, LU,
    /// pseudo-inverse, least squares, matrix exponential, norms) through the core's drivers
    Dense,
}

/// Which target input `i` goes to: `SCHEDULE[i % SCHEDULE.len()]` indexes [`Target::ALL`].
/// Out of 64 inputs: 14 einsum, 10 linalg, 8 sizes, 6 gradient, 2 planner, 2 threads,
/// 3 candle, 3 burn, 2 dfdx, 2 candle-linalg, 2 burn-linalg, 2 rules, 2 implicit, 2 layers,
/// 4 dense.
pub const SCHEDULE: [u8; 64] = {
    let mut s = [0u8; 64];
    let counts = [14, 10, 8, 6, 2, 2, 3, 3, 2, 2, 2, 2, 2, 2, 4];
    let mut i = 0;
    let mut t = 0;
    while t < counts.len() {
        let mut k = 0;
        while k < counts[t] {
            s[i] = t as u8;
            i += 1;
            k += 1;
        }
        t += 1;
    }
    assert!(i == 64, "the counts of SCHEDULE must sum to 64");
    // spread the heavy targets over the cycle instead of running them back to back
    let mut out = [0u8; 64];
    let mut j = 0;
    while j < 64 {
        out[j] = s[(j * 37) % 64];
        j += 1;
    }
    out
};

impl Target {
    /// Every target, in the order inputs are dealt to them.
    pub const ALL: [Target; 15] = [
        Target::Einsum,
        Target::Linalg,
        Target::Sizes,
        Target::Gradient,
        Target::Planner,
        Target::Threads,
        Target::Candle,
        Target::Burn,
        Target::Dfdx,
        Target::CandleLinalg,
        Target::BurnLinalg,
        Target::Rules,
        Target::Implicit,
        Target::Layers,
        Target::Dense,
    ];

    /// The target's name, as in reproducer files.
    pub fn name(self) -> &'static str {
        match self {
            Target::Einsum => "einsum",
            Target::Linalg => "linalg",
            Target::Sizes => "sizes",
            Target::Gradient => "gradient",
            Target::Planner => "planner",
            Target::Threads => "threads",
            Target::Candle => "candle",
            Target::Burn => "burn",
            Target::Dfdx => "dfdx",
            Target::CandleLinalg => "candle-linalg",
            Target::BurnLinalg => "burn-linalg",
            Target::Rules => "rules",
            Target::Implicit => "implicit",
            Target::Layers => "layers",
            Target::Dense => "dense",
        }
    }

    /// The target named `name`.
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Runs the input of `seed`: `Ok` or what went wrong (a panic propagates).
    pub fn check(self, seed: u64) -> Result<(), Finding> {
        match self {
            Target::Einsum => targets::einsum(seed),
            Target::Linalg => targets::linalg(seed),
            Target::Sizes => targets::sizes(seed),
            Target::Gradient => rules::gradient(seed),
            Target::Planner => rules::planner(seed),
            Target::Threads => rules::threads(seed),
            Target::Candle => adapters::candle(seed),
            Target::Burn => adapters::burn(seed),
            Target::Dfdx => adapters::dfdx(seed),
            Target::CandleLinalg => engines::candle(seed),
            Target::BurnLinalg => engines::burn(seed),
            Target::Rules => bridges::rules(seed),
            Target::Implicit => implicit::implicit(seed),
            Target::Layers => layers::layers(seed),
            Target::Dense => dense::dense(seed),
        }
    }

    /// A size of the input of `seed` (elements, characters), by which [`shrink`] orders
    /// failing inputs.
    pub fn size(self, seed: u64) -> usize {
        match self {
            Target::Linalg => targets::linalg_size(seed),
            Target::Sizes => targets::sizes_size(seed),
            Target::CandleLinalg | Target::BurnLinalg => engines::size(seed),
            Target::Rules => bridges::size(seed),
            Target::Implicit => implicit::size(seed),
            Target::Layers => layers::size(seed),
            Target::Dense => dense::size(seed),
            _ => {
                let seed = match self {
                    Target::Dfdx => adapters::dfdx_seed(seed).unwrap_or(seed),
                    _ => seed,
                };
                let (s, shapes) = adrules_testing::fuzz::einsum_case(seed);
                s.len()
                    + shapes
                        .iter()
                        .map(|d| d.iter().product::<usize>())
                        .sum::<usize>()
            }
        }
    }
}

/// What an input did wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// a value disagreeing with the reference, a wrong acceptance or refusal, a non-finite
    /// result from finite inputs
    Wrong(String),
    /// an operand changed by the call
    Mutated(String),
    /// a panic, with its message
    Panic(String),
    /// the input took longer than [`HANG_SECONDS`]
    Hang(String),
}

/// One failing input: enough to reproduce it.
#[derive(Clone, Debug)]
pub struct Failure {
    /// the target
    pub target: Target,
    /// the seed its input derives from
    pub seed: u64,
    /// what went wrong
    pub finding: Finding,
}

/// How long to fuzz.
#[derive(Clone, Copy, Debug)]
pub enum Budget {
    /// this many inputs, dealt round-robin to the targets
    Inputs(u64),
    /// until this much time has passed
    Time(Duration),
}

/// Counts of a fuzz run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// inputs run, per target (in the order of [`Target::ALL`])
    pub inputs: [u64; Target::ALL.len()],
    /// inputs that panicked
    pub panics: u64,
    /// inputs slower than [`HANG_SECONDS`]
    pub hangs: u64,
    /// inputs with a wrong value
    pub wrong: u64,
    /// inputs that changed an operand
    pub mutated: u64,
    /// the failing inputs (at most [`MAX_KEPT`])
    pub failures: Vec<Failure>,
    /// the wall time of the run
    pub elapsed: Duration,
}

/// At most this many failures are kept with their reproducer.
pub const MAX_KEPT: usize = 100;

impl Report {
    /// Every input run.
    pub fn total(&self) -> u64 {
        self.inputs.iter().sum()
    }

    /// No panic, hang, wrong value or mutated input.
    pub fn clean(&self) -> bool {
        self.panics + self.hangs + self.wrong + self.mutated == 0
    }
}

thread_local! {
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs `target` on `seed`, catching a panic and timing it.
pub fn run_one(target: Target, seed: u64) -> Result<(), Finding> {
    let start = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(|| target.check(seed)));
    let secs = start.elapsed().as_secs_f64();
    match r {
        Ok(Ok(())) if secs > HANG_SECONDS => Err(Finding::Hang(format!("took {secs:.1} s"))),
        Ok(r) => r,
        Err(payload) => {
            let msg = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(Finding::Panic(msg))
        }
    }
}

/// Fuzzes every target from `seed` within `budget`, in parallel on the rayon pool. Input `i`
/// goes to target [`SCHEDULE`]`[i mod 64]` with the seed `seed + i`.
pub fn run(seed: u64, budget: Budget) -> Report {
    // panics are expected findings: record their message and location instead of printing
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{at}")));
    }));
    let start = Instant::now();
    let next = AtomicU64::new(0);
    let report = Mutex::new(Report::default());
    let chunk = 256u64;
    let workers = rayon::current_num_threads().max(1);
    // the drivers get a pool of their own: the threads target blocks a driver on threads
    // whose kernels use the global pool, which must not be the one the drivers occupy
    let drivers = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .expect("a thread pool for the fuzz drivers");
    drivers.install(|| {
        (0..workers).into_par_iter().for_each(|_| {
            loop {
                let from = next.fetch_add(chunk, Ordering::Relaxed);
                let to = match budget {
                    Budget::Inputs(n) if from >= n => break,
                    Budget::Inputs(n) => (from + chunk).min(n),
                    Budget::Time(d) if start.elapsed() >= d => break,
                    Budget::Time(_) => from + chunk,
                };
                let mut local = Report::default();
                for i in from..to {
                    let t = SCHEDULE[(i % 64) as usize] as usize;
                    let target = Target::ALL[t];
                    let s = seed.wrapping_add(i);
                    local.inputs[t] += 1;
                    if let Err(finding) = run_one(target, s) {
                        match &finding {
                            Finding::Wrong(_) => local.wrong += 1,
                            Finding::Mutated(_) => local.mutated += 1,
                            Finding::Panic(_) => local.panics += 1,
                            Finding::Hang(_) => local.hangs += 1,
                        }
                        local.failures.push(Failure {
                            target,
                            seed: s,
                            finding,
                        });
                    }
                }
                let mut r = report.lock().unwrap_or_else(|e| e.into_inner());
                for t in 0..Target::ALL.len() {
                    r.inputs[t] += local.inputs[t];
                }
                r.panics += local.panics;
                r.hangs += local.hangs;
                r.wrong += local.wrong;
                r.mutated += local.mutated;
                let room = MAX_KEPT.saturating_sub(r.failures.len());
                r.failures.extend(local.failures.into_iter().take(room));
            }
        })
    });
    std::panic::set_hook(previous);
    let mut report = report.into_inner().unwrap_or_else(|e| e.into_inner());
    report.failures.sort_by_key(|f| f.seed);
    report.elapsed = start.elapsed();
    report
}

/// Parses a reproducer file: one `target seed` pair per line, `#` comments and blank lines
/// ignored.
///
/// # Errors
/// The first line that is neither, with its number.
pub fn parse_reproducers(text: &str) -> Result<Vec<(Target, u64)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(t), Some(s), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "line {}: expected `target seed`, got {line:?}",
                n + 1
            ));
        };
        let target =
            Target::from_name(t).ok_or_else(|| format!("line {}: unknown target {t:?}", n + 1))?;
        let seed = s
            .parse()
            .map_err(|_| format!("line {}: {s:?} is not a seed", n + 1))?;
        out.push((target, seed));
    }
    Ok(out)
}

/// Reduces a failing input: among `tries` seeds derived from `seed`, the failing input of the
/// same target and kind of finding with the smallest [`Target::size`] (the input itself when
/// none is smaller). The inputs are derived from seeds, so this is a search, not a structural
/// shrink: the reduced input is another input that fails the same way.
pub fn shrink(target: Target, seed: u64, finding: &Finding, tries: u64) -> (u64, Finding) {
    shrink_with(
        |s| target.size(s),
        |s| run_one(target, s),
        seed,
        finding,
        tries,
    )
}

/// [`shrink`] for any sized, checked input family: `size(s)` orders the inputs, `check(s)`
/// runs the input of seed `s`. Only inputs smaller than the best so far are run; the seeds
/// tried are a fixed sequence derived from `seed` (the same for every call with that seed).
pub fn shrink_with(
    size: impl Fn(u64) -> usize,
    check: impl Fn(u64) -> Result<(), Finding>,
    seed: u64,
    finding: &Finding,
    tries: u64,
) -> (u64, Finding) {
    let kind = std::mem::discriminant(finding);
    let (mut best, mut best_size, mut best_finding) = (seed, size(seed), finding.clone());
    for s in related_seeds(seed).take(tries as usize) {
        let n = size(s);
        if n >= best_size {
            continue;
        }
        if let Err(f) = check(s)
            && std::mem::discriminant(&f) == kind
        {
            (best, best_size, best_finding) = (s, n, f);
        }
    }
    (best, best_finding)
}

/// The seeds [`shrink`] searches from `seed` (a linear congruential sequence).
pub fn related_seeds(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed ^ 0x5851_f42d_4c95_7f2d;
    std::iter::repeat_with(move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 1
    })
}
