use dlock::distributed_lock;

// Every mistake is reported in one compile.
#[distributed_lock(key = "goods:<idd>", lease = "forever", colour = "blue")]
fn buy(id: u64) -> u32 {
    7
}

fn main() {}
