#![no_main]
//! Fuzz target `dhcp_message`: see `cni_fuzz::checks::dhcp_message`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| cni_fuzz::checks::dhcp_message(data));
