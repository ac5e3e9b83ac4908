//! Test plugin: a valid component of another world (`weir-test:greeter`), which
//! exports `greet` and none of the operator functions. A host must refuse to load it.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ world: "greeter", path: "wit" });

    struct Greeter;

    impl Guest for Greeter {
        fn greet(name: String) -> String {
            format!("hello, {name}")
        }
    }

    export!(Greeter);
}
