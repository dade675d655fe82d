//! The `ising2d` example: see [`adrules_examples::ising2d`] and `--help`.

fn main() {
    adrules_examples::ising2d::main();
}
