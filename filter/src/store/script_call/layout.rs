//! The call's layout has one description: the `-- @keys`, `-- @argv` and
//! `-- @reply` lines at the top of `lua/driver.lua`. These tests read them
//! and check `ScriptCall::new` and `ScriptCall::decode` against them: each
//! argument the encoder writes is read back by its name in the layout and
//! compared with what the decisions asked; a layout and an encoder that
//! disagree (an order, a field, a count) fail.

use std::collections::BTreeMap;

use super::{ScriptCall, ScriptReply, ERROR_TEXT};
use crate::algorithm::Algorithm;
use crate::outcome::LimitOutcome;
use crate::spec::{DecisionCall, LimitCall, LimitSpec, Mark, Op, MAX_DECISIONS, MAX_LIMITS};
use crate::time::Instant;
use wasm_bindgen_test::wasm_bindgen_test;

const DRIVER: &str = include_str!("../../../../lua/driver.lua");

/// What follows `-- @<tag>` in the driver.
fn layout(tag: &str) -> Result<&'static str, String> {
    let head = format!("-- @{tag} ");
    DRIVER
        .lines()
        .find_map(|l| l.strip_prefix(head.as_str()))
        .map(str::trim)
        .ok_or(format!("lua/driver.lua has no {head:?} line"))
}

/// One element of `@argv`: an argument, or a count's repetitions.
#[derive(Debug)]
enum Item {
    Field(String),
    Repeat(String, Vec<Item>),
}

/// `now S S*(code limit) …` as items.
fn items(text: &str) -> Result<Vec<Item>, String> {
    let spaced = text.replace('(', " ( ").replace(')', " ) ").replace('*', " * ");
    let mut tokens = spaced.split_whitespace().peekable();
    let list = items_of(&mut tokens)?;
    match tokens.next() {
        None => Ok(list),
        Some(t) => Err(format!("@argv: unexpected {t:?}")),
    }
}

fn items_of<'a>(tokens: &mut std::iter::Peekable<impl Iterator<Item = &'a str>>) -> Result<Vec<Item>, String> {
    let mut out = Vec::new();
    while let Some(&t) = tokens.peek() {
        if t == ")" {
            break;
        }
        tokens.next();
        if tokens.peek() == Some(&"*") {
            tokens.next();
            if tokens.next() != Some("(") {
                return Err(format!("@argv: {t}* must be followed by ("));
            }
            let inner = items_of(tokens)?;
            if tokens.next() != Some(")") {
                return Err(format!("@argv: {t}*( is not closed"));
            }
            out.push(Item::Repeat(t.to_string(), inner));
        } else if t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push(Item::Field(t.to_string()));
        } else {
            return Err(format!("@argv: unexpected {t:?}"));
        }
    }
    Ok(out)
}

/// Arguments read by their names in the layout.
#[derive(Debug, Default)]
struct Record {
    fields: BTreeMap<String, String>,
    groups: BTreeMap<String, Vec<Record>>,
}

impl Record {
    fn field(&self, name: &str) -> Result<&str, String> {
        self.fields.get(name).map(String::as_str).ok_or(format!("the layout names no {name:?} here"))
    }

    fn number(&self, name: &str) -> Result<u64, String> {
        let text = self.field(name)?;
        text.parse().map_err(|_| format!("{name} = {text:?} is no number"))
    }

    fn group(&self, count: &str) -> Result<&[Record], String> {
        self.groups.get(count).map(Vec::as_slice).ok_or(format!("the layout repeats nothing {count} times here"))
    }
}

/// Reads `args` as `items` say; a name in capitals is a count.
fn read(items: &[Item], args: &mut std::slice::Iter<'_, String>) -> Result<Record, String> {
    let mut record = Record::default();
    for item in items {
        match item {
            Item::Field(name) => {
                let arg = args.next().ok_or(format!("ARGV ends before {name}"))?;
                record.fields.insert(name.clone(), arg.clone());
            }
            Item::Repeat(count, inner) => {
                if !count.chars().all(|c| c.is_ascii_uppercase()) {
                    return Err(format!("{count}*(…): a count is a name in capitals"));
                }
                let n = record.number(count).map_err(|e| format!("{count} before its repetitions: {e}"))?;
                let group = (0..n).map(|_| read(inner, args)).collect::<Result<Vec<_>, _>>()?;
                record.groups.insert(count.clone(), group);
            }
        }
    }
    Ok(record)
}

/// Why `call` (made by `ScriptCall::new` at `now` from `decisions`) does
/// not say what the layout says it must, if it does not.
fn disagreement(argv_layout: &str, call: &ScriptCall, now: u64, decisions: &[DecisionCall<'_>]) -> Result<(), String> {
    let mut args = call.args.iter();
    let argv = read(&items(argv_layout)?, &mut args)?;
    if let Some(extra) = args.next() {
        return Err(format!("ARGV goes on past the layout: {extra:?}"));
    }
    if argv.number("now")? != now {
        return Err(format!("now is {}, not {now}", argv.field("now")?));
    }
    let (specs, shapes, picks) = (argv.group("S")?, argv.group("H")?, argv.group("D")?);
    if picks.len() != decisions.len() {
        return Err(format!("{} decisions sent, {} asked", picks.len(), decisions.len()));
    }
    for (d, (pick, decision)) in picks.iter().zip(decisions).enumerate() {
        let limits = nth("shapes", shapes, pick.number("shape")?)?.group("L")?;
        if limits.len() != decision.limits.len() {
            return Err(format!("decision {d}: {} limits sent, {} asked", limits.len(), decision.limits.len()));
        }
        for (sent, asked) in limits.iter().zip(decision.limits) {
            let spec = nth("specs", specs, sent.number("spec")?)?;
            let want = [
                (spec.field("code")?, asked.spec.algorithm.code().to_string()),
                (spec.field("limit")?, asked.spec.limit.to_string()),
                (spec.field("window_ms")?, asked.spec.window_ms.to_string()),
                (spec.field("burst")?, asked.spec.burst.to_string()),
                (sent.field("op")?, asked.op.code().to_string()),
                (sent.field("amount")?, asked.op.amount().to_string()),
                (sent.field("offset")?, offset(asked)),
            ];
            if let Some((got, want)) = want.iter().find(|(got, want)| got != want) {
                return Err(format!("decision {d}, rule {}: sent {got:?} where {want:?} was asked", asked.rule));
            }
        }
    }
    Ok(())
}

/// What the offset argument of `l` says: a refund's mark, or its offset.
fn offset(l: &LimitCall<'_>) -> String {
    match l.op.mark() {
        Some(m) => format!("{}:{}", m.born_ms, m.count),
        None => l.offset_ms.unwrap_or(0).to_string(),
    }
}

/// Entry `index` (1-based) of `list`.
fn nth<'r>(what: &str, list: &'r [Record], index: u64) -> Result<&'r Record, String> {
    let i = usize::try_from(index).ok().and_then(|i| i.checked_sub(1));
    i.and_then(|i| list.get(i)).ok_or(format!("{index} is no 1-based index into the {what}"))
}

/// The keys of each algorithm, from `@keys`.
fn keys_per_limit() -> Result<BTreeMap<String, usize>, String> {
    let (_, list) = layout("keys")?.split_once(':').ok_or("@keys: no ':'")?;
    list.split(',')
        .map(|entry| match entry.split_whitespace().collect::<Vec<_>>()[..] {
            [code, n] => n.parse().map(|n| (code.to_string(), n)).map_err(|_| format!("@keys: {entry:?}")),
            _ => Err(format!("@keys: {entry:?}")),
        })
        .collect()
}

/// The names of each limit's values in the reply, from `@reply`.
fn reply_names() -> Result<Vec<&'static str>, String> {
    let (_, names) = layout("reply")?.split_once(':').ok_or("@reply: no ':'")?;
    Ok(names.split_whitespace().collect())
}

fn spec(algorithm: Algorithm, limit: u64, window_ms: u64, burst: u64) -> LimitSpec {
    LimitSpec { algorithm, limit, window_ms, burst }
}

/// A batch: its `now`, and each decision's identity and limits.
type Batch = (u64, Vec<(&'static str, Vec<LimitCall<'static>>)>);

/// Batches that use every part of the layout: every algorithm, every op,
/// an offset, shared specs and shapes, one decision alone.
fn batches() -> Vec<Batch> {
    let minute = spec(Algorithm::SlidingWindow, 100, 60_000, 100);
    let day = spec(Algorithm::FixedWindow, 10_000, 86_400_000, 10_000);
    let bucket = spec(Algorithm::TokenBucket, 3, 1000, 5);
    let log = spec(Algorithm::SlidingLog, 7, 5000, 7);
    let gcra = spec(Algorithm::Gcra, 9, 2000, 2);
    let l = |rule, spec, op, offset_ms| LimitCall { rule, spec, op, offset_ms };
    let request = vec![
        l("api", minute, Op::Use(1), None),
        l("api", day, Op::Check(3), Some(86_399_999)),
        l("gen", log, Op::Use(2), None),
        l("gen", gcra, Op::Use(1), None),
        l("tok", bucket, Op::Reserve(2), None),
    ];
    let mark = Some(Mark { born_ms: 1_699_999_999_000, count: 77 });
    let charge = vec![
        l("tok", bucket, Op::Charge(40), None),
        l("tok", day, Op::Charge(5), None),
        l("tok", bucket, Op::Refund { amount: 3, at: Instant::from_ms(1_699_999_999_500), mark }, None),
        l("tok", day, Op::Refund { amount: 3, at: Instant::from_ms(1_699_999_999_500), mark: None }, Some(7)),
    ];
    vec![
        (1_700_000_000_123, vec![("a", request.clone()), ("b", charge.clone()), ("c", request.clone())]),
        (42, vec![("x~_", vec![l("r", bucket, Op::Use(3), None)])]),
        (
            1_700_000_000_000,
            (0..20).map(|i| (["p", "q"][i % 2], if i % 3 == 0 { charge.clone() } else { request.clone() })).collect(),
        ),
    ]
}

#[test]
#[wasm_bindgen_test]
fn the_encoder_writes_argv_as_the_driver_lays_it_out() {
    let argv = layout("argv").unwrap();
    for (now, batch) in batches() {
        let decisions: Vec<DecisionCall> =
            batch.iter().map(|(identity, limits)| DecisionCall { identity, limits }).collect();
        let call = ScriptCall::new("rl", Instant::from_ms(now), &decisions);
        disagreement(argv, &call, now, &decisions).unwrap_or_else(|e| panic!("{e}\nargs: {:?}", call.args));
    }
}

#[test]
#[wasm_bindgen_test]
fn a_layout_the_encoder_does_not_follow_is_told() {
    let (now, batch) = batches().remove(0);
    let decisions: Vec<DecisionCall> =
        batch.iter().map(|(identity, limits)| DecisionCall { identity, limits }).collect();
    let call = ScriptCall::new("rl", Instant::from_ms(now), &decisions);
    let argv = layout("argv").unwrap();
    let wrong = [
        argv.replace("limit window_ms", "window_ms limit"),
        argv.replace("op amount", "amount op"),
        argv.replace(" D D*(shape)", ""),
        argv.replace("burst", "burst extra"),
        argv.replace("H H*(", "H*("),
    ];
    for layout in wrong {
        assert_ne!(layout, argv);
        assert!(disagreement(&layout, &call, now, &decisions).is_err(), "{layout}");
    }
}

#[test]
#[wasm_bindgen_test]
fn keys_come_per_limit_in_order_as_many_as_the_layout_says() {
    let per = keys_per_limit().unwrap();
    assert_eq!(per.len(), Algorithm::ALL.len());
    for (now, batch) in batches() {
        let decisions: Vec<DecisionCall> =
            batch.iter().map(|(identity, limits)| DecisionCall { identity, limits }).collect();
        let call = ScriptCall::new("rl", Instant::from_ms(now), &decisions);
        let mut keys = call.keys.iter();
        for d in &decisions {
            for l in d.limits {
                let n = per[l.spec.algorithm.code()];
                let tag = format!("rl:{{{}}}:{}:", d.identity, l.rule);
                for _ in 0..n {
                    let key = keys.next().unwrap_or_else(|| panic!("keys end before {tag}"));
                    assert!(key.starts_with(&tag), "{key} is not one of {tag}");
                }
            }
        }
        assert_eq!(keys.next(), None);
    }
}

#[test]
#[wasm_bindgen_test]
fn the_decoder_reads_each_value_by_its_name_in_the_layout() {
    let names = reply_names().unwrap();
    let minute = [LimitCall {
        rule: "r",
        spec: spec(Algorithm::SlidingWindow, 100, 60_000, 100),
        op: Op::Use(1),
        offset_ms: None,
    }];
    let call = ScriptCall::new("rl", Instant::from_ms(5), &[DecisionCall { identity: "a", limits: &minute }]);
    assert_eq!(call.reply_len(), names.len());
    for (value, expected) in [
        (
            [("allowed", 1), ("remaining", 7), ("reset_ms", 30_000), ("retry_after_ms", 0)],
            LimitOutcome { allowed: true, remaining: 7, reset_ms: 30_000, retry_after_ms: Some(0), overridden: None },
        ),
        (
            [("allowed", 0), ("remaining", 3), ("reset_ms", 50_000), ("retry_after_ms", 20_000)],
            LimitOutcome {
                allowed: false,
                remaining: 3,
                reset_ms: 50_000,
                retry_after_ms: Some(20_000),
                overridden: None,
            },
        ),
    ] {
        let ints: Vec<i64> =
            names.iter().map(|n| value.iter().find(|(k, _)| k == n).map(|(_, v)| *v).unwrap()).collect();
        let decoded = call.decode(&ScriptReply::from(ints)).unwrap();
        assert_eq!(decoded, [Ok(vec![expected])]);
    }
}

#[test]
#[wasm_bindgen_test]
fn the_drivers_bounds_are_the_encoders() {
    let line = DRIVER.lines().find(|l| l.starts_with("local MAX_SPECS, MAX_DECISIONS, MAX_LIMITS = ")).unwrap();
    let values: Vec<usize> = line
        .split('=')
        .nth(1)
        .unwrap()
        .split("--")
        .next()
        .unwrap()
        .split(',')
        .map(|v| v.trim().parse().unwrap())
        .collect();
    assert_eq!(values, [MAX_LIMITS, MAX_DECISIONS, MAX_LIMITS], "{line}");
    assert!(DRIVER.lines().any(|l| l == format!("local ERROR_TEXT = {ERROR_TEXT}")));
}
