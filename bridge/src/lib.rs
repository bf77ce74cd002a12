//! The `bridge` plugin: not built yet (issue 4). The crate has no binary
//! until it is, so `/opt/cni/bin` never gets a `bridge` that pretends to work.
