fn main() {
    libcni::skel::plugin_main(ipvlan::Ipvlan, ipvlan::NAME)
}
