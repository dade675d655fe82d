//! Benchmark networks of contraction-order planners: closed networks (scalar output) written
//! as ncon label lists with positive labels. Shared by the core's planner tests, the planner
//! bench and the `planner-networks` binary of `adrules-benches` (whose JSON
//! `benches/peers_planner.py` reads, to run opt_einsum and cotengra on the same networks).

/// A closed network: each operand's labels, and the dimension of each label (`dims[label − 1]`;
/// labels are `1..=dims.len()`).
pub struct Graph {
    /// name used in tables, e.g. `"lattice 10x10 chi=4"`
    pub name: String,
    /// each operand's labels (ncon form, all positive: every label is summed)
    pub labels: Vec<Vec<i64>>,
    /// dimension of label `l` at `dims[l − 1]`
    pub dims: Vec<usize>,
}

impl Graph {
    /// Operand shapes, in the order of their labels.
    pub fn shapes(&self) -> Vec<Vec<usize>> {
        self.labels
            .iter()
            .map(|ax| ax.iter().map(|&l| self.dims[l as usize - 1]).collect())
            .collect()
    }

    fn from_edges(name: String, n: usize, edges: &[(usize, usize)], chi: usize) -> Graph {
        let mut labels = vec![Vec::new(); n];
        for (e, &(a, b)) in edges.iter().enumerate() {
            labels[a].push(e as i64 + 1);
            labels[b].push(e as i64 + 1);
        }
        Graph {
            name,
            labels,
            dims: vec![chi; edges.len()],
        }
    }
}

/// The `l × l` square lattice with open boundaries, every bond of dimension `chi` (a PEPS
/// norm's double layer folded into one bond, no physical legs).
pub fn lattice(l: usize, chi: usize) -> Graph {
    let site = |i: usize, j: usize| i * l + j;
    let mut edges = Vec::new();
    for i in 0..l {
        for j in 0..l {
            if j + 1 < l {
                edges.push((site(i, j), site(i, j + 1)));
            }
            if i + 1 < l {
                edges.push((site(i, j), site(i + 1, j)));
            }
        }
    }
    Graph::from_edges(format!("lattice {l}x{l} chi={chi}"), l * l, &edges, chi)
}

/// SplitMix64 (Steele, Lea, Flood, 2014): the generators' seeded stream.
fn splitmix(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// An Einstein string of `n` operands, each holding two distinct labels of `abcd` drawn from
/// `seed` (hyperedges of degree about `n / 2`), with a scalar output: the bounded-planning
/// case of the planner bench and tests.
pub fn hypergraph(n: usize, seed: u64) -> String {
    let mut next = splitmix(seed);
    let letters = ['a', 'b', 'c', 'd'];
    let terms: Vec<String> = (0..n)
        .map(|_| {
            let a = (next() % 4) as usize;
            let b = (a + 1 + (next() % 3) as usize) % 4;
            format!("{}{}", letters[a], letters[b])
        })
        .collect();
    format!("{}->", terms.join(","))
}

/// A random 3-regular graph on `n` vertices (`n` even), every bond of dimension `chi`: the
/// configuration model (3 stubs per vertex, a seeded shuffle, pairs of consecutive stubs),
/// redrawn until it has no self-loop and no double edge (as networkx's
/// `random_regular_graph` does).
///
/// # Panics
/// When `n` is odd or below 4 (no 3-regular graph exists).
pub fn random_regular(n: usize, chi: usize, seed: u64) -> Graph {
    assert!(
        n.is_multiple_of(2) && n >= 4,
        "3-regular graphs need an even n ≥ 4"
    );
    let mut next = splitmix(seed);
    loop {
        let mut stubs: Vec<usize> = (0..n).flat_map(|v| [v; 3]).collect();
        for i in (1..stubs.len()).rev() {
            let j = (next() % (i as u64 + 1)) as usize;
            stubs.swap(i, j);
        }
        let mut edges: Vec<(usize, usize)> = stubs
            .chunks(2)
            .map(|p| (p[0].min(p[1]), p[0].max(p[1])))
            .collect();
        let loops = edges.iter().any(|&(a, b)| a == b);
        let mut sorted = edges.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if !loops && sorted.len() == edges.len() {
            edges.sort_unstable();
            return Graph::from_edges(format!("random 3-regular n={n} chi={chi}"), n, &edges, chi);
        }
    }
}

/// ⟨ψ|ψ⟩ of an MPS of `sites` sites with open boundaries: `sites` ket tensors (χ, d, χ),
/// then `sites` bra tensors, sharing the physical labels.
pub fn mps_norm(sites: usize, chi: usize, d: usize) -> Graph {
    let bond = |s: usize, layer: i64| 3 * s as i64 + layer;
    let phys = |s: usize| 3 * s as i64 + 3;
    let mut labels = Vec::new();
    for layer in [1, 2] {
        for s in 0..sites {
            let mut ax = Vec::new();
            if s > 0 {
                ax.push(bond(s - 1, layer));
            }
            ax.push(phys(s));
            if s + 1 < sites {
                ax.push(bond(s, layer));
            }
            labels.push(ax);
        }
    }
    let max = 3 * sites as i64;
    let dims = (1..=max)
        .map(|l| if l % 3 == 0 { d } else { chi })
        .collect();
    Graph {
        name: format!("mps norm {} tensors chi={chi}", 2 * sites),
        labels,
        dims,
    }
}

/// The networks of the planner's quality table: the 10×10 lattice (χ = 4), the 8×8 lattice
/// (χ = 8), random 3-regular graphs of 300 (χ = 4) and 1,000 vertices (χ = 2), seed 1, and
/// the norm of a 400-site MPS (800 tensors, χ = 16, d = 2).
pub fn quality_set() -> Vec<Graph> {
    vec![
        lattice(10, 4),
        lattice(8, 8),
        random_regular(300, 4, 1),
        random_regular(1000, 2, 1),
        mps_norm(400, 16, 2),
    ]
}
