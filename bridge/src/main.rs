fn main() {
    libcni::skel::plugin_main(bridge::BridgePlugin, bridge::NAME)
}
