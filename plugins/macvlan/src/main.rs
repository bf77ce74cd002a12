fn main() {
    libcni::skel::plugin_main(macvlan::Macvlan, macvlan::NAME)
}
