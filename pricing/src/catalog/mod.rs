//! SkyPilot v8 catalog import. Both layouts are read by the same code path: the header decides.
//!
//! Errors are strict and precise (file, line, column, what was expected): a catalog with a bad
//! row is rejected whole rather than silently thinned, since a missing offer changes plans.

mod aws;
mod gcp;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use tern_cloud::input::{Limit, ReadError, read_capped, read_to_limit};
use tern_cloud::name::check_label;
use tern_cloud::{Accelerator, Offer};

pub use gcp::gcp_host_for;

/// Which SkyPilot layout a file uses, told apart by the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch`
    Aws,
    /// `InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice`
    Gcp,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("{file}: cannot read: {source}")]
    Io {
        file: String,
        #[source]
        source: ReadError,
    },
    #[error("{file}: not a SkyPilot v8 catalog: {reason}")]
    Layout { file: String, reason: String },
    #[error("{file}:{line}: column {column} ({name}): {reason}")]
    Field {
        file: String,
        line: u64,
        column: usize,
        name: String,
        reason: String,
    },
    #[error("{file}:{line}: {reason}")]
    Row {
        file: String,
        line: u64,
        reason: String,
    },
}

impl CatalogError {
    /// The line the error is on, when it is about a line.
    pub fn line(&self) -> Option<u64> {
        match self {
            CatalogError::Field { line, .. } | CatalogError::Row { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// A set of offers from one or more catalog files.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub offers: Vec<Offer>,
    /// Rows read per source file, for reporting.
    pub sources: Vec<(String, Layout, usize)>,
}

impl Catalog {
    /// Read a catalog file; `.gz` files are decompressed.
    pub fn load(path: &Path) -> Result<Catalog, CatalogError> {
        let name = path.display().to_string();
        let mut bytes = read_capped(path, Limit::CATALOG).map_err(|source| CatalogError::Io {
            file: name.clone(),
            source,
        })?;
        if path.extension().is_some_and(|e| e == "gz") {
            bytes = gunzip(&bytes, &name)?;
        }
        Catalog::parse(&bytes, &name)
    }

    /// Parse catalog text. `file` names the source in error messages. Never panics.
    pub fn parse(bytes: &[u8], file: &str) -> Result<Catalog, CatalogError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(false)
            .from_reader(bytes);
        let header = reader
            .headers()
            .map_err(|e| csv_error(file, e))?
            .iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
        let layout = detect_layout(&header).map_err(|reason| CatalogError::Layout {
            file: file.to_owned(),
            reason,
        })?;
        let cols = Columns::new(file, &header, layout);
        let (offers, rows) = match layout {
            Layout::Aws => aws::parse(&mut reader, &cols)?,
            Layout::Gcp => gcp::parse(&mut reader, &cols)?,
        };
        if rows == 0 {
            return Err(CatalogError::Layout {
                file: file.to_owned(),
                reason: "the file has a header but no rows".into(),
            });
        }
        Ok(Catalog {
            offers,
            sources: vec![(file.to_owned(), layout, rows)],
        })
    }

    /// Append another catalog's offers (e.g. AWS + GCP).
    pub fn merge(&mut self, other: Catalog) {
        self.offers.extend(other.offers);
        self.sources.extend(other.sources);
    }

    /// Every accelerator name in the catalog, sorted.
    pub fn accelerator_names(&self) -> BTreeSet<&str> {
        self.offers
            .iter()
            .filter_map(Offer::accelerator)
            .map(|a: &Accelerator| a.name.as_str())
            .collect()
    }
}

fn detect_layout(header: &[String]) -> Result<Layout, String> {
    const AWS: [&str; 10] = [
        "InstanceType",
        "AcceleratorName",
        "AcceleratorCount",
        "vCPUs",
        "MemoryGiB",
        "GpuInfo",
        "Price",
        "SpotPrice",
        "Region",
        "AvailabilityZone",
    ];
    let has = |c: &str| header.iter().any(|h| h == c);
    let missing: Vec<&str> = AWS.iter().copied().filter(|c| !has(c)).collect();
    if !missing.is_empty() {
        return Err(format!(
            "header lacks column(s) {} (found: {})",
            missing.join(", "),
            header.join(",")
        ));
    }
    // The two layouts share their column names; SkyPilot's AWS files have `Arch` and put the
    // accelerator columns second, GCP files put vCPUs second.
    if has("Arch") || header.get(1).is_some_and(|h| h == "AcceleratorName") {
        Ok(Layout::Aws)
    } else {
        Ok(Layout::Gcp)
    }
}

/// Column positions plus the context needed to report a bad field.
pub(crate) struct Columns<'a> {
    file: &'a str,
    header: &'a [String],
    pub instance_type: usize,
    pub acc_name: usize,
    pub acc_count: usize,
    pub vcpus: usize,
    pub memory: usize,
    pub gpu_info: usize,
    pub price: usize,
    pub spot: usize,
    pub region: usize,
    pub zone: usize,
}

impl<'a> Columns<'a> {
    fn new(file: &'a str, header: &'a [String], _layout: Layout) -> Self {
        // detect_layout checked that every column exists.
        let at = |c: &str| header.iter().position(|h| h == c).unwrap_or(usize::MAX);
        Self {
            file,
            header,
            instance_type: at("InstanceType"),
            acc_name: at("AcceleratorName"),
            acc_count: at("AcceleratorCount"),
            vcpus: at("vCPUs"),
            memory: at("MemoryGiB"),
            gpu_info: at("GpuInfo"),
            price: at("Price"),
            spot: at("SpotPrice"),
            region: at("Region"),
            zone: at("AvailabilityZone"),
        }
    }

    pub fn field_error(&self, line: u64, column: usize, reason: String) -> CatalogError {
        CatalogError::Field {
            file: self.file.to_owned(),
            line,
            column: column + 1,
            name: self.header.get(column).cloned().unwrap_or_default(),
            reason,
        }
    }

    pub fn csv_error(&self, e: csv::Error) -> CatalogError {
        csv_error(self.file, e)
    }
}

/// The rows seen so far, by what they describe (instance type, accelerator, zone): a second
/// row for the same thing must repeat the first exactly, or the file is rejected naming both
/// lines (keeping either one silently would change prices).
#[derive(Default)]
pub(crate) struct Seen(HashMap<Vec<String>, (u64, Vec<String>)>);

impl Seen {
    pub fn check(&mut self, row: &Row<'_, '_>) -> Result<(), CatalogError> {
        let c = row.cols;
        let key: Vec<String> = [c.instance_type, c.acc_name, c.acc_count, c.region, c.zone]
            .iter()
            .map(|&i| row.text(i).to_owned())
            .collect();
        let all: Vec<String> = row.record.iter().map(|f| f.trim().to_owned()).collect();
        match self.0.get(&key) {
            None => {
                self.0.insert(key, (row.line, all));
                Ok(())
            }
            Some((_, first)) if *first == all => Ok(()),
            Some((first_line, first)) => {
                let differ: Vec<&str> = first
                    .iter()
                    .zip(&all)
                    .enumerate()
                    .filter(|(_, (a, b))| a != b)
                    .filter_map(|(i, _)| c.header.get(i).map(String::as_str))
                    .collect();
                Err(CatalogError::Row {
                    file: c.file.to_owned(),
                    line: row.line,
                    reason: format!(
                        "repeats the instance type, accelerator and zone of line {first_line} \
                         with different {}; keep one row",
                        differ.join(", ")
                    ),
                })
            }
        }
    }
}

/// One parsed row with typed accessors that report the exact field on failure.
pub(crate) struct Row<'r, 'c> {
    pub record: &'r csv::StringRecord,
    pub cols: &'c Columns<'c>,
    pub line: u64,
}

impl Row<'_, '_> {
    pub fn text(&self, column: usize) -> &str {
        self.record.get(column).unwrap_or("").trim()
    }

    /// Refuse control characters and overlong values in the name columns.
    pub fn check_labels(&self) -> Result<(), CatalogError> {
        let c = self.cols;
        for column in [c.instance_type, c.acc_name, c.region, c.zone] {
            let t = self.text(column);
            if !t.is_empty() {
                check_label(t).map_err(|found| {
                    c.field_error(
                        self.line,
                        column,
                        format!("expected a name without control characters, found {found}"),
                    )
                })?;
            }
        }
        Ok(())
    }

    pub fn required_text(&self, column: usize) -> Result<&str, CatalogError> {
        let t = self.text(column);
        if t.is_empty() {
            Err(self.cols.field_error(
                self.line,
                column,
                "expected a value, found an empty field".into(),
            ))
        } else {
            Ok(t)
        }
    }

    /// A price in USD/h: empty means "not offered"; otherwise a finite number ≥ 0.
    pub fn price(&self, column: usize) -> Result<Option<f64>, CatalogError> {
        let t = self.text(column);
        if t.is_empty() {
            return Ok(None);
        }
        match t.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
            Ok(_) => Err(self.cols.field_error(
                self.line,
                column,
                format!("expected a non-negative price in USD/h, found '{t}'"),
            )),
            Err(_) => Err(self.cols.field_error(
                self.line,
                column,
                format!("expected a price in USD/h (a number), found '{t}'"),
            )),
        }
    }

    /// A non-negative quantity (vCPUs, GiB); empty is `None`.
    pub fn quantity(&self, column: usize) -> Result<Option<f64>, CatalogError> {
        let t = self.text(column);
        if t.is_empty() {
            return Ok(None);
        }
        match t.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
            _ => Err(self.cols.field_error(
                self.line,
                column,
                format!("expected a non-negative number, found '{t}'"),
            )),
        }
    }

    /// An accelerator count: a whole number ≥ 1 (`8`, `8.0`), or empty.
    pub fn count(&self, column: usize) -> Result<Option<u32>, CatalogError> {
        let t = self.text(column);
        if t.is_empty() {
            return Ok(None);
        }
        match t.parse::<f64>() {
            Ok(v) if v >= 1.0 && v.fract() == 0.0 && v <= f64::from(u16::MAX) => Ok(Some(v as u32)),
            _ => Err(self.cols.field_error(
                self.line,
                column,
                format!("expected a whole accelerator count ≥ 1, found '{t}'"),
            )),
        }
    }

    /// Memory per accelerator from SkyPilot's `GpuInfo` (`'SizeInMiB': 16384`), if present.
    pub fn accelerator_memory_gib(&self) -> Option<f64> {
        let info = self.text(self.cols.gpu_info);
        let at = info.find("SizeInMiB")?;
        let digits: String = info[at + "SizeInMiB".len()..]
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse::<f64>().ok().map(|mib| mib / 1024.0)
    }
}

/// Decompress a gzip stream, at most [`Limit::CATALOG`] of output (a gzip bomb stops there);
/// errors name `file`.
pub(crate) fn gunzip(bytes: &[u8], file: &str) -> Result<Vec<u8>, CatalogError> {
    gunzip_within(bytes, file, Limit::CATALOG)
}

fn gunzip_within(bytes: &[u8], file: &str, limit: Limit) -> Result<Vec<u8>, CatalogError> {
    read_to_limit(flate2::read::GzDecoder::new(bytes), limit).map_err(|source| CatalogError::Io {
        file: file.to_owned(),
        source,
    })
}

fn csv_error(file: &str, e: csv::Error) -> CatalogError {
    let line = e.position().map(|p| p.line()).unwrap_or(0);
    let reason = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("expected {expected_len} fields, found {len}"),
        csv::ErrorKind::Utf8 { err, .. } => {
            return CatalogError::Field {
                file: file.to_owned(),
                line,
                column: err.field() + 1,
                name: String::new(),
                reason: "the field is not valid UTF-8".into(),
            };
        }
        csv::ErrorKind::Io(io) => format!("read error: {io}"),
        _ => e.to_string(),
    };
    CatalogError::Row {
        file: file.to_owned(),
        line,
        reason,
    }
}

#[cfg(test)]
mod tests;
