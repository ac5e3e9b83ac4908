//! Test plugin for the filesystem sandbox: `init` opens `/etc/passwd`. Under a
//! sandbox without preopened directories that fails, and `init` returns the OS
//! error as its `Err` string (no trap). Were the file readable, `init` would
//! succeed and the plugin pass records through: a test asserts that `init` fails.

use weir_guest::{Config, Emitter, Error, Operator, Records};

pub struct File;

/// The file a plugin should never see.
const PATH: &str = "/etc/passwd";

impl Operator for File {
    type State = ();

    fn init(_: &Config) -> Result<(Self, ()), Error> {
        match std::fs::File::open(PATH) {
            Err(error) => Err(Error::new(format!("bad-file: cannot open {PATH}: {error}"))),
            Ok(_) => {
                weir_guest::warn!("bad-file: opened {PATH}: the sandbox grants filesystem access");
                Ok((File, ()))
            }
        }
    }

    fn process(
        &mut self,
        _: &mut (),
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            out.forward(&record);
        }
        Ok(())
    }
}

weir_guest::export_operator!(File);
