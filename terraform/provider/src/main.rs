//! `terraform-provider-tern`: tern's offers, plans and jobs as Terraform data sources and
//! resources, over Terraform's plugin protocol 6. Terraform starts this binary; see
//! terraform/README.md.

mod diag;
mod job;
mod offers;
mod plan;
mod plugin;
mod provider;
mod schema;
mod spec;
mod value;

/// Generated from the official `tfplugin6.5.proto`.
#[allow(clippy::all, clippy::pedantic)]
pub mod tfplugin6 {
    tonic::include_proto!("tfplugin6");
}

/// go-plugin's controller service (see proto/controller.proto).
#[allow(clippy::all, clippy::pedantic)]
pub mod controller_proto {
    tonic::include_proto!("plugin");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    if let Err(e) = plugin::serve(provider::TernProvider::default()).await {
        eprintln!("terraform-provider-tern: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
