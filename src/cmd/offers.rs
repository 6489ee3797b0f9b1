//! `tern offers`: cheapest purchasable offers, one row per (cloud, zone, shape) with on-demand
//! and spot side by side.

use serde::Serialize;
use tern_cloud::{Accelerator, Capacity, Cloud, Offer, PriceComponent};
use tern_pricing::{AcceleratorFilter, OfferQuery};

use super::catalog_source::CatalogArgs;
use super::output::{money, print_json_line, table};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Accelerator per VM as NAME[:COUNT], e.g. A100:8, T4, tpu-v5p-8.
    #[arg(long, short = 'a', value_name = "NAME[:COUNT]")]
    pub accelerator: Option<AcceleratorFilter>,
    /// Only this cloud (aws, gcp).
    #[arg(long)]
    pub cloud: Option<Cloud>,
    /// Only this region, e.g. us-east-1.
    #[arg(long)]
    pub region: Option<String>,
    /// Spot prices only.
    #[arg(long, conflicts_with = "on_demand")]
    pub spot: bool,
    /// On-demand prices only.
    #[arg(long)]
    pub on_demand: bool,
    /// At least this many vCPUs per VM.
    #[arg(long, value_name = "N")]
    pub min_vcpus: Option<f64>,
    /// At least this much memory per VM, GiB.
    #[arg(long, value_name = "GIB")]
    pub min_memory: Option<f64>,
    /// At most this price per VM, USD/h.
    #[arg(long, value_name = "USD")]
    pub max_price: Option<f64>,
    /// Show at most this many rows (0 = all).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    #[command(flatten)]
    pub catalog: CatalogArgs,
    /// Ask the cloud instead of the catalog: GCP's Compute API (zones, machine and accelerator
    /// types) priced by the Cloud Billing Catalog. Needs --cloud gcp, --region and --project,
    /// and Application Default Credentials.
    #[arg(long, requires_all = ["cloud", "region"])]
    pub live: bool,
    /// GCP project for --live.
    #[arg(long, env = "GOOGLE_CLOUD_PROJECT", requires = "live")]
    pub project: Option<String>,
    /// Send --live's Compute, TPU and Billing calls here (a local fake of the APIs).
    #[arg(long, value_name = "URL", requires = "live")]
    pub gcp_endpoint: Option<String>,
    /// Send no credentials with --live (only for a local fake at --gcp-endpoint).
    #[arg(long, requires = "gcp_endpoint")]
    pub gcp_anonymous: bool,
    /// One JSON object on one line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The offers the cloud lists now (`--live`), as a catalog, and where they came from.
#[cfg(feature = "gcp")]
fn live(args: &Args) -> anyhow::Result<(tern_pricing::Catalog, String)> {
    use anyhow::Context;
    anyhow::ensure!(
        args.cloud == Some(Cloud::Gcp),
        "--live asks GCP's APIs: it needs --cloud gcp (AWS's live offers are the controller's)"
    );
    let region = args.region.clone().context("--live needs --region")?;
    let project = args
        .project
        .clone()
        .context("--live needs --project (or GOOGLE_CLOUD_PROJECT)")?;
    let config = tern_gcp::GcpConfig {
        endpoint: args.gcp_endpoint.clone(),
        billing_endpoint: args.gcp_endpoint.clone(),
        tpu_endpoint: args.gcp_endpoint.clone(),
        anonymous: args.gcp_anonymous,
        ..tern_gcp::GcpConfig::new(project.clone(), region.clone())
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let offers = runtime.block_on(async {
        use tern_cloud::Provider;
        let provider = tern_gcp::GcpProvider::connect(config).await?;
        provider
            .offers(&tern_cloud::Region::new(region.as_str()))
            .await
    });
    let offers = offers
        .with_context(|| format!("asking GCP for the offers of {region} in project {project}"))?;
    let live = offers.iter().filter(|o| o.observed_at.is_some()).count();
    let source = format!(
        "live: GCP {region} ({} offers, {live} priced by the Cloud Billing Catalog, the rest by the bundled catalog)",
        offers.len()
    );
    Ok((
        tern_pricing::Catalog {
            offers,
            sources: Vec::new(),
        },
        source,
    ))
}

#[cfg(not(feature = "gcp"))]
fn live(_: &Args) -> anyhow::Result<(tern_pricing::Catalog, String)> {
    anyhow::bail!(
        "this tern was built without GCP support; build it with `cargo install --path . --features gcp` for --live"
    )
}

/// One output row: a shape in a zone, with whatever capacity types passed the filters.
#[derive(Debug, Serialize)]
struct Row<'a> {
    cloud: Cloud,
    region: &'a str,
    zone: &'a str,
    instance_type: &'a str,
    accelerator: Option<&'a Accelerator>,
    vcpus: f64,
    memory_gib: f64,
    on_demand_per_hour: Option<f64>,
    spot_per_hour: Option<f64>,
    on_demand_per_accelerator_hour: Option<f64>,
    spot_per_accelerator_hour: Option<f64>,
    on_demand_breakdown: Option<&'a [PriceComponent]>,
    spot_breakdown: Option<&'a [PriceComponent]>,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    rows: usize,
    matching_rows: usize,
    catalog: String,
    offers: Vec<Row<'a>>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (catalog, source) = if args.live {
        live(&args)?
    } else {
        (args.catalog.load()?, args.catalog.describe())
    };
    let capacity = match (args.spot, args.on_demand) {
        (true, _) => Some(Capacity::Spot),
        (_, true) => Some(Capacity::OnDemand),
        _ => None,
    };
    let query = OfferQuery {
        accelerator: args.accelerator.clone(),
        cloud: args.cloud,
        region: args.region.clone(),
        capacity,
        min_vcpus: args.min_vcpus,
        min_memory_gib: args.min_memory,
        max_price: args.max_price,
    }
    .resolve(&catalog)?;
    let rows = side_by_side(&query.select(&catalog));
    let matching = rows.len();
    let shown: Vec<Row<'_>> = if args.limit == 0 {
        rows
    } else {
        rows.into_iter().take(args.limit).collect()
    };

    if args.json {
        return print_json_line(&Report {
            rows: shown.len(),
            matching_rows: matching,
            catalog: source,
            offers: shown,
        });
    }
    if shown.is_empty() {
        say_err!("no offers match these filters ({source})");
        return Ok(());
    }
    say!("{}", offers_table(&shown));
    // The prices' source as the JSON gives it: `--live` says so, the catalogs say which.
    let source = if args.live {
        source
    } else {
        format!("the {source}")
    };
    say!(
        "{} of {} rows, cheapest first; prices from {source}.",
        shown.len(),
        matching
    );
    Ok(())
}

fn offers_table(shown: &[Row<'_>]) -> comfy_table::Table {
    let mut t = table(&[
        "CLOUD",
        "REGION",
        "ZONE",
        "INSTANCE TYPE",
        "ACCELERATORS",
        "vCPUs",
        "MEM GiB",
        "ON-DEMAND $/h",
        "SPOT $/h",
        "OD $/acc-h",
        "SPOT $/acc-h",
    ]);
    for r in shown {
        t.add_row(vec![
            r.cloud.to_string(),
            r.region.to_owned(),
            r.zone.to_owned(),
            r.instance_type.to_owned(),
            r.accelerator.map_or("-".into(), ToString::to_string),
            format!("{}", r.vcpus),
            format!("{}", r.memory_gib),
            money(r.on_demand_per_hour),
            money(r.spot_per_hour),
            money(r.on_demand_per_accelerator_hour),
            money(r.spot_per_accelerator_hour),
        ]);
    }
    for i in 5..11 {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    t
}

/// Group sorted offers into rows by (cloud, zone, shape), keeping the order of each row's
/// cheapest offer, so the listing stays sorted by price.
fn side_by_side<'a>(offers: &[&'a Offer]) -> Vec<Row<'a>> {
    // GCP sells one N1 host type bare and with each GPU model: the accelerators are part of
    // the row's identity, or a V100 price lands on the bare host's row.
    type Key<'k> = (Cloud, &'k str, &'k str, Option<(&'k str, u32)>);
    let mut index: std::collections::HashMap<Key<'a>, usize> = Default::default();
    let mut rows: Vec<Row<'a>> = Vec::new();
    for &offer in offers {
        let key = (
            offer.cloud,
            offer.zone.as_str(),
            offer.instance_type.name.as_str(),
            offer.accelerator().map(|a| (a.name.as_str(), a.count)),
        );
        let i = *index.entry(key).or_insert_with(|| {
            rows.push(Row {
                cloud: offer.cloud,
                region: offer.region.as_str(),
                zone: offer.zone.as_str(),
                instance_type: offer.instance_type.name.as_str(),
                accelerator: offer.accelerator(),
                vcpus: offer.instance_type.vcpus,
                memory_gib: offer.instance_type.memory_gib,
                on_demand_per_hour: None,
                spot_per_hour: None,
                on_demand_per_accelerator_hour: None,
                spot_per_accelerator_hour: None,
                on_demand_breakdown: None,
                spot_breakdown: None,
            });
            rows.len() - 1
        });
        let row = &mut rows[i];
        match offer.capacity {
            Capacity::Spot => {
                row.spot_per_hour = Some(offer.price_per_hour);
                row.spot_per_accelerator_hour = offer.price_per_accelerator_hour();
                row.spot_breakdown = Some(&offer.breakdown);
            }
            Capacity::OnDemand | Capacity::Reserved => {
                row.on_demand_per_hour = Some(offer.price_per_hour);
                row.on_demand_per_accelerator_hour = offer.price_per_accelerator_hour();
                row.on_demand_breakdown = Some(&offer.breakdown);
            }
        }
    }
    rows
}
