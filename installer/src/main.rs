fn main() -> std::process::ExitCode {
    cni_rs_install::main()
}
