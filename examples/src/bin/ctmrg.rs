//! The `ctmrg` example: see [`adrules_examples::ctmrg`] and `--help`.

fn main() {
    adrules_examples::ctmrg::main();
}
