;; Test plugin for the memory cap: a core module implementing the operator world
;; with nothing but empty answers, that declares 100 funcref tables of 2^20
;; elements each. Table elements live in host memory, outside every linear
;; memory: 100 x 2^20 x 8 bytes is 800 MiB of host memory unless the host counts
;; tables against the cap. build.mjs adds the tables and `$fill`, which writes
;; all of them (the `TABLES` line), and turns the module into a component of the
;; operator world.
(module
  (memory (export "memory") 1)
  ;; A bump allocator for the host's lowering of arguments.
  (global $heap (mut i32) (i32.const 1024))
  (func (export "cabi_realloc") (param $old i32) (param $old_len i32) (param $align i32) (param $len i32) (result i32)
    (local $at i32)
    (local.set $at
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $at) (local.get $len)))
    (block $fits
      (br_if $fits (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
      (drop (memory.grow
        (i32.add (i32.shr_u (i32.sub (global.get $heap) (i32.mul (memory.size) (i32.const 65536))) (i32.const 16))
                 (i32.const 1)))))
    (local.get $at))
  ;; Every export answers `ok` with empty contents: a zeroed return area at 0..32.
  (func $ok (result i32)
    (memory.fill (i32.const 0) (i32.const 0) (i32.const 32))
    (i32.const 0))
  ;; `init` writes every element of every table, so the host really holds them.
  (elem declare func $ok)
  (func (export "init") (param i32 i32) (result i32) (call $fill) (call $ok))
  (func (export "process") (param i32 i32 i32 i32 i32 i32) (result i32) (call $ok))
  (func (export "on-watermark") (param i64) (result i32) (call $ok))
  (func (export "snapshot") (param i32) (result i32) (call $ok))
  (func (export "restore") (param i32 i32 i32 i32) (result i32) (call $ok))
  (func (export "restored") (param i64) (result i32) (call $ok))
  ;; TABLES
)
