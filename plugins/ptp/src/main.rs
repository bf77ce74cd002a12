fn main() {
    libcni::skel::plugin_main(ptp::Ptp, ptp::NAME)
}
