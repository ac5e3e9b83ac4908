//! Test plugin: an operator built against `weir:operator@1.0.0`, one major version
//! ahead of the host. It has the same shape and passes records through, but imports
//! `weir:operator/log@1.0.0` and `weir:operator/types@1.0.0`: a host must refuse it.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ world: "operator", path: "wit" });

    use weir::operator::log::{Level, log};

    struct PassThrough;

    impl Guest for PassThrough {
        fn init(_config: Vec<(String, String)>) -> Result<(), String> {
            // Calling the import keeps it, and with it the 1.0.0 version, in the component.
            log(
                Level::Info,
                "bad-newer-major: built against weir:operator@1.0.0",
            );
            Ok(())
        }

        fn process(batch: Batch) -> Result<Batch, String> {
            Ok(batch)
        }

        fn on_watermark(_watermark: i64) -> Result<Batch, String> {
            Ok(Batch {
                data: Vec::new(),
                entries: Vec::new(),
                headers: Vec::new(),
            })
        }

        fn snapshot() -> Result<Vec<u8>, String> {
            Ok(Vec::new())
        }

        fn restore(_state: Vec<u8>) -> Result<(), String> {
            Ok(())
        }
    }

    export!(PassThrough);
}
