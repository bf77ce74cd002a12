#![no_main]
//! Fuzz target `result_versions`: see `cni_fuzz::checks::result_versions`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_fuzz::checks::result_versions(data));
