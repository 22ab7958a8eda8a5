use dlock::distributed_lock;

/// An error type of another crate: this crate cannot give it `From<LockError>`.
pub struct StatusCode(pub u16);

#[distributed_lock(key = "goods:<id>")]
async fn buy(id: u64) -> Result<u64, StatusCode> {
    Ok(id)
}

fn main() {}
