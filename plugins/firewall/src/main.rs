fn main() {
    libcni::skel::plugin_main(firewall::Firewall, firewall::NAME)
}
