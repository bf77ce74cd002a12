//! The run's temp dir (`$TMPDIR/cnit-bench-<pid>`): conflists, the result
//! cache, host-local and flannel `dataDir`s, subnet.env, strace output.
//! Removed on drop. Nothing of a run goes to `/var/lib/cni` or `/run/flannel`.

use std::io;
use std::path::{Path, PathBuf};

pub struct Scratch {
    root: PathBuf,
}

impl Scratch {
    pub fn create() -> io::Result<Scratch> {
        let root = std::env::temp_dir().join(format!(
            "{}{}",
            crate::namespaces::PREFIX,
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)?;
        Ok(Scratch { root })
    }

    /// `<root>/<name>`, created.
    pub fn dir(&self, name: &str) -> io::Result<PathBuf> {
        let p = self.root.join(name);
        std::fs::create_dir_all(&p)?;
        Ok(p)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
