//! Prints tern-gcp's IAM permissions, comma-separated, for `gcloud iam roles create`.

fn main() {
    println!("{}", tern_gcp::permissions::names().join(","));
}
