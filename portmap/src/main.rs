fn main() {
    libcni::skel::plugin_main(portmap::PortMap, portmap::NAME)
}
