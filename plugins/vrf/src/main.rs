fn main() {
    libcni::skel::plugin_main(vrf::Vrf, vrf::NAME)
}
