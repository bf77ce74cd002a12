fn main() {
    libcni::skel::plugin_main(tc_redirect_tap::TcRedirectTap, tc_redirect_tap::NAME)
}
