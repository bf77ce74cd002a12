//! DEL, best effort, over the shared flow (`libcni::attach::del`): deletes
//! the macvlan in the container and always calls IPAM DEL. What is already
//! gone (the namespace, the link, the lease) is success; a step that fails
//! does not stop the next, and the failures are reported together.
//!
//! DEL reads only `ipam.type` from the config: a config ADD refused (an
//! unknown mode, a master that is gone, ...) must still be deletable, since
//! runtimes DEL every ADD, a failed one too.

use libcni::skel::CmdArgs;
use libcni::{attach, Error, ErrorList};

pub fn del(args: &CmdArgs) -> Result<(), Error> {
    attach::del(args, ErrorList::new)
}
