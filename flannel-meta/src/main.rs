fn main() {
    libcni::skel::plugin_main(flannel_meta::Flannel, flannel_meta::NAME)
}
