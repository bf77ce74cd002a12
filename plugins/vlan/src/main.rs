fn main() {
    libcni::skel::plugin_main(vlan::Vlan, vlan::NAME)
}
