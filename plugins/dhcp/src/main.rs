fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("daemon") {
        std::process::exit(dhcp::daemon::main(&args[2..]));
    }
    libcni::skel::plugin_main(dhcp::Dhcp, dhcp::ABOUT)
}
