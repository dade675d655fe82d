//! Validated index specifications of the three primitives, and the conjugation flag.
//!
//! All axes are 0-based. Conventions (the same as TensorOperations.jl, shifted to 0-based;
//! derived in [`crate::math`]):
//! - **Permutation** `p`: output axis `m` is input axis `p[m]`, so
//!   `C[i_0, …] = A[j]` with `j[p[m]] = i_m`, and `dims(C)[m] = dims(A)[p[m]]`.
//! - **Trace** (generalized): A's axes are partitioned into groups that share one index;
//!   kept group `m` is output axis `m` (a diagonal when it has several axes), summed groups
//!   are summed over their diagonal. The classic partial trace `(p, q1, q2)` (axis `q1[k]`
//!   traced against `q2[k]`, the rest permuted by `p`) is the special case of pairs.
//! - **Contraction** `(batch_a, open_a, contr_a), (batch_b, contr_b, open_b), perm_ab`: axis
//!   `contr_a[k]` of A is summed against axis `contr_b[k]` of B, `batch_a[k]` and `batch_b[k]`
//!   share one index (batch labels); the virtual intermediate has axes
//!   `(batch…, open_a…, open_b…)`, and output axis `m` is intermediate axis `perm_ab[m]`. No
//!   contracted axes is an outer product.
//!
//! Constructors check everything that does not depend on shapes; `check` methods validate
//! shapes at call time. Both return typed errors that name the argument.

use smallvec::SmallVec;

use crate::error::{Error, Result};

/// A short list of axes (inline up to rank 8, heap beyond).
pub type Axes = SmallVec<[usize; 8]>;
/// A shape (inline up to rank 8, heap beyond).
pub type Dims = SmallVec<[usize; 8]>;

/// Conjugation flag of an operand: `op_c(X) = conj(X)` when set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Conj {
    /// use the operand as it is
    #[default]
    No,
    /// use its complex conjugate (a no-op for real data)
    Yes,
}

impl Conj {
    /// `true` for [`Conj::Yes`].
    pub fn is_conj(self) -> bool {
        self == Conj::Yes
    }
    /// The opposite flag.
    pub fn flip(self) -> Conj {
        match self {
            Conj::No => Conj::Yes,
            Conj::Yes => Conj::No,
        }
    }
    /// `Conj::Yes` when `b`.
    pub fn from_bool(b: bool) -> Conj {
        if b { Conj::Yes } else { Conj::No }
    }
    /// `self` followed by `other` (conjugating twice is the identity).
    pub fn compose(self, other: Conj) -> Conj {
        Conj::from_bool(self.is_conj() != other.is_conj())
    }
}

fn check_is_permutation(arg: &str, p: &[usize], n: usize) -> Result<()> {
    if p.len() != n {
        return Err(Error::indices(
            arg,
            p,
            format!(
                "expected a permutation of 0..{n} ({n} entries), got {} entries",
                p.len()
            ),
        ));
    }
    let mut seen: SmallVec<[bool; 16]> = SmallVec::from_elem(false, n);
    for &i in p {
        if i >= n {
            return Err(Error::indices(
                arg,
                p,
                format!("axis {i} is out of range 0..{n}"),
            ));
        }
        if seen[i] {
            return Err(Error::indices(arg, p, format!("axis {i} appears twice")));
        }
        seen[i] = true;
    }
    Ok(())
}

/// A permutation of `0..n`: output axis `m` is input axis `self[m]`.
///
/// This is the index specification of the permuted add `C ← β·C + α·P_p(op(A))`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Permutation(Axes);

impl Permutation {
    /// Validates `p` as a permutation of `0..p.len()`.
    ///
    /// # Errors
    /// [`Error::InvalidIndices`] (argument `"permutation"`) on a repeated or out-of-range axis.
    pub fn new(p: &[usize]) -> Result<Self> {
        Self::named("permutation", p)
    }

    /// As [`Permutation::new`], naming the argument `arg` in errors.
    ///
    /// # Errors
    /// [`Error::InvalidIndices`] on a repeated or out-of-range axis.
    pub fn named(arg: &str, p: &[usize]) -> Result<Self> {
        check_is_permutation(arg, p, p.len())?;
        Ok(Permutation(p.iter().copied().collect()))
    }

    /// The identity permutation of `0..n`.
    pub fn identity(n: usize) -> Self {
        Permutation((0..n).collect())
    }

    /// The inverse `ip`, with `ip[p[m]] = m`.
    pub fn inverse(&self) -> Self {
        let mut ip: Axes = SmallVec::from_elem(0, self.0.len());
        for (m, &pm) in self.0.iter().enumerate() {
            ip[pm] = m;
        }
        Permutation(ip)
    }

    /// `self ∘ other`: applying `other` first, then `self` (`(self∘other)[m] = other[self[m]]`).
    pub fn then_after(&self, other: &Permutation) -> Permutation {
        Permutation(self.0.iter().map(|&m| other.0[m]).collect())
    }

    /// Number of axes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// `true` for the permutation of zero axes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `true` when `self[m] == m` for every `m`.
    pub fn is_identity(&self) -> bool {
        self.0.iter().enumerate().all(|(m, &p)| m == p)
    }

    /// The axes as a slice.
    pub fn as_slice(&self) -> &[usize] {
        &self.0
    }

    /// Permutes a list: `out[m] = x[self[m]]` (shapes and strides of the output from those
    /// of the input).
    ///
    /// # Panics
    /// Never for `x.len() == self.len()`; callers check the rank first.
    pub fn apply<T: Copy>(&self, x: &[T]) -> SmallVec<[T; 8]> {
        self.0.iter().map(|&p| x[p]).collect()
    }

    /// The shape `dims(C)[m] = dims(A)[p[m]]` of the permuted add of an A of shape `a`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] naming `"a"` when `rank(A) ≠ len(p)`.
    pub fn output_dims(&self, a: &[usize]) -> Result<Dims> {
        if a.len() != self.len() {
            return Err(Error::rank("a", self.len(), a.len()));
        }
        Ok(self.apply(a))
    }

    /// Checks the shapes of a permuted add: `rank(A) = rank(C) = len(p)` and
    /// `dims(C)[m] = dims(A)[p[m]]`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] naming `"a"` or `"c"`, then [`Error::ShapeMismatch`] naming `"c"`.
    pub fn check_add(&self, a: &[usize], c: &[usize]) -> Result<()> {
        let expected = self.output_dims(a)?;
        if c.len() != self.len() {
            return Err(Error::rank("c", self.len(), c.len()));
        }
        if expected.as_slice() != c {
            return Err(Error::shape("c", &expected, c));
        }
        Ok(())
    }
}

/// Index specification of a generalized partial trace
/// `C ← β·C + α·Σ_{summed} diag(op(A))`: diagonals, traces and sums of one operand in one
/// primitive.
///
/// A's axes are partitioned into **groups**; all axes of one group share one index (their
/// dimensions must agree), so a group of `g` axes of dimension `n` contributes the `n`
/// entries of its diagonal `A[…, t, …, t, …]`:
/// - **kept** group `m` becomes output axis `m` (`kept[m] = [i]` is a plain permuted axis,
///   `[i, j]` the diagonal `ii->i`, `[i, j, k]` the diagonal `iii->i`);
/// - **summed** groups are summed over their diagonal (`[i]` is a sum over one axis,
///   `ij->i`; `[i, j]` a trace, `ii->`; `[i, j, k]` the hypertrace `iii->`).
///
/// With `C[i_0, …] ` at output multi-index `i` and `t` ranging over the summed groups:
/// `C[i] ← β·C[i] + α·Σ_t op(A[J(i, t)])` where `J[a] = i_m` for `a ∈ kept[m]` and
/// `J[a] = t_k` for `a ∈ summed[k]`. `(kept…, summed…)` flattened is a permutation of A's
/// axes. No summed group and singleton kept groups is the permuted add; the classic partial
/// trace `(p, q1, q2)` is `kept = [[p_0], …]`, `summed = [[q1_0, q2_0], …]`
/// ([`TraceSpec::new`]).
///
/// Why one primitive: diagonals, traces and single-axis sums are all "read A on the diagonal
/// of its groups, sum some of the resulting axes"; on a strided layout that diagonal is itself
/// a view (the stride of a group is the sum of its axes' strides), so one kernel serves all of
/// them, and one adjoint ([`Backend::add_to_diagonal`](crate::Backend::add_to_diagonal):
/// broadcast C onto the diagonal) serves all their pullbacks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TraceSpec {
    kept: Vec<Axes>,
    summed: Vec<Axes>,
}

impl TraceSpec {
    /// The classic partial trace: axis `q1[k]` traced against `q2[k]`, the remaining axes
    /// permuted by `p` (output axis `m` is A's axis `p[m]`).
    ///
    /// # Errors
    /// [`Error::CountMismatch`] when `q1` and `q2` differ in length; [`Error::InvalidIndices`]
    /// (argument `"trace spec (p, q1, q2)"`) when `(p, q1, q2)` is not a permutation of
    /// `0..len(p)+2·len(q1)`.
    pub fn new(p: &[usize], q1: &[usize], q2: &[usize]) -> Result<Self> {
        if q1.len() != q2.len() {
            return Err(Error::CountMismatch {
                arg: "q2".into(),
                expected: q1.len(),
                actual: q2.len(),
            });
        }
        let all: Axes = p.iter().chain(q1).chain(q2).copied().collect();
        check_is_permutation("trace spec (p, q1, q2)", &all, all.len())?;
        Ok(TraceSpec {
            kept: p.iter().map(|&i| Axes::from_slice(&[i])).collect(),
            summed: q1
                .iter()
                .zip(q2)
                .map(|(&i, &j)| Axes::from_slice(&[i, j]))
                .collect(),
        })
    }

    /// The general form: `kept[m]` are the axes of A that form output axis `m` (their
    /// diagonal), `summed[k]` the axes summed together over their diagonal.
    ///
    /// # Errors
    /// [`Error::InvalidIndices`] (argument `"trace spec (kept, summed)"`) for an empty group or
    /// when the groups together are not a permutation of A's axes `0..n`.
    pub fn from_groups<K: AsRef<[usize]>, S: AsRef<[usize]>>(
        kept: &[K],
        summed: &[S],
    ) -> Result<Self> {
        let arg = "trace spec (kept, summed)";
        let all: Axes = kept
            .iter()
            .map(AsRef::as_ref)
            .chain(summed.iter().map(AsRef::as_ref))
            .flatten()
            .copied()
            .collect();
        if let Some(k) = kept.iter().position(|g| g.as_ref().is_empty()) {
            return Err(Error::indices(
                arg,
                &all,
                format!("kept group {k} is empty"),
            ));
        }
        if let Some(k) = summed.iter().position(|g| g.as_ref().is_empty()) {
            return Err(Error::indices(
                arg,
                &all,
                format!("summed group {k} is empty"),
            ));
        }
        check_is_permutation(arg, &all, all.len())?;
        Ok(TraceSpec {
            kept: kept.iter().map(|g| Axes::from_slice(g.as_ref())).collect(),
            summed: summed
                .iter()
                .map(|g| Axes::from_slice(g.as_ref()))
                .collect(),
        })
    }

    /// Builds the spec from one-letter labels of A's axes and C's axes, e.g. `("bii", "bi")`
    /// (a batched diagonal), `("ij", "i")` (a sum), `("ijji", "")` (a double trace): the axes
    /// of A with C's label `m` form kept group `m`; the axes of each label absent from `c`
    /// form one summed group (in order of first appearance in `a`).
    ///
    /// # Errors
    /// [`Error::InvalidLabel`] for a character that is not an ASCII letter, a label repeated
    /// in `c` (argument `"c"`), or a label of `c` absent from `a`.
    pub fn from_labels(a: &str, c: &str) -> Result<Self> {
        let la: Vec<char> = a.chars().collect();
        let lc: Vec<char> = c.chars().collect();
        for (arg, l) in [("a", &la), ("c", &lc)] {
            if let Some(x) = l.iter().find(|x| !x.is_ascii_alphabetic()) {
                return Err(Error::InvalidLabel {
                    arg: arg.into(),
                    label: format!("{x:?}"),
                    reason: "labels are ASCII letters (a-z, A-Z), as in Einstein strings".into(),
                });
            }
        }
        let mut kept: Vec<Axes> = Vec::with_capacity(lc.len());
        for (m, x) in lc.iter().enumerate() {
            if lc[..m].contains(x) {
                return Err(Error::InvalidLabel {
                    arg: "c".into(),
                    label: x.to_string(),
                    reason: "appears twice in the output".into(),
                });
            }
            let g: Axes = (0..la.len()).filter(|&i| la[i] == *x).collect();
            if g.is_empty() {
                return Err(Error::InvalidLabel {
                    arg: "c".into(),
                    label: x.to_string(),
                    reason: "does not appear in a".into(),
                });
            }
            kept.push(g);
        }
        let mut summed: Vec<Axes> = Vec::new();
        for (i, x) in la.iter().enumerate() {
            if !lc.contains(x) && !la[..i].contains(x) {
                summed.push((i..la.len()).filter(|&j| la[j] == *x).collect());
            }
        }
        Self::from_groups(&kept, &summed)
    }

    /// Kept groups: `kept()[m]` are the axes of A that form output axis `m`.
    pub fn kept(&self) -> &[Axes] {
        &self.kept
    }
    /// Summed groups: each is summed over its diagonal.
    pub fn summed(&self) -> &[Axes] {
        &self.summed
    }
    /// Rank of A.
    pub fn rank_a(&self) -> usize {
        self.kept.iter().chain(&self.summed).map(|g| g.len()).sum()
    }
    /// Rank of C.
    pub fn rank_c(&self) -> usize {
        self.kept.len()
    }

    /// The permutation `p` when this spec is a plain permuted add (every kept group one axis,
    /// nothing summed).
    pub fn as_permutation(&self) -> Option<Permutation> {
        (self.summed.is_empty() && self.kept.iter().all(|g| g.len() == 1))
            .then(|| Permutation(self.kept.iter().map(|g| g[0]).collect()))
    }

    /// Output shape for an input of shape `a`.
    ///
    /// # Errors
    /// As [`TraceSpec::check`] for everything about `a`.
    pub fn output_dims(&self, a: &[usize]) -> Result<Dims> {
        self.check_a(a)?;
        Ok(self.kept.iter().map(|g| a[g[0]]).collect())
    }

    /// The dimension of each summed group for an A of shape `a` (unchecked: call
    /// [`check`](Self::check) first).
    pub fn summed_dims(&self, a: &[usize]) -> Dims {
        self.summed.iter().map(|g| a[g[0]]).collect()
    }

    fn check_a(&self, a: &[usize]) -> Result<()> {
        if a.len() != self.rank_a() {
            return Err(Error::rank("a", self.rank_a(), a.len()));
        }
        for g in self.kept.iter().chain(&self.summed) {
            let i = g[0];
            if let Some(&j) = g.iter().find(|&&j| a[j] != a[i]) {
                return Err(Error::shape(
                    format!("a (axes {i} and {j} share one index of a diagonal or trace)"),
                    &[a[i], a[i]],
                    &[a[i], a[j]],
                ));
            }
        }
        Ok(())
    }

    /// Checks shapes: rank of A, equal dimensions within each group, and C's shape.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] / [`Error::ShapeMismatch`] naming `"a"` or `"c"`.
    pub fn check(&self, a: &[usize], c: &[usize]) -> Result<()> {
        let expected = self.output_dims(a)?;
        if c.len() != expected.len() {
            return Err(Error::rank("c", expected.len(), c.len()));
        }
        if expected.as_slice() != c {
            return Err(Error::shape("c", &expected, c));
        }
        Ok(())
    }
}

/// Index specification of a pairwise (batched) contraction
/// `C ← β·C + α·P_{perm_ab}(op(A) · op(B))`.
///
/// A's axes split into `(batch_a, open_a, contr_a)`, B's into `(batch_b, contr_b, open_b)`;
/// `contr_a[k]` is summed against `contr_b[k]`; `batch_a[k]` and `batch_b[k]` share one index
/// that is neither summed nor multiplied out (a batch label, `b` in `bij,bjk->bik`: one
/// product per batch index). The intermediate has axes `(batch…, open_a…, open_b…)` and output
/// axis `m` is intermediate axis `perm_ab[m]`:
/// `C[P(u)] ← β·C[P(u)] + α·Σ_k op(A[batch_a = u_L, open_a = u_A, contr_a = k])·
/// op(B[batch_b = u_L, contr_b = k, open_b = u_B])`.
/// No batch axes is the plain pairwise contraction; no contracted axes an outer product.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContractSpec {
    batch_a: Axes,
    batch_b: Axes,
    open_a: Axes,
    contr_a: Axes,
    contr_b: Axes,
    open_b: Axes,
    perm_ab: Permutation,
}

impl ContractSpec {
    /// Validates the split of an unbatched contraction (intermediate `(open_a…, open_b…)`).
    ///
    /// # Errors
    /// [`Error::InvalidIndices`] when `(open_a, contr_a)` is not a permutation of A's axes
    /// (argument `"(open_a, contr_a)"`), likewise for B, or when `perm_ab` is not a permutation
    /// of `0..len(open_a)+len(open_b)`; [`Error::CountMismatch`] when `contr_a` and `contr_b`
    /// differ in length.
    pub fn new(
        open_a: &[usize],
        contr_a: &[usize],
        contr_b: &[usize],
        open_b: &[usize],
        perm_ab: &[usize],
    ) -> Result<Self> {
        Self::batched(&[], &[], open_a, contr_a, contr_b, open_b, perm_ab)
    }

    /// Validates the split of a batched contraction (intermediate
    /// `(batch…, open_a…, open_b…)`).
    ///
    /// # Errors
    /// [`Error::InvalidIndices`] when `(batch_a, open_a, contr_a)` is not a permutation of A's
    /// axes (argument `"(batch_a, open_a, contr_a)"`), likewise for B, or when `perm_ab` is
    /// not a permutation of the intermediate's axes; [`Error::CountMismatch`] when `contr_a`
    /// and `contr_b`, or `batch_a` and `batch_b`, differ in length.
    pub fn batched(
        batch_a: &[usize],
        batch_b: &[usize],
        open_a: &[usize],
        contr_a: &[usize],
        contr_b: &[usize],
        open_b: &[usize],
        perm_ab: &[usize],
    ) -> Result<Self> {
        let a: Axes = batch_a
            .iter()
            .chain(open_a)
            .chain(contr_a)
            .copied()
            .collect();
        check_is_permutation("(batch_a, open_a, contr_a)", &a, a.len())?;
        let b: Axes = batch_b
            .iter()
            .chain(contr_b)
            .chain(open_b)
            .copied()
            .collect();
        check_is_permutation("(batch_b, contr_b, open_b)", &b, b.len())?;
        if contr_a.len() != contr_b.len() {
            return Err(Error::CountMismatch {
                arg: "contr_b".into(),
                expected: contr_a.len(),
                actual: contr_b.len(),
            });
        }
        if batch_a.len() != batch_b.len() {
            return Err(Error::CountMismatch {
                arg: "batch_b".into(),
                expected: batch_a.len(),
                actual: batch_b.len(),
            });
        }
        check_is_permutation(
            "perm_ab",
            perm_ab,
            batch_a.len() + open_a.len() + open_b.len(),
        )?;
        Ok(ContractSpec {
            batch_a: batch_a.iter().copied().collect(),
            batch_b: batch_b.iter().copied().collect(),
            open_a: open_a.iter().copied().collect(),
            contr_a: contr_a.iter().copied().collect(),
            contr_b: contr_b.iter().copied().collect(),
            open_b: open_b.iter().copied().collect(),
            perm_ab: Permutation(perm_ab.iter().copied().collect()),
        })
    }

    /// Builds the spec from one-letter axis labels (ASCII letters, the grammar of
    /// [`Network::einsum`](crate::network::Network::einsum)), e.g. `("abcd", "cdef", "abef")`
    /// or `("bij", "bjk", "bik")`: labels in `a`, `b` and `c` are batch labels, labels in `a`
    /// and `b` only are contracted, labels in one of `a`, `b` must appear in `c`. Contracted
    /// and batch axes are paired in the order they appear in `a`.
    ///
    /// # Errors
    /// [`Error::InvalidLabel`] for a character that is not an ASCII letter, a label repeated
    /// within one operand, a label of `c` in neither `a` nor `b`, or a label of one operand
    /// missing from `c` (sum it first with a [`TraceSpec`]).
    pub fn from_labels(a: &str, b: &str, c: &str) -> Result<Self> {
        let (la, lb, lc): (Vec<char>, Vec<char>, Vec<char>) = (
            a.chars().collect(),
            b.chars().collect(),
            c.chars().collect(),
        );
        for (arg, l) in [("a", &la), ("b", &lb), ("c", &lc)] {
            for (i, x) in l.iter().enumerate() {
                if !x.is_ascii_alphabetic() {
                    return Err(Error::InvalidLabel {
                        arg: arg.into(),
                        label: format!("{x:?}"),
                        reason: "labels are ASCII letters (a-z, A-Z), as in Einstein strings"
                            .into(),
                    });
                }
                if l[..i].contains(x) {
                    return Err(Error::InvalidLabel {
                        arg: arg.into(),
                        label: x.to_string(),
                        reason: "appears twice in one operand (use a trace for diagonals)".into(),
                    });
                }
            }
        }
        let (mut batch_a, mut batch_b) = (Axes::new(), Axes::new());
        let mut open_a = Axes::new();
        let mut contr_a = Axes::new();
        let mut contr_b = Axes::new();
        for (i, x) in la.iter().enumerate() {
            match lb.iter().position(|y| y == x) {
                Some(j) if lc.contains(x) => {
                    batch_a.push(i);
                    batch_b.push(j);
                }
                Some(j) => {
                    contr_a.push(i);
                    contr_b.push(j);
                }
                None => open_a.push(i),
            }
        }
        let open_b: Axes = (0..lb.len())
            .filter(|j| !contr_b.contains(j) && !batch_b.contains(j))
            .collect();
        let inter: Vec<char> = batch_a
            .iter()
            .chain(&open_a)
            .map(|&i| la[i])
            .chain(open_b.iter().map(|&j| lb[j]))
            .collect();
        let mut perm = Axes::new();
        for x in &lc {
            match inter.iter().position(|y| y == x) {
                Some(m) if !perm.contains(&m) => perm.push(m),
                Some(_) => {
                    return Err(Error::InvalidLabel {
                        arg: "c".into(),
                        label: x.to_string(),
                        reason: "appears twice in the output".into(),
                    });
                }
                None => {
                    return Err(Error::InvalidLabel {
                        arg: "c".into(),
                        label: x.to_string(),
                        reason: "does not appear in a or b".into(),
                    });
                }
            }
        }
        if let Some(x) = inter.iter().find(|x| !lc.contains(x)) {
            return Err(Error::InvalidLabel {
                arg: "c".into(),
                label: x.to_string(),
                reason: "is open (in exactly one of a, b) and must appear in the output".into(),
            });
        }
        Self::batched(
            &batch_a, &batch_b, &open_a, &contr_a, &contr_b, &open_b, &perm,
        )
    }

    /// Batch axes of A.
    pub fn batch_a(&self) -> &[usize] {
        &self.batch_a
    }
    /// Batch axes of B (paired with [`batch_a`](Self::batch_a)).
    pub fn batch_b(&self) -> &[usize] {
        &self.batch_b
    }
    /// Open axes of A, in intermediate order.
    pub fn open_a(&self) -> &[usize] {
        &self.open_a
    }
    /// Contracted axes of A.
    pub fn contr_a(&self) -> &[usize] {
        &self.contr_a
    }
    /// Contracted axes of B (paired with [`contr_a`](Self::contr_a)).
    pub fn contr_b(&self) -> &[usize] {
        &self.contr_b
    }
    /// Open axes of B, in intermediate order.
    pub fn open_b(&self) -> &[usize] {
        &self.open_b
    }
    /// Output permutation over `(batch…, open_a…, open_b…)`.
    pub fn perm_ab(&self) -> &Permutation {
        &self.perm_ab
    }
    /// Number of batch axes.
    pub fn num_batch(&self) -> usize {
        self.batch_a.len()
    }
    /// Rank of A.
    pub fn rank_a(&self) -> usize {
        self.batch_a.len() + self.open_a.len() + self.contr_a.len()
    }
    /// Rank of B.
    pub fn rank_b(&self) -> usize {
        self.batch_b.len() + self.open_b.len() + self.contr_b.len()
    }
    /// Rank of C.
    pub fn rank_c(&self) -> usize {
        self.batch_a.len() + self.open_a.len() + self.open_b.len()
    }

    /// Output shape for inputs of shapes `a` and `b`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] naming `"a"` or `"b"`; [`Error::ShapeMismatch`] naming the
    /// contracted or batch axis of `"b"` whose dimension differs from its partner in A.
    pub fn output_dims(&self, a: &[usize], b: &[usize]) -> Result<Dims> {
        if a.len() != self.rank_a() {
            return Err(Error::rank("a", self.rank_a(), a.len()));
        }
        if b.len() != self.rank_b() {
            return Err(Error::rank("b", self.rank_b(), b.len()));
        }
        for (kind, pa, pb) in [
            ("batch axis with", &self.batch_a, &self.batch_b),
            ("contracted with", &self.contr_a, &self.contr_b),
        ] {
            for (&i, &j) in pa.iter().zip(pb.iter()) {
                if a[i] != b[j] {
                    return Err(Error::shape(
                        format!("b (axis {j}, {kind} axis {i} of a)"),
                        &[a[i]],
                        &[b[j]],
                    ));
                }
            }
        }
        let inter: Dims = self
            .batch_a
            .iter()
            .chain(&self.open_a)
            .map(|&i| a[i])
            .chain(self.open_b.iter().map(|&j| b[j]))
            .collect();
        Ok(self.perm_ab.apply(&inter))
    }

    /// Checks every shape of `C ← β·C + α·P(op(A)·op(B))`.
    ///
    /// # Errors
    /// As [`ContractSpec::output_dims`], then [`Error::RankMismatch`] /
    /// [`Error::ShapeMismatch`] naming `"c"`.
    pub fn check(&self, a: &[usize], b: &[usize], c: &[usize]) -> Result<()> {
        let expected = self.output_dims(a, b)?;
        if c.len() != expected.len() {
            return Err(Error::rank("c", expected.len(), c.len()));
        }
        if expected.as_slice() != c {
            return Err(Error::shape("c", &expected, c));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_inverse_and_errors() {
        let p = Permutation::new(&[2, 0, 1]).unwrap();
        assert_eq!(p.inverse().as_slice(), &[1, 2, 0]);
        assert!(p.then_after(&p.inverse()).is_identity());
        assert!(matches!(
            Permutation::new(&[0, 0]),
            Err(Error::InvalidIndices { .. })
        ));
        assert!(matches!(
            Permutation::new(&[0, 2]),
            Err(Error::InvalidIndices { .. })
        ));
        assert_eq!(p.apply(&[10, 20, 30]).as_slice(), &[30, 10, 20]);
        assert!(matches!(
            p.check_add(&[2, 3, 4], &[4, 2, 2]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(p.check_add(&[2, 3, 4], &[4, 2, 3]).is_ok());
    }

    #[test]
    fn trace_spec_validation() {
        let t = TraceSpec::new(&[2, 4, 1], &[0], &[3]).unwrap();
        assert_eq!(
            t.output_dims(&[2, 3, 4, 2, 5]).unwrap().as_slice(),
            &[4, 5, 3]
        );
        assert!(matches!(
            t.output_dims(&[2, 3, 4, 3, 5]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            TraceSpec::new(&[0], &[1], &[]),
            Err(Error::CountMismatch { .. })
        ));
        assert!(matches!(
            TraceSpec::new(&[0], &[1], &[1]),
            Err(Error::InvalidIndices { .. })
        ));
    }

    #[test]
    fn contract_spec_from_labels_matches_explicit() {
        let s = ContractSpec::from_labels("abcd", "cdef", "abef").unwrap();
        assert_eq!(
            s,
            ContractSpec::new(&[0, 1], &[2, 3], &[0, 1], &[2, 3], &[0, 1, 2, 3]).unwrap()
        );
        let s = ContractSpec::new(&[1, 3, 4], &[0, 2], &[1, 0], &[2], &[2, 1, 3, 0]).unwrap();
        assert_eq!(
            s.output_dims(&[2, 3, 4, 2, 5], &[4, 2, 3])
                .unwrap()
                .as_slice(),
            &[5, 2, 3, 3]
        );
        assert!(matches!(
            s.output_dims(&[2, 3, 4, 2, 5], &[4, 3, 3]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            ContractSpec::from_labels("ab", "bc", "ab"),
            Err(Error::InvalidLabel { .. })
        ));
        assert!(matches!(
            ContractSpec::from_labels("ab", "bc", "a"),
            Err(Error::InvalidLabel { .. })
        ));
        // The grammar of Einstein strings: no spaces, digits or non-ASCII letters.
        for (a, b, c, arg) in [
            ("i j", "jk", "ik", "a"),
            ("ij", "j1", "i1", "b"),
            ("αβ", "βγ", "αγ", "a"),
        ] {
            assert!(
                matches!(
                    ContractSpec::from_labels(a, b, c),
                    Err(Error::InvalidLabel { arg: ref x, .. }) if x == arg
                ),
                "{a}, {b}, {c}"
            );
        }
    }
}
