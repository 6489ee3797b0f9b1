//! Generates the gRPC server stubs of Terraform's plugin protocol 6 (the official
//! `tfplugin6.5.proto`, copied as HashiCorp asks) and go-plugin's controller service.
//! Needs `protoc` (Debian `protobuf-compiler`; `scripts/setup` installs it).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure()
        .build_client(false)
        .compile_protos(
            &["proto/tfplugin6.5.proto", "proto/controller.proto"],
            &["proto"],
        )?;
    Ok(())
}
