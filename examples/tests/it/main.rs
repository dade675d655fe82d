//! The tests of the examples, one binary: each example against independent references (the
//! dense transfer matrix, finite differences, Onsager's and Yang's exact solutions), its
//! command line and its output files, through the library `adrules_examples`.

mod support;

mod cli;
mod ctmrg;
mod ctmrg_memory;
mod deq;
mod ising2d;
mod own_rule;
#[cfg(feature = "mpi")]
mod sliced_mpi;
