//! The benchmarks of adrules live in this package's `[[bench]]` targets (`cargo xtask bench`
//! runs them and prints the tables); this library is empty. Peer comparisons (torch, JAX)
//! are the Python scripts beside them, run by hand in a virtual environment.
