#![no_main]
//! Fuzz target `cni_args`: see `cni_fuzz::checks::cni_args`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_fuzz::checks::cni_args(data));
