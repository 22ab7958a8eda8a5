//! dlock's scripts called directly, as its client calls them: the function library is
//! loaded once and each script is one `FCALL`, so a test can put a lock's keys in exactly
//! the state a race leaves them in and see what the next script does with it.

use dlock::admin::FunctionLibrary;

/// dlock's function library, loaded on one server.
pub struct Scripts {
    library: &'static str,
}

impl Scripts {
    /// Loads (or replaces) dlock's function library through `conn`.
    ///
    /// # Panics
    ///
    /// When Redis refuses the library.
    pub fn load(conn: &mut redis::Connection) -> Scripts {
        let library = FunctionLibrary::current();
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(library.code())
            .query::<String>(conn)
            .expect("FUNCTION LOAD of dlock's library");
        Scripts {
            library: library.name(),
        }
    }

    /// The loaded library's name, which each function's name starts with.
    pub fn library(&self) -> &'static str {
        self.library
    }

    /// Calls the script `name` (`lock_acquire`, `lock_release`…) with `keys` and `args`.
    pub fn call<T: redis::FromRedisValue>(
        &self,
        conn: &mut redis::Connection,
        name: &str,
        keys: &[&str],
        args: &[&str],
    ) -> redis::RedisResult<T> {
        redis::cmd("FCALL")
            .arg(format!("{}_{name}", self.library))
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query(conn)
    }
}
