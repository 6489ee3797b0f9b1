//! A real moto server per test, and real SDK clients pointed at it.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_ec2::types::RequestLaunchTemplateData;
use tern_aws::{AwsConfig, AwsProvider};
use tern_cloud::{Capacity, IdempotencyKey, IntentId, LaunchRequest, Offer, Tags, tag};

pub const REGION: &str = "us-east-1";
pub const TEMPLATE: &str = "tern-test";
pub const OWNER: &str = "tern-test-owner";

/// `moto_server` on a free local port; killed (by its pid) when dropped.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    pub url: String,
}

impl Moto {
    pub fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server must be on PATH (scripts/setup --test installs it)");
        let moto = Moto {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not start in 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

fn credentials() -> Credentials {
    Credentials::new("testing", "testing", None, None, "tern-tests")
}

pub fn ec2_client(url: &str) -> aws_sdk_ec2::Client {
    let conf = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .endpoint_url(url)
        .credentials_provider(credentials())
        .build();
    aws_sdk_ec2::Client::from_conf(conf)
}

pub fn sqs_client(url: &str) -> aws_sdk_sqs::Client {
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new(REGION))
        .endpoint_url(url)
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing",
            "testing",
            None,
            None,
            "tern-tests",
        ))
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}

/// A Service Quotas client built as `AwsProvider::connect` builds it: from one shared
/// `SdkConfig` whose endpoint is moto's.
pub fn quotas_client(url: &str) -> aws_sdk_servicequotas::Client {
    let shared = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(REGION))
        .endpoint_url(url)
        .credentials_provider(
            aws_sdk_servicequotas::config::SharedCredentialsProvider::new(credentials()),
        )
        .build();
    aws_sdk_servicequotas::Client::new(&shared)
}

pub fn config() -> AwsConfig {
    AwsConfig {
        instance_types: vec!["p4d.24xlarge".into(), "g4dn.xlarge".into()],
        launch_template: Some(TEMPLATE.into()),
        owner: Some(OWNER.into()),
        ..AwsConfig::new(REGION)
    }
}

pub fn provider(moto: &Moto, config: AwsConfig) -> AwsProvider {
    AwsProvider::from_clients(config, ec2_client(&moto.url), Some(sqs_client(&moto.url))).unwrap()
}

/// The launch template every launch names (moto needs an image id in it).
pub async fn create_template(ec2: &aws_sdk_ec2::Client) {
    let images = ec2.describe_images().send().await.unwrap();
    let image = images.images()[0].image_id().unwrap().to_owned();
    ec2.create_launch_template()
        .launch_template_name(TEMPLATE)
        .launch_template_data(RequestLaunchTemplateData::builder().image_id(image).build())
        .send()
        .await
        .unwrap();
}

pub fn owner_tags(intent: IntentId, job: &str) -> Tags {
    [
        (tag::OWNER.to_owned(), OWNER.to_owned()),
        (tag::INTENT.to_owned(), intent.to_string()),
        (tag::JOB.to_owned(), job.to_owned()),
    ]
    .into()
}

pub fn request(offers: Vec<Offer>, count: u32, intent: u128) -> LaunchRequest {
    let intent = IntentId::from_uuid(uuid::Uuid::from_u128(intent));
    LaunchRequest {
        key: IdempotencyKey::derive(intent, 0),
        intent,
        job: "job-1".into(),
        offers,
        count,
        min_count: 1,
        single_zone: false,
        tags: owner_tags(intent, "job-1"),
        template: None,
        disk_gb: None,
    }
}

pub fn pick(offers: &[Offer], instance_type: &str, capacity: Capacity) -> Vec<Offer> {
    offers
        .iter()
        .filter(|o| o.instance_type.name == instance_type && o.capacity == capacity)
        .cloned()
        .collect()
}

/// Log lines written while the returned guard lives (on this thread: `#[tokio::test]` runs on
/// one thread).
pub fn capture_logs() -> (Arc<Mutex<Vec<u8>>>, tracing::subscriber::DefaultGuard) {
    let buf: Arc<Mutex<Vec<u8>>> = Arc::default();
    let sink = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || LogSink(sink.clone()))
        .finish();
    (buf, tracing::subscriber::set_default(subscriber))
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
