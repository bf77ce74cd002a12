fn main() -> std::process::ExitCode {
    cni_rs::main()
}
