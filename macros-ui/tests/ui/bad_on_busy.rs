use dlock::{distributed_lock, LockError};

#[distributed_lock(key = "a:<id>", on_busy = "retry")]
async fn unknown_value(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "b:<id>", on_busy = skip)]
async fn not_a_string(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "c:<id>", on_busy = "skip", wait = "5s")]
async fn skip_with_wait(id: u64) -> Option<u64> {
    Some(id)
}

#[distributed_lock(key = "d:<id>", wait = "5s", on_busy = "fail")]
async fn fail_with_wait(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
