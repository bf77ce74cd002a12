//! DEL, best effort, over the shared flow (`libcni::attach::del_with`):
//! removes the container end of the veth pair (which takes the host end
//! with it), or without a namespace the host end its alias names, on its
//! own thread, always calls IPAM DEL, and removes the spoof check
//! and the masquerade (with `macspoofchk` / `ipMasq`) by container ID and
//! network name alone, so they go even when the namespace or the interface
//! is already gone. What is already gone (the namespace, the interface,
//! the lease, the rules) is success; a step that fails does not stop the
//! next, and the failures are reported together. The bridge, its address
//! and the forwarding sysctls stay, as in the reference.
//!
//! DEL reads only `ipam.type` and, leniently, the firewall keys from the
//! config: a config ADD rejected (a contradiction, a bad value) must still
//! be deletable, since runtimes DEL every ADD, a failed one too.

use libcni::attach::{self, veth};
use libcni::skel::CmdArgs;
use libcni::Error;

use crate::firewall;

pub fn del(args: &CmdArgs) -> Result<(), Error> {
    attach::del_with(
        args,
        || veth::delete_pair(args),
        || firewall::del(args, &firewall::Keys::lenient(args)),
    )
}
