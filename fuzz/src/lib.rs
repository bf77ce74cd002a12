//! Fuzz checks of the CNI suite's parsers: what each cargo-fuzz target in
//! `fuzz_targets/` runs on its input. The same checks replay the committed
//! corpus under `cargo test` (tests/tests/fuzz_corpus.rs), so CI runs
//! them without the fuzzer. A check panics only on a bug: a parser that
//! panics, or an invariant (round trip, error shape) that does not hold.

pub mod checks;
