//! `dlock inspect <name>`.

use dlock_core::LockClient;

use crate::error::CliError;
use crate::report::{print_json, LockView};

pub async fn run(client: &LockClient, name: &str, json: bool) -> Result<(), CliError> {
    let view = LockView::from(&client.lock(name).inspect().await?);
    if json {
        print_json(&view)
    } else {
        print!("{}", view.text());
        Ok(())
    }
}
