//! Manifest layer, test support: the schema, validating against it, the manifest `emit
//! --all` writes, edits of it, and the values an `enum` allows, for manifest_schema.rs and
//! manifest_schema_sm90a.rs.

#![allow(dead_code)] // each test file uses its own part

use std::collections::BTreeSet;

use flash_codegen::manifest::{self, sm90a};
use flash_codegen::{KernelSpec, Tuning};
use serde_json::Value;

use crate::schema_validator::Validator;

pub fn schema() -> Value {
    serde_json::from_str(manifest::SCHEMA).expect("the schema is JSON")
}

/// The errors of validating `m` against the schema.
pub fn validate(m: &Value) -> Vec<String> {
    let root = schema();
    Validator { root: &root }.errors(&root, m, "")
}

/// The manifest of every kernel (what `emit --all` writes), as JSON.
pub fn every_kernel() -> Value {
    let m = manifest::manifest_with_sm90a(&KernelSpec::all(), &sm90a::shipping(), &Tuning::NONE);
    serde_json::from_str(&m.to_json()).unwrap()
}

/// `m` with the value at `pointer` replaced by `value`, or removed when `None`.
pub fn edited(m: &Value, pointer: &str, value: Option<Value>) -> Value {
    let mut m = m.clone();
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    match (m.pointer_mut(parent).unwrap(), value) {
        (Value::Object(o), Some(v)) => drop(o.insert(key.to_string(), v)),
        (Value::Object(o), None) => drop(o.remove(key).expect("the field exists")),
        (Value::Array(a), Some(v)) => a[key.parse::<usize>().unwrap()] = v,
        (Value::Array(a), None) => drop(a.remove(key.parse().unwrap())),
        (other, _) => panic!("{parent} is {other}"),
    }
    m
}

/// Each edit of `good` fails validation with exactly one error containing its message:
/// the fields at `missing` removed, those at `wrong` given the value beside them.
pub fn each_edit_fails_once(good: &Value, missing: &[(&str, &str)], wrong: &[(&str, Value, &str)]) {
    let cases = (missing.iter().map(|&(at, want)| (at, None, want))).chain(
        wrong
            .iter()
            .map(|(at, v, want)| (*at, Some(v.clone()), *want)),
    );
    for (at, value, want) in cases {
        let errs = validate(&edited(good, at, value.clone()));
        assert!(
            errs.len() == 1 && errs[0].contains(want),
            "{at} = {value:?}: want `{want}`, got {errs:#?}"
        );
    }
}

/// The set of values the schema allows at `pointer` (an `enum` or a `const`).
pub fn allowed(pointer: &str) -> BTreeSet<String> {
    let s = schema();
    let at = s.pointer(pointer).unwrap_or_else(|| panic!("no {pointer}"));
    let values = match (at.get("enum"), at.get("const")) {
        (Some(Value::Array(v)), _) => v.clone(),
        (_, Some(c)) => vec![c.clone()],
        _ => panic!("{pointer} has no enum"),
    };
    values.iter().map(Value::to_string).collect()
}

/// How each of `values` serializes, as JSON text.
pub fn serialized<T: serde::Serialize>(values: impl IntoIterator<Item = T>) -> BTreeSet<String> {
    values
        .into_iter()
        .map(|v| serde_json::to_string(&v).unwrap())
        .collect()
}
