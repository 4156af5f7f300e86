//! A spec that passes the audit compiles, and the macro embeds it.

idem_macros::audited!("../fixtures/payments-clean.yaml");

#[test]
fn clean_spec_compiles_and_is_embedded() {
    let text = std::str::from_utf8(IDEM_AUDITED_SPEC).unwrap();
    assert!(text.contains("Lumapay Payouts API"));
}
