//! `rules[].cost.prices`: a cost read from the response body priced per
//! model, so one budget can be money across models of different prices.
//!
//! `{"model": "<request body path>", "per": N, "models": {"<name>":
//! {"<usage path>": weight, ...}, ...}, "default": {...}}`: a response costs
//! ceil(Σ weight × value / per) of the budget (see `usage::Weighing`), at
//! the price of the model its request body names; a model without a price
//! takes `default`, or is refused (400 `model_not_priced`) without one.

use std::sync::Arc;

use super::error::ConfigError;
use super::json::{Obj, Result};
use super::request_body::BodyPath;
use crate::json::Value;
use crate::usage::{BodyFormat, UsageFields, Weighing, MAX_PATHS};

/// The largest weight (either sign): 10^12, exact in the i128 sum.
const MAX_WEIGHT: i64 = 1_000_000_000_000;
/// At most this many models, and bytes in a model's name.
const MAX_MODELS: usize = 256;
const MAX_MODEL_NAME: usize = 128;

/// One model's price, per body format (their usage paths may differ).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Price {
    /// For a JSON body's paths.
    pub json: Weighing,
    /// For an event stream's paths.
    pub event_stream: Weighing,
}

impl Price {
    /// The weighing of a body of `format`.
    pub fn of(&self, format: BodyFormat) -> Weighing {
        match format {
            BodyFormat::Json => self.json,
            BodyFormat::EventStream => self.event_stream,
        }
    }

    /// The most `units` units of usage can cost at this price.
    pub fn most(&self, units: u64) -> u64 {
        self.json.most(units).max(self.event_stream.most(units))
    }
}

/// A rule's price table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prices {
    /// Where the request body names the model.
    pub model: BodyPath,
    /// Prices by model name (bytes, as the body's field reads).
    pub models: Vec<(Vec<u8>, Arc<Price>)>,
    /// The price of a model not in `models`.
    pub default: Option<Arc<Price>>,
}

impl Prices {
    /// The price of model `name`.
    pub fn of(&self, name: &[u8]) -> Option<&Arc<Price>> {
        self.models.iter().find(|(m, _)| m == name).map(|(_, p)| p).or(self.default.as_ref())
    }

    /// A text that differs whenever the prices do: SHA-256 of the model
    /// path, each model's name and every weight (little-endian), in hex.
    pub fn fingerprint_text(&self) -> String {
        let mut bytes = self.model.to_string().into_bytes();
        let default = self.default.as_ref().map(|p| (&b""[..], p));
        for (name, p) in self.models.iter().map(|(n, p)| (&n[..], p)).chain(default) {
            bytes.push(0);
            bytes.extend_from_slice(name);
            for w in p.json.weights.iter().chain(&p.event_stream.weights) {
                bytes.extend_from_slice(&w.to_le_bytes());
            }
            bytes.extend_from_slice(&p.json.per.to_le_bytes());
        }
        let digits: [u8; 64] = crate::digest::hex(&crate::digest::sha256(&bytes));
        digits.iter().map(|&d| char::from(d)).collect()
    }
}

/// The index of path `text` in `fields`.
fn index_of(fields: &UsageFields, text: &str) -> Option<usize> {
    let keys: Vec<&str> = text.split('.').collect();
    (0..fields.len()).find(|&i| {
        fields.depth(i) == keys.len()
            && keys.iter().enumerate().all(|(k, key)| fields.segment(i, k) == Some(key.as_bytes()))
    })
}

/// One model's weights object.
fn price(v: &Value, path: &str, json: Option<&UsageFields>, events: Option<&UsageFields>, per: u64) -> Result<Price> {
    let members = v
        .as_object()
        .ok_or_else(|| ConfigError::at(path, "must be an object of usage field paths and integer weights"))?;
    let mut p = Price {
        json: Weighing { weights: [0; MAX_PATHS], per },
        event_stream: Weighing { weights: [0; MAX_PATHS], per },
    };
    for (field, weight) in members {
        let wpath = super::json::child(path, field);
        let w = weight
            .as_i64()
            .filter(|w| (-MAX_WEIGHT..=MAX_WEIGHT).contains(w))
            .ok_or_else(|| ConfigError::at(&wpath, format!("must be an integer from -{MAX_WEIGHT} to {MAX_WEIGHT}")))?;
        let (in_json, in_events) = (json.and_then(|f| index_of(f, field)), events.and_then(|f| index_of(f, field)));
        if in_json.is_none() && in_events.is_none() {
            return Err(ConfigError::at(&wpath, "is not one of the cost's response_body fields"));
        }
        if let Some(i) = in_json {
            p.json.weights[i] = w;
        }
        if let Some(i) = in_events {
            p.event_stream.weights[i] = w;
        }
    }
    Ok(p)
}

/// Parses `cost.prices` for a cost reading `json` and `events` fields.
pub fn parse(v: &Value, path: &str, json: Option<&UsageFields>, events: Option<&UsageFields>) -> Result<Prices> {
    let o = Obj::new(v, path, &["model", "per", "models", "default"])?;
    let model_text = o.required_str("model")?;
    let model = BodyPath::parse(model_text).map_err(|e| ConfigError::at(&o.path_of("model"), e))?;
    let per = o.uint("per", 1, 1_000_000_000)?.unwrap_or(1);
    let mpath = o.path_of("models");
    let table = o
        .value("models")
        .ok_or_else(|| ConfigError::at(&mpath, "is required: each model's weights"))?
        .as_object()
        .ok_or_else(|| ConfigError::at(&mpath, "must be an object of model names and their weights"))?;
    if table.is_empty() || table.len() > MAX_MODELS {
        return Err(ConfigError::at(&mpath, format!("must price 1 to {MAX_MODELS} models")));
    }
    let mut models = Vec::with_capacity(table.len());
    for (name, weights) in table {
        let npath = super::json::child(&mpath, name);
        if name.is_empty() || name.len() > MAX_MODEL_NAME {
            return Err(ConfigError::at(&npath, format!("a model's name must be 1 to {MAX_MODEL_NAME} bytes")));
        }
        models.push((name.as_bytes().to_vec(), Arc::new(price(weights, &npath, json, events, per)?)));
    }
    let default =
        o.value("default").map(|d| price(d, &o.path_of("default"), json, events, per)).transpose()?.map(Arc::new);
    Ok(Prices { model, models, default })
}
