fn main() {
    libcni::skel::plugin_main(static_ipam::Static, static_ipam::NAME)
}
