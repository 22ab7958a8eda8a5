use dlock::distributed_lock;

#[distributed_lock(key = "goods:<id>")]
async fn buy(id: u64) -> u32 {
    7
}

fn main() {}
