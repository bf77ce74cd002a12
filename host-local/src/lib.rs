//! The `host-local` plugin: not built yet (issue 3). The crate has no binary
//! until it is, so `/opt/cni/bin` never gets a `host-local` that pretends to work.
