//! Test plugin for the network sandbox: `init` connects to 127.0.0.1:9 and returns
//! the OS error as its `Err` string (no trap). The sandbox refuses before any packet
//! leaves; a granted network would answer "connection refused" instead, or let
//! `init` succeed if something listens there.

use std::net::TcpStream;
use std::time::Duration;

use weir_guest::{Config, Emitter, Error, Operator, Records};

pub struct Socket;

/// Loopback only: a test plugin never reaches past this machine.
const ADDRESS: &str = "127.0.0.1:9";

impl Operator for Socket {
    type State = ();

    fn init(_: &Config) -> Result<(Self, ()), Error> {
        let address = ADDRESS.parse().expect("a literal socket address");
        match TcpStream::connect_timeout(&address, Duration::from_millis(200)) {
            Err(error) => Err(Error::new(format!(
                "bad-socket: cannot connect to {ADDRESS}: {error}"
            ))),
            Ok(_) => {
                weir_guest::warn!(
                    "bad-socket: connected to {ADDRESS}: the sandbox grants network access"
                );
                Ok((Socket, ()))
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

weir_guest::export_operator!(Socket);
