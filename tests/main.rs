//! weir's integration tests, one binary: each module is one area, and all of them run
//! against the real pieces (a Kafka broker on `WEIR_TEST_BROKERS`, components built by
//! `scripts/build-plugins`, RocksDB on disk). `scripts/test` starts the broker and
//! builds the plugins first; tests run in parallel on threads of this process, so each
//! one works in topics, groups and directories of its own, and the tests that stop or
//! kill a broker start a private one.

// A test binary has no outside users: `pub` here means "shared between test modules".
#![allow(unreachable_pub)]

mod operator_common;
mod support;

mod binaries;
mod broker_contract;
mod changelog_format;
mod checkpoint_format;
mod engine_broker_restart;
mod engine_exactly_once;
mod engine_failures;
mod engine_graph;
mod engine_joins;
mod engine_scale_out;
mod engine_segments;
mod job_file;
mod operator_c_go;
mod operator_cli;
mod operator_dedup;
mod operator_faults;
mod operator_js_sdk;
mod operator_languages;
mod operator_load;
mod operator_new;
mod operator_ports;
mod operator_py_join;
mod operator_py_sdk;
mod operator_py_total;
mod operator_state;
mod status_page;
mod store;
