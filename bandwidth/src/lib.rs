//! The `bandwidth` plugin: not built yet (issue 6). The crate has no binary
//! until it is, so `/opt/cni/bin` never gets a `bandwidth` that pretends to work.
