fn main() {
    libcni::skel::plugin_main(host_local::HostLocal, host_local::NAME)
}
