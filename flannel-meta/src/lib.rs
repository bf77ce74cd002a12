//! The `flannel` plugin: not built yet (issue 7). The crate has no binary
//! until it is, so `/opt/cni/bin` never gets a `flannel` that pretends to work.
