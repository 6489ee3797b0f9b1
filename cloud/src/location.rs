use std::fmt;

use serde::{Deserialize, Serialize};

/// A cloud tern can buy capacity from. `Sim` is the simulated cloud, a product feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cloud {
    Aws,
    Gcp,
    Sim,
}

impl Cloud {
    pub const ALL: [Cloud; 3] = [Cloud::Aws, Cloud::Gcp, Cloud::Sim];

    pub fn as_str(self) -> &'static str {
        match self {
            Cloud::Aws => "aws",
            Cloud::Gcp => "gcp",
            Cloud::Sim => "sim",
        }
    }
}

impl fmt::Display for Cloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Cloud {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "aws" => Ok(Cloud::Aws),
            "gcp" => Ok(Cloud::Gcp),
            "sim" => Ok(Cloud::Sim),
            other => Err(format!(
                "unknown cloud '{other}' (expected aws, gcp or sim)"
            )),
        }
    }
}

macro_rules! name_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            pub fn new(s: impl Into<String>) -> Self {
                Self(s.into())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }
    };
}

name_type!(
    /// A cloud region, e.g. `us-east-1` or `us-central1`.
    Region
);
name_type!(
    /// A zone. On AWS this is the AZ **ID** (`use1-az4`), which is the same for every account;
    /// providers map it to the account's AZ name when they call the API.
    Zone
);
