#![no_main]
//! Fuzz target `plugin_config`: see `cni_fuzz::checks::plugin_config`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_fuzz::checks::plugin_config(data));
