fn main() {
    libcni::skel::plugin_main(loopback::Loopback, loopback::NAME)
}
