fn main() {
    libcni::skel::plugin_main(tap::Tap, tap::NAME)
}
