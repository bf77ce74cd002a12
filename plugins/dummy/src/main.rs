fn main() {
    libcni::skel::plugin_main(dummy::Dummy, dummy::NAME)
}
