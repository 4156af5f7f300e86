#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The serde that generated types get from `object!`, `closed_object!` and
//! `one_of!`: what they read, what they refuse, and what they write.

use idem_runtime::codec::strictly;
use serde_json::json;

idem_runtime::object! {
    /// Field names that are also the names the expansion uses inside.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Awkward {
        #[json("type")]
        pub r#type: String,
        #[json("map", optional)]
        pub map: Option<i64>,
        #[json("key", optional, non_null)]
        pub key: Option<String>,
        #[json("value-with-dash", optional)]
        pub value: Option<Vec<Inner>>,
        #[json("deserializer", optional)]
        #[deprecated]
        pub deserializer: Option<bool>,
    }
}

idem_runtime::closed_object! {
    #[derive(Debug, Clone, PartialEq, Default)]
    pub struct Inner {
        #[json("n", optional)]
        pub n: Option<u32>,
    }
}

idem_runtime::object! {
    #[derive(Debug, Clone, PartialEq)]
    pub struct Empty {}
}

idem_runtime::one_of! {
    #[derive(Debug, Clone, PartialEq)]
    pub enum Either {
        Inner(Box<Inner>),
        Text(String),
        Many(
            Vec<i64>,
        ),
    }
}

fn read<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
    // Through text, as a client reads a response, and through a value, as
    // a one-of reads its variants: both must agree.
    let text = serde_json::from_str::<T>(&value.to_string()).map_err(|e| e.to_string());
    let tree = serde_json::from_value::<T>(value).map_err(|e| e.to_string());
    assert_eq!(
        text.is_ok(),
        tree.is_ok(),
        "{:?} vs {:?}",
        text.err(),
        tree.err()
    );
    text
}

#[test]
#[allow(deprecated, reason = "the field is deprecated on purpose")]
fn objects_read_and_write_their_properties() {
    let full = json!({
        "type": "card",
        "map": 3,
        "key": "k",
        "value-with-dash": [{"n": 1}, {}],
        "deserializer": true,
        "unnamed": {"ignored": [1, 2]},
    });
    let read_back: Awkward = read(full).unwrap();
    assert_eq!(
        read_back,
        Awkward {
            r#type: "card".into(),
            map: Some(3),
            key: Some("k".into()),
            value: Some(vec![Inner { n: Some(1) }, Inner::default()]),
            deserializer: Some(true),
        }
    );
    // Written back: named properties only, and `None` left out.
    let written = serde_json::to_value(&read_back).unwrap();
    assert_eq!(
        written,
        json!({"type": "card", "map": 3, "key": "k", "value-with-dash": [{"n": 1}, {}], "deserializer": true})
    );
    let sparse = Awkward {
        r#type: "x".into(),
        map: None,
        key: None,
        value: None,
        deserializer: None,
    };
    assert_eq!(serde_json::to_value(&sparse).unwrap(), json!({"type": "x"}));
    // Absent and `null` optional properties are `None`.
    let read_back: Awkward = read(json!({"type": "x", "map": null})).unwrap();
    assert_eq!(read_back, sparse);
    assert_eq!(read::<Empty>(json!({"a": 1})).unwrap(), Empty {});
    assert_eq!(serde_json::to_string(&Empty {}).unwrap(), "{}");
}

#[test]
fn objects_refuse_what_the_schema_does_not_allow() {
    let missing = read::<Awkward>(json!({"map": 1})).unwrap_err();
    assert!(missing.contains("missing field `type`"), "{missing}");
    let twice = serde_json::from_str::<Awkward>(r#"{"type": "a", "type": "b"}"#).unwrap_err();
    assert!(
        twice.to_string().contains("duplicate field `type`"),
        "{twice}"
    );
    let wrong = read::<Awkward>(json!({"type": 5})).unwrap_err();
    assert!(wrong.contains("invalid type: integer `5`"), "{wrong}");
    let array = read::<Awkward>(json!(["card"])).unwrap_err();
    assert!(array.contains("expected an object (Awkward)"), "{array}");
    // A closed object names what it accepts.
    let closed = read::<Inner>(json!({"n": 1, "m": 2})).unwrap_err();
    assert!(
        closed.contains("unknown field `m`, expected `n`"),
        "{closed}"
    );
    // `non_null`: `null` is `None` for a client, refused by a server.
    let with_null = json!({"type": "a", "key": null});
    assert_eq!(read::<Awkward>(with_null.clone()).unwrap().key, None);
    let strict = strictly(|| serde_json::from_value::<Awkward>(with_null)).unwrap_err();
    assert!(
        strict.to_string().contains("invalid type: null"),
        "{strict}"
    );
    assert!(strictly(|| read::<Awkward>(json!({"type": "a", "map": null}))).is_ok());
}

#[test]
fn one_of_reads_the_first_variant_that_fits_and_writes_the_value() {
    assert_eq!(
        read::<Either>(json!({"n": 2})).unwrap(),
        Either::Inner(Box::new(Inner { n: Some(2) }))
    );
    assert_eq!(
        read::<Either>(json!("id")).unwrap(),
        Either::Text("id".into())
    );
    assert_eq!(
        read::<Either>(json!([1, 2])).unwrap(),
        Either::Many(vec![1, 2])
    );
    // The closed `Inner` refuses `m`, and nothing else fits an object.
    let none = read::<Either>(json!({"m": 1})).unwrap_err();
    assert!(none.contains("matches no variant"), "{none}");
    assert_eq!(
        serde_json::to_value(Either::Text("t".into())).unwrap(),
        json!("t")
    );
    assert_eq!(
        serde_json::to_value(Either::Inner(Box::default())).unwrap(),
        json!({})
    );
}
