fn main() {
    libcni::skel::plugin_main(tuning::Tuning, tuning::NAME)
}
