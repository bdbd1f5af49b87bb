//! Schedules that once violated an invariant, replayed as they were shrunk
//! (a seed alone would not do: the schedule a seed draws changes whenever
//! the simulation gains a step or a rule). Each file under `regressions/`
//! is what a failing run printed after "save as a regression:": a comment,
//! the build, the proxies, the seed of the fault mixes, the configuration's
//! version, the clock's start and the tables' slots (the first regressions
//! have none of these three: version 1, `EPOCH_MS`, 16), and the steps in
//! their `Debug` form.

use std::path::Path;

use host_tests::wasm_host::Fault;

use host_tests::wasm_host::EPOCH_MS;

use crate::schedule::Step;
use crate::world::{Kind, Schedule};

/// One saved schedule.
pub struct Regression {
    pub name: String,
    pub schedule: Schedule,
}

/// Every file under `regressions/`, in name order.
pub fn all() -> Vec<Regression> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sim/regressions");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files.iter().map(|f| read(f)).collect()
}

/// The schedule saved in `file`.
pub fn read(file: &Path) -> Regression {
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    parse(&name, &std::fs::read_to_string(file).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The text a failing run prints for `schedule`.
pub fn text(schedule: &Schedule) -> String {
    let Schedule { kind, proxies, seed, version, start_ms, slots, steps } = schedule;
    let steps: String = steps.iter().map(|s| format!("  {s:?}\n")).collect();
    format!(
        "kind: {kind:?}\nproxies: {proxies}\nseed: {seed}\nconfig: {version}\nstart: {start_ms}\nslots: {slots}\nsteps:\n{steps}"
    )
}

fn parse(name: &str, text: &str) -> Result<Regression, String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).peekable();
    let mut fields = std::collections::BTreeMap::new();
    while let Some(line) = lines.next_if(|l| !l.starts_with("steps")) {
        let (key, value) = line.split_once(':').ok_or(format!("a field expected: {line}"))?;
        fields.insert(key.trim().to_string(), value.trim().to_string());
    }
    lines.next().ok_or("no steps")?;
    let field = |key: &str| fields.get(key).ok_or(format!("no {key}"));
    let number = |key: &str, default: u64| -> Result<u64, String> {
        fields.get(key).map_or(Ok(default), |v| v.parse().map_err(|e| format!("{key}: {e}")))
    };
    let kind = match field("kind")?.as_str() {
        "Webdis" => Kind::Webdis,
        "Redis" => Kind::Redis,
        other => return Err(format!("unknown kind {other}")),
    };
    let proxies = field("proxies")?.parse().map_err(|e| format!("proxies: {e}"))?;
    let seed = field("seed")?.parse().map_err(|e| format!("seed: {e}"))?;
    let mut steps: Vec<Step> = lines.map(step).collect::<Result<_, _>>()?;
    // The first regressions' requests have no ids: their order is.
    for (k, id) in
        steps.iter_mut().filter_map(|s| if let Step::Begin { id, .. } = s { Some(id) } else { None }).enumerate()
    {
        if *id == NO_ID {
            *id = k;
        }
    }
    let schedule = Schedule {
        kind,
        proxies,
        seed,
        version: number("config", 1)? as u32,
        start_ms: number("start", EPOCH_MS)?,
        slots: number("slots", 16)? as usize,
        steps,
    };
    Ok(Regression { name: name.to_string(), schedule })
}

/// A `Begin` read without an id (assigned from its order).
const NO_ID: usize = usize::MAX;

/// The number after `key: ` in `line`.
fn num(line: &str, key: &str) -> Result<u64, String> {
    let at = line.find(&format!(" {key}: ")).ok_or(format!("no {key} in {line}"))? + key.len() + 3;
    let digits: String = line[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().map_err(|e| format!("{key} in {line}: {e}"))
}

/// The number in `Name(n)`.
fn arg(line: &str) -> Result<u64, String> {
    let inner = line.split_once('(').and_then(|(_, r)| r.strip_suffix(')')).ok_or(format!("bad step {line}"))?;
    inner.parse().map_err(|e| format!("{line}: {e}"))
}

fn step(line: &str) -> Result<Step, String> {
    let name: String = line.chars().take_while(char::is_ascii_alphabetic).collect();
    let n = |key: &str| num(line, key).map(|v| v as usize);
    Ok(match name.as_str() {
        "Begin" => Step::Begin {
            id: n("id").unwrap_or(NO_ID),
            proxy: n("proxy")?,
            vm: n("vm")?,
            rule: n("rule")?,
            user: n("user")?,
            n: num(line, "n").unwrap_or(0),
            choices: num(line, "choices").unwrap_or(1),
            trailers: line.contains("trailers: true"),
        },
        "Deliver" => Step::Deliver,
        "End" | "EndNth" if line.contains(" nth: ") => Step::EndNth {
            nth: n("nth")?,
            hang_up: line.contains("hang_up: true"),
            usage: num(line, "usage").unwrap_or(1),
        },
        "End" => Step::End {
            stream: n("stream")?,
            hang_up: line.contains("hang_up: true"),
            usage: num(line, "usage")?,
            cut: num(line, "cut")?,
            shape: num(line, "shape")?,
        },
        "Advance" => Step::Advance(arg(line)?),
        "Back" => Step::Back(arg(line)?),
        "StoreBack" => Step::StoreBack(arg(line)?),
        "Flush" => Step::Flush,
        "Reload" => Step::Reload { proxy: n("proxy")?, vm: n("vm")? },
        "Faults" => Step::Faults { proxy: n("proxy")?, mix: mix(line)? },
        _ => return Err(format!("unknown step {line}")),
    })
}

/// `mix: [(4, Pass), (3, Delay(30)), (1, Error("ERR simulated"))]`.
fn mix(line: &str) -> Result<Vec<(u32, Fault)>, String> {
    let list = line.split_once("mix: [").and_then(|(_, r)| r.rsplit_once(']')).map(|(l, _)| l).ok_or("no mix")?;
    let mut out = Vec::new();
    for entry in list.split("), (").map(|e| e.trim_matches(|c| c == '(' || c == ')')) {
        if entry.is_empty() {
            continue;
        }
        let (weight, fault) = entry.split_once(", ").ok_or(format!("bad mix entry {entry}"))?;
        let weight = weight.parse().map_err(|e| format!("{entry}: {e}"))?;
        let fault = match fault {
            "Pass" => Fault::Pass,
            "Drop" => Fault::Drop,
            "Timeout" => Fault::Timeout,
            "ConnectFailure" => Fault::ConnectFailure,
            "Twice" => Fault::Twice,
            "Reset" => Fault::Reset,
            f if f.starts_with("Delay(") => Fault::Delay(arg(&format!("{f})"))?),
            f if f.starts_with("Error(\"") => {
                Fault::Error(f.trim_start_matches("Error(\"").trim_end_matches('"').into())
            }
            f => return Err(format!("unknown fault {f}")),
        };
        out.push((weight, fault));
    }
    Ok(out)
}
