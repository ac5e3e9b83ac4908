//! The job-graph example plugins (`plugins/router`, `plugins/enrich`,
//! `plugins/interval-join`) driven through the native Runner with the ports a job file
//! would give them: what goes to which output, what their config errors say, and that a
//! restore into a fresh instance carries on with the same output.

use enrich::Enrich;
use interval_join::OrderPayments;
use router::Router;
use weir_guest::state::StateImage;
use weir_guest::{Config, Operator, OwnedRecord, Record, Runner};

fn rec<'a>(key: &'a str, value: &'a str, ts: i64) -> Record<'a> {
    Record::new(Some(key.as_bytes()), value.as_bytes(), ts)
}

/// Each record as `(output name, value)`.
fn routed<O: Operator>(runner: &Runner<O>, out: &[OwnedRecord]) -> Vec<(String, String)> {
    out.iter()
        .map(|r| {
            let output = runner.outputs()[r.output as usize].clone();
            (output, String::from_utf8(r.value.clone()).unwrap())
        })
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn init_error<O: Operator>(config: Config) -> String {
    match Runner::<O>::init(config) {
        Ok(_) => panic!("init succeeded"),
        Err(error) => error.message().to_owned(),
    }
}

fn router(config: &[(&str, &str)], outputs: &[&str]) -> Runner<Router> {
    let config = Config::from_pairs(config.iter().copied()).with_outputs(outputs.iter().copied());
    Runner::init(config).unwrap()
}

#[test]
fn the_router_routes_by_the_fields_value_to_the_output_of_that_name() {
    let mut runner = router(&[("field", "region")], &["eu", "us", "42", "default"]);
    let input = [
        rec("a", r#"{"region":"eu","n":1}"#, 10),
        rec("b", r#"{"region":"us"}"#, 11),
        rec("c", r#"{"region":42}"#, 12),
        rec("d", r#"{"region":"asia"}"#, 13),
        rec("e", r#"{"other":1}"#, 14),
        rec("f", r#"{"region":null}"#, 15),
        rec("g", "not json", 16),
        rec("h", r#"{"region":"late"}"#, 17),
    ];
    let out = runner.process_records(&input).unwrap();
    assert_eq!(
        routed(&runner, &out),
        pairs(&[
            ("eu", r#"{"region":"eu","n":1}"#),
            ("us", r#"{"region":"us"}"#),
            ("42", r#"{"region":42}"#),
            ("default", r#"{"region":"asia"}"#),
            ("default", r#"{"other":1}"#),
            ("default", r#"{"region":null}"#),
            ("default", r#"{"region":"late"}"#),
        ])
    );
    assert_eq!(
        runner.operator().dropped().invalid,
        1,
        "no `invalid` output"
    );
    // Records pass unchanged: key and timestamp too.
    assert_eq!(
        (out[1].key.as_deref(), out[1].timestamp),
        (Some(&b"b"[..]), 11)
    );
}

#[test]
fn the_router_sends_late_records_and_invalid_values_to_their_outputs_when_it_has_them() {
    let outputs = ["eu", "other", "late", "invalid"];
    let mut runner = router(&[("field", "region"), ("default", "other")], &outputs);
    runner.on_watermark_records(100).unwrap();
    let input = [
        rec("a", r#"{"region":"eu"}"#, 100),
        rec("b", r#"{"region":"eu"}"#, 99),
        rec("c", "[1,2]", 150),
        rec("d", "{", 150),
        rec("e", r#"{"region":"invalid"}"#, 150),
        rec("f", "{", 50),
    ];
    let out = runner.process_records(&input).unwrap();
    assert_eq!(
        routed(&runner, &out),
        pairs(&[
            ("eu", r#"{"region":"eu"}"#),
            ("late", r#"{"region":"eu"}"#),
            ("invalid", "[1,2]"),
            ("invalid", "{"),
            ("other", r#"{"region":"invalid"}"#),
            ("late", "{"),
        ])
    );

    // A restored instance knows the watermark it had reached: late stays late.
    let config = Config::from_pairs([("field", "region")]).with_outputs(outputs);
    let mut restored = Runner::<Router>::init(config).unwrap();
    restored.restore_image(&StateImage::default(), 100).unwrap();
    let out = restored
        .process_records(&[rec("b", r#"{"region":"eu"}"#, 99)])
        .unwrap();
    assert_eq!(
        routed(&restored, &out),
        pairs(&[("late", r#"{"region":"eu"}"#)])
    );
}

#[test]
fn without_a_default_output_unrouted_records_are_dropped() {
    let mut runner = router(&[("field", "region")], &["eu"]);
    let out = runner
        .process_records(&[
            rec("a", r#"{"region":"us"}"#, 1),
            rec("b", r#"{"region":"eu"}"#, 2),
        ])
        .unwrap();
    assert_eq!(
        routed(&runner, &out),
        pairs(&[("eu", r#"{"region":"eu"}"#)])
    );
    assert_eq!(runner.operator().dropped().unrouted, 1);
}

#[test]
fn router_config_errors_name_the_key() {
    let outputs = ["eu", "us"];
    let error = init_error::<Router>(Config::default().with_outputs(outputs));
    assert!(
        error.starts_with("operator config `field` is missing"),
        "{error}"
    );
    let config =
        Config::from_pairs([("field", "region"), ("default", "rest")]).with_outputs(outputs);
    assert_eq!(
        init_error::<Router>(config),
        "operator config `default` = \"rest\": operator needs an output named `rest`; its \
         outputs are [eu, us]: name one `rest` in the operator's `outputs` in the job file"
    );
    let config = Config::from_pairs([("field", "region"), ("fields", "x")]);
    assert!(init_error::<Router>(config).contains("unknown key `fields`"));
}

fn enrich(config: &[(&str, &str)], outputs: &[&str]) -> Runner<Enrich> {
    let config = Config::from_pairs(config.iter().copied())
        .with_inputs(["clicks", "users"])
        .with_outputs(outputs.iter().copied());
    Runner::init(config).unwrap()
}

const CLICKS: u32 = 0;
const USERS: u32 = 1;

#[test]
fn enrich_adds_the_users_profile_or_says_there_is_none() {
    let mut runner = enrich(&[], &["enriched", "invalid"]);
    let table = [
        rec("u1", r#"{"name":"Ada","country":"uk"}"#, 0),
        rec("u2", r#"{"name":"Bob"}"#, 0),
        rec("u3", "not a profile", 0),
    ];
    assert!(
        runner
            .process_records_from(USERS, &table)
            .unwrap()
            .is_empty()
    );
    let clicks = [
        rec("u1", r#"{"user":"u1","page":"/a"}"#, 10),
        rec("u3", r#"{"user":"u3","page":"/b"}"#, 11),
        rec("u2", "oops", 12),
    ];
    let out = runner.process_records_from(CLICKS, &clicks).unwrap();
    assert_eq!(
        routed(&runner, &out),
        pairs(&[
            (
                "enriched",
                r#"{"country":"uk","matched":true,"name":"Ada","page":"/a","user":"u1"}"#
            ),
            ("enriched", r#"{"matched":false,"page":"/b","user":"u3"}"#),
            ("invalid", "oops"),
        ])
    );
    assert_eq!(
        (out[0].key.as_deref(), out[0].timestamp),
        (Some(&b"u1"[..]), 10)
    );
    assert_eq!(runner.operator().invalid_rows(), 1);

    // A tombstone removes the profile; a new row replaces it.
    runner
        .process_records_from(
            USERS,
            &[rec("u1", "", 20), rec("u2", r#"{"name":"Bo"}"#, 20)],
        )
        .unwrap();
    let clicks = [
        rec("u1", r#"{"page":"/c"}"#, 21),
        rec("u2", r#"{"page":"/d"}"#, 22),
    ];
    let out = runner.process_records_from(CLICKS, &clicks).unwrap();
    assert_eq!(
        routed(&runner, &out),
        pairs(&[
            ("enriched", r#"{"matched":false,"page":"/c"}"#),
            ("enriched", r#"{"matched":true,"name":"Bo","page":"/d"}"#),
        ])
    );
}

#[test]
fn enrich_copies_the_fields_asked_for_under_a_prefix_and_can_drop_the_unmatched() {
    let config = [
        ("fields", "name, tier"),
        ("prefix", "user_"),
        ("matched_field", "found"),
        ("unmatched", "drop"),
    ];
    let mut runner = enrich(&config, &["out"]);
    let row = rec("u1", r#"{"name":"Ada","tier":"gold","email":"a@x"}"#, 0);
    runner.process_records_from(USERS, &[row]).unwrap();
    let clicks = [
        rec("u1", r#"{"name":"click"}"#, 1),
        rec("u9", r#"{"page":"/"}"#, 2),
    ];
    let out = runner.process_records_from(CLICKS, &clicks).unwrap();
    assert_eq!(
        routed(&runner, &out),
        pairs(&[(
            "out",
            r#"{"found":true,"name":"click","user_name":"Ada","user_tier":"gold"}"#
        )])
    );
}

#[test]
fn an_enrich_restore_keeps_the_table() {
    let mut runner = enrich(&[], &["enriched"]);
    runner
        .process_records_from(
            USERS,
            &[
                rec("u1", r#"{"name":"Ada"}"#, 0),
                rec("u2", r#"{"name":"Bob"}"#, 0),
            ],
        )
        .unwrap();
    let mut image = StateImage::default();
    image.apply(&runner.changes().unwrap()).unwrap();
    runner
        .process_records_from(USERS, &[rec("u2", "", 1)])
        .unwrap();
    image.apply(&runner.changes().unwrap()).unwrap();
    assert_eq!(image.entries.len(), 1);

    let mut restored = enrich(&[], &["enriched"]);
    restored.restore_image(&image, 0).unwrap();
    let clicks = [rec("u1", "{}", 5), rec("u2", "{}", 6)];
    assert_eq!(
        restored.process_records_from(CLICKS, &clicks).unwrap(),
        runner.process_records_from(CLICKS, &clicks).unwrap()
    );
}

#[test]
fn enrich_config_errors_name_what_is_wrong() {
    let ports = |config: Config| config.with_inputs(["clicks", "users"]);
    let error = init_error::<Enrich>(Config::default().with_inputs(["clicks"]));
    assert!(
        error.starts_with("operator needs an input named `users`; its inputs are [clicks]"),
        "{error}"
    );
    let error = init_error::<Enrich>(ports(Config::from_pairs([("unmatched", "skip")])));
    assert!(
        error.starts_with("operator config `unmatched` = \"skip\" is not valid"),
        "{error}"
    );
    let error = init_error::<Enrich>(ports(Config::from_pairs([("fields", " , ")])));
    assert!(
        error.starts_with("operator config `fields` names no field"),
        "{error}"
    );
    let error = init_error::<Enrich>(ports(Config::default()).with_outputs(["invalid", "out"]));
    assert!(
        error.starts_with("the first output gets the enriched clicks"),
        "{error}"
    );
}

fn order_payments(bound: &str, outputs: &[&str]) -> Runner<OrderPayments> {
    let config = Config::from_pairs([("bound_ms", bound)])
        .with_inputs(["orders", "payments"])
        .with_outputs(outputs.iter().copied());
    Runner::init(config).unwrap()
}

const ORDERS: u32 = 0;
const PAYMENTS: u32 = 1;

#[test]
fn interval_join_pairs_each_order_with_its_payments_within_the_bound() {
    let mut runner = order_payments("1000", &["paid", "late"]);
    runner
        .process_records_from(ORDERS, &[rec("o1", r#"{"amount":30}"#, 5_000)])
        .unwrap();
    let payments = [
        rec("o1", r#"{"paid":30}"#, 5_400),
        rec("o1", "cash", 6_001),
        rec("o2", r#"{"paid":1}"#, 5_000),
    ];
    let out = runner.process_records_from(PAYMENTS, &payments).unwrap();
    assert_eq!(
        routed(&runner, &out),
        pairs(&[(
            "paid",
            r#"{"order_id":"o1","order":{"amount":30},"payment":{"paid":30},"order_time":5000,"payment_time":5400}"#
        )])
    );
    assert_eq!(
        (out[0].key.as_deref(), out[0].timestamp),
        (Some(&b"o1"[..]), 5_400)
    );

    // An order after its payment pairs with it when the bound allows; here the payment
    // at 5 000 of o2 came before the order, beyond `early_ms` = 0.
    let out = runner
        .process_records_from(ORDERS, &[rec("o2", "{}", 5_001)])
        .unwrap();
    assert!(out.is_empty());
    // A second order of o1 pairs with both payments: 300 and 901 ms after it.
    let out = runner
        .process_records_from(ORDERS, &[rec("o1", "{}", 5_100)])
        .unwrap();
    let times: Vec<i64> = out.iter().map(|r| r.timestamp).collect();
    assert_eq!(times, [5_400, 6_001]);
    assert!(String::from_utf8_lossy(&out[1].value).contains(r#""payment":"cash""#));

    // Late records go to `late` unchanged.
    runner.on_watermark_records(7_000).unwrap();
    let out = runner
        .process_records_from(PAYMENTS, &[rec("o1", "x", 6_500)])
        .unwrap();
    assert_eq!(routed(&runner, &out), pairs(&[("late", "x")]));
    assert_eq!(
        runner.state().buffered(),
        (0, 0),
        "everything evicted at 7 000"
    );
}

#[test]
fn interval_join_config_errors_name_the_key() {
    let ports = |config: Config| config.with_inputs(["orders", "payments"]);
    let error = init_error::<OrderPayments>(ports(Config::default()));
    assert!(
        error.starts_with("operator config `bound_ms` is missing"),
        "{error}"
    );
    let error = init_error::<OrderPayments>(ports(Config::from_pairs([("bound_ms", "-1")])));
    assert!(
        error.starts_with("operator config `bound_ms` = -1 is out of range"),
        "{error}"
    );
    let error = init_error::<OrderPayments>(ports(Config::from_pairs([
        ("bound_ms", "1"),
        ("early_ms", "x"),
    ])));
    assert!(
        error.starts_with("operator config `early_ms` = \"x\" is not valid"),
        "{error}"
    );
    let error = init_error::<OrderPayments>(
        Config::from_pairs([("bound_ms", "1")]).with_inputs(["orders", "payments", "refunds"]),
    );
    assert!(
        error.contains("input named `refunds` it does not read"),
        "{error}"
    );
}
