//! Manifest layer, test support: a validator for the subset of JSON Schema (draft 2020-12)
//! that `manifest.schema.json` uses: `type`, `const`, `enum`, `minimum`, `maximum`,
//! `properties`, `required`, `additionalProperties`, `items`, `minItems`, `maxItems`, and
//! `$ref` into the root's `$defs`. Any other keyword panics, so that nothing in the schema
//! goes unchecked.

use serde_json::Value;

/// Keywords that only annotate.
pub const ANNOTATIONS: [&str; 4] = ["$schema", "title", "description", "$defs"];
/// Keywords the validator checks.
pub const ASSERTIONS: [&str; 12] = [
    "$ref",
    "type",
    "const",
    "enum",
    "minimum",
    "maximum",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
];

/// Validates instances against `root`, whose `$ref`s point into its own `$defs`.
pub struct Validator<'a> {
    /// The schema, whose `$defs` the references name.
    pub root: &'a Value,
}

impl Validator<'_> {
    /// Every violation of `schema` by `v` (at JSON pointer `at`).
    pub fn errors(&self, schema: &Value, v: &Value, at: &str) -> Vec<String> {
        let mut errs = Vec::new();
        self.check(schema, v, at, &mut errs);
        errs
    }

    fn check(&self, schema: &Value, v: &Value, at: &str, errs: &mut Vec<String>) {
        let s = schema.as_object().expect("a schema is an object");
        let mut fail = |why: String| errs.push(format!("{at}: {why}"));
        for (key, arg) in s {
            match key.as_str() {
                k if ANNOTATIONS.contains(&k) => {}
                // Applicators, below: they recurse, so they take `errs` themselves.
                "$ref" | "items" | "properties" | "additionalProperties" => {}
                "type" => {
                    let types: Vec<&str> = match arg {
                        Value::String(t) => vec![t],
                        Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap()).collect(),
                        _ => panic!("bad type {arg}"),
                    };
                    if !types.iter().any(|t| has_type(v, t)) {
                        fail(format!("{v} is not of type {arg}"));
                    }
                }
                "const" => {
                    if v != arg {
                        fail(format!("{v} is not {arg}"));
                    }
                }
                "enum" => {
                    if !arg.as_array().unwrap().contains(v) {
                        fail(format!("{v} is not one of {arg}"));
                    }
                }
                "minimum" | "maximum" => {
                    // Only numbers have bounds.
                    let beyond = match (v.as_f64(), arg.as_f64()) {
                        (Some(x), Some(b)) => {
                            if key == "minimum" {
                                x < b
                            } else {
                                x > b
                            }
                        }
                        _ => false,
                    };
                    if beyond {
                        fail(format!("{v} is beyond the {key} {arg}"));
                    }
                }
                "minItems" | "maxItems" => {
                    if let (Some(items), Some(n)) = (v.as_array(), arg.as_u64()) {
                        let (len, n) = (items.len() as u64, n);
                        if (key == "minItems" && len < n) || (key == "maxItems" && len > n) {
                            fail(format!("{len} items, {key} is {n}"));
                        }
                    }
                }
                "required" => {
                    if let Some(o) = v.as_object() {
                        for name in arg.as_array().unwrap() {
                            let name = name.as_str().unwrap();
                            if !o.contains_key(name) {
                                fail(format!("missing required property `{name}`"));
                            }
                        }
                    }
                }
                k => panic!("the validator does not know keyword `{k}`"),
            }
        }
        if let Some(reference) = s.get("$ref") {
            let target = self.resolve(reference.as_str().expect("$ref is a string"));
            self.check(target, v, at, errs);
        }
        if let (Some(item), Some(items)) = (s.get("items"), v.as_array()) {
            for (i, x) in items.iter().enumerate() {
                self.check(item, x, &format!("{at}/{i}"), errs);
            }
        }
        self.check_properties(s, v, at, errs);
    }

    /// `properties` and `additionalProperties`, which read each other.
    fn check_properties(
        &self,
        s: &serde_json::Map<String, Value>,
        v: &Value,
        at: &str,
        errs: &mut Vec<String>,
    ) {
        let Some(o) = v.as_object() else { return };
        let empty = serde_json::Map::new();
        let props = s
            .get("properties")
            .map_or(&empty, |p| p.as_object().unwrap());
        for (name, value) in o {
            let here = format!("{at}/{name}");
            match (props.get(name), s.get("additionalProperties")) {
                (Some(p), _) => self.check(p, value, &here, errs),
                (None, Some(Value::Bool(false))) => {
                    errs.push(format!("{at}: unknown property `{name}`"))
                }
                (None, Some(extra @ Value::Object(_))) => self.check(extra, value, &here, errs),
                (None, _) => {}
            }
        }
    }

    /// The schema a `#/$defs/NAME` reference names.
    fn resolve(&self, reference: &str) -> &Value {
        let name = reference
            .strip_prefix("#/$defs/")
            .unwrap_or_else(|| panic!("only #/$defs/ references: {reference}"));
        self.root["$defs"]
            .get(name)
            .unwrap_or_else(|| panic!("no $defs/{name}"))
    }
}

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|x| x.fract() == 0.0),
        _ => panic!("unknown type {t}"),
    }
}
