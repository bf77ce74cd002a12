#![no_main]
//! Fuzz target `subnet_env`: see `cni_fuzz::checks::subnet_env`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_fuzz::checks::subnet_env(data));
