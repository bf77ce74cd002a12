fn main() {
    libcni::skel::plugin_main(bandwidth::BandwidthPlugin, bandwidth::NAME)
}
