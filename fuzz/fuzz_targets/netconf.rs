#![no_main]
//! Fuzz target `netconf`: see `cni_fuzz::checks::netconf`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_fuzz::checks::netconf(data));
