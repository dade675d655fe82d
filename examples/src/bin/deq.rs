//! The `deq` example: see [`adrules_examples::deq`] and `--help`.

fn main() {
    adrules_examples::deq::main();
}
