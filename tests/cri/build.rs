//! Generates the CRI client from `proto/cri.proto`, compiled by protox (no
//! `protoc` needed on the machine).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/cri.proto");
    let descriptors = protox::compile(["proto/cri.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}
