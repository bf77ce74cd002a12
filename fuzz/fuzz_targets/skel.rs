#![no_main]
//! Fuzz target `skel`: see `cni_fuzz::checks::skel`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_fuzz::checks::skel(data));
