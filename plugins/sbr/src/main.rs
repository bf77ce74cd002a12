fn main() {
    libcni::skel::plugin_main(sbr::Sbr, sbr::NAME)
}
