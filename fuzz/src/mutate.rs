//! Input mutation: byte- and token-level for text, tree-level for JSON. A small xorshift
//! generator keeps runs reproducible from `--seed` without another dependency.

use serde_json::{Map, Value};

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Bytes worth trying anywhere: boundaries of ASCII, UTF-8 lead bytes, separators.
const INTERESTING_BYTES: &[u8] = b"\x00\x01\x7f\x80\xc3\xff \t\n/*,-%.:0123456789aZ\\\"{}[]";

/// Inputs longer than this are cut: the engine's inputs come from objects the API server
/// caps at 1.5 MiB, and the driver's job is variety, not size.
pub const MAX_LEN: usize = 64 * 1024;

pub fn mutate_text(rng: &mut Rng, input: &[u8], dictionary: &[&str], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(out.len() + 1);
        match rng.below(9) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = *rng.pick(INTERESTING_BYTES);
            }
            1 => out.insert(at, *rng.pick(INTERESTING_BYTES)),
            2 if !out.is_empty() => {
                let end = (at + 1 + rng.below(8)).min(out.len());
                out.drain(at.min(end)..end);
            }
            3 | 4 if !dictionary.is_empty() => {
                let token = rng.pick(dictionary).as_bytes();
                out.splice(at..at, token.iter().copied());
            }
            5 if !dictionary.is_empty() && !out.is_empty() => {
                let end = (at + 1 + rng.below(4)).min(out.len());
                let token = rng.pick(dictionary).as_bytes();
                out.splice(at.min(end)..end, token.iter().copied());
            }
            6 if !corpus.is_empty() => {
                let other = rng.pick(corpus);
                let from = rng.below(other.len() + 1);
                out.truncate(at);
                out.extend_from_slice(&other[from..]);
            }
            7 if !out.is_empty() => {
                // Repeat a slice many times: huge names, thousands of terms, deep nesting.
                let start = rng.below(out.len());
                let end = (start + 1 + rng.below(6)).min(out.len());
                let piece = out[start..end].to_vec();
                let times = *rng.pick(&[2usize, 10, 100, 1000, 5000]);
                for _ in 0..times {
                    out.splice(end..end, piece.iter().copied());
                }
            }
            _ => out.insert(at, rng.below(256) as u8),
        }
    }
    out.truncate(MAX_LEN);
    out
}

pub fn mutate_json(rng: &mut Rng, input: &[u8], dictionary: &[&str], corpus: &[Vec<u8>]) -> Vec<u8> {
    let Ok(mut doc) = serde_json::from_slice::<Value>(input) else {
        return mutate_text(rng, input, dictionary, corpus);
    };
    if rng.chance(10) {
        // Sometimes break the syntax itself.
        return mutate_text(rng, input, dictionary, corpus);
    }
    for _ in 0..=rng.below(3) {
        let count = count_nodes(&doc);
        let target = rng.below(count);
        let mut seen = 0;
        mutate_node(rng, &mut doc, target, &mut seen, dictionary);
    }
    let mut out = serde_json::to_vec(&doc).unwrap_or_else(|_| input.to_vec());
    out.truncate(MAX_LEN);
    out
}

fn count_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count_nodes).sum(),
        Value::Object(o) => o.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// Mutates the `target`-th node in pre-order; returns true once done.
fn mutate_node(rng: &mut Rng, v: &mut Value, target: usize, seen: &mut usize, dictionary: &[&str]) -> bool {
    if *seen == target {
        mutate_here(rng, v, dictionary);
        return true;
    }
    *seen += 1;
    match v {
        Value::Array(a) => a.iter_mut().any(|c| mutate_node(rng, c, target, seen, dictionary)),
        Value::Object(o) => o.values_mut().any(|c| mutate_node(rng, c, target, seen, dictionary)),
        _ => false,
    }
}

fn random_scalar(rng: &mut Rng, dictionary: &[&str]) -> Value {
    match rng.below(8) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(2)),
        2 => Value::from(*rng.pick(&[0i64, 1, -1, 100, 2_147_483_647, -2_147_483_648, i64::MAX, i64::MIN])),
        3 => Value::from(1.5),
        4 => Value::Array(Vec::new()),
        5 => Value::Object(Map::new()),
        _ => Value::String(rng.pick(dictionary).to_string()),
    }
}

fn mutate_here(rng: &mut Rng, v: &mut Value, dictionary: &[&str]) {
    match v {
        Value::String(s) if rng.chance(2) => {
            let bytes = mutate_text(rng, s.as_bytes(), dictionary, &[]);
            *s = String::from_utf8_lossy(&bytes).into_owned();
        }
        Value::Array(a) if !a.is_empty() && rng.chance(2) => {
            let i = rng.below(a.len());
            match rng.below(3) {
                0 => {
                    a.remove(i);
                }
                1 => {
                    let copy = a[i].clone();
                    let times = *rng.pick(&[1usize, 10, 1000, 3000]);
                    a.extend(std::iter::repeat_n(copy, times));
                }
                _ => {
                    let j = rng.below(a.len());
                    a.swap(i, j);
                }
            }
        }
        Value::Object(o) if !o.is_empty() && rng.chance(2) => {
            let keys: Vec<String> = o.keys().cloned().collect();
            let key = rng.pick(&keys).clone();
            match rng.below(3) {
                0 => {
                    o.remove(&key);
                }
                1 => {
                    // Many keys: selectors with thousands of labels.
                    let value = o[&key].clone();
                    for n in 0..*rng.pick(&[1usize, 100, 2000]) {
                        o.insert(format!("{key}{n}"), value.clone());
                    }
                }
                _ => {
                    let new_key = rng.pick(dictionary).to_string();
                    o.insert(new_key, random_scalar(rng, dictionary));
                }
            }
        }
        _ => *v = random_scalar(rng, dictionary),
    }
}
