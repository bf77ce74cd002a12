//! The `portmap` plugin: not built yet (issue 5). The crate has no binary
//! until it is, so `/opt/cni/bin` never gets a `portmap` that pretends to work.
