fn main() {
    dhcp::program_main(std::env::args_os().collect())
}
