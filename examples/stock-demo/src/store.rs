//! Where the stock lives: plain integers in Redis, read with GET and written with SET —
//! a deliberate read-modify-write that only the lock keeps correct.

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue};

use dlock::config::{Config, Redis};

/// A connection to the stock keys, whatever the deployment.
#[derive(Clone)]
pub enum StockStore {
    /// One server (single, the master of master/replicas, or the Sentinel master).
    Server(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

/// The Redis key of item `id`'s stock.
pub fn key(id: u64) -> String {
    format!("stock:{id}")
}

impl StockStore {
    /// Connects to the Redis at `url`.
    pub async fn connect(url: &str) -> redis::RedisResult<StockStore> {
        let client = redis::Client::open(url)?;
        Ok(StockStore::Server(ConnectionManager::new(client).await?))
    }

    /// Connects to the deployment a dlock config file describes.
    pub async fn from_config(config: &Config) -> redis::RedisResult<StockStore> {
        let Some(redis) = &config.redis else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "the dlock config has no [redis] table (only [redlock]): the stock store needs one",
            )));
        };
        match redis {
            Redis::Single(single) => StockStore::connect(single.address.as_str()).await,
            Redis::MasterSlave(master_slave) => {
                StockStore::connect(master_slave.master.as_str()).await
            }
            Redis::Sentinel(sentinel) => {
                let mut resolver = redis::sentinel::SentinelClient::build(
                    sentinel.sentinels.urls(),
                    sentinel.master_name.clone(),
                    None,
                    redis::sentinel::SentinelServerType::Master,
                )?;
                let client = resolver.async_get_client().await?;
                Ok(StockStore::Server(ConnectionManager::new(client).await?))
            }
            Redis::Cluster(cluster) => {
                let client = redis::cluster::ClusterClient::new(cluster.nodes.urls())?;
                Ok(StockStore::Cluster(client.get_async_connection().await?))
            }
        }
    }

    /// The stock of item `id` (0 when never set).
    pub async fn read(&self, id: u64) -> redis::RedisResult<i64> {
        let value: Option<i64> = self.query(redis::cmd("GET").arg(key(id))).await?;
        Ok(value.unwrap_or(0))
    }

    /// Sets the stock of item `id`.
    pub async fn write(&self, id: u64, stock: i64) -> redis::RedisResult<()> {
        self.query(redis::cmd("SET").arg(key(id)).arg(stock)).await
    }

    async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> redis::RedisResult<T> {
        match self.clone() {
            StockStore::Server(mut conn) => cmd.query_async(&mut conn).await,
            StockStore::Cluster(mut conn) => cmd.query_async(&mut conn).await,
        }
    }
}
