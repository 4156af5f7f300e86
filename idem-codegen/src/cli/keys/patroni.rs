//! `idem keys stats --patroni URL`: which Patroni member the key store
//! reads, asked of Patroni's REST API.

use std::time::Duration;

use idem_runtime::serde_json::Value;

/// What Patroni says of the member the store reads, and of its cluster.
#[derive(Debug, Clone, Default)]
pub(crate) struct Member {
    /// The member whose `host:port` is the server the store reads; `None`
    /// when no member has it (or the store reads over a Unix socket).
    pub(crate) name: Option<String>,
    /// Its role: `leader`, `sync_standby`, `replica`, …
    pub(crate) role: Option<String>,
    pub(crate) timeline: Option<i64>,
    /// The cluster's `scope`.
    pub(crate) scope: Option<String>,
    /// `synchronous_mode`: `off`, `on`, `strict` (`on` with
    /// `synchronous_mode_strict`) or `quorum`.
    pub(crate) mode: Option<&'static str>,
    /// The members Patroni names synchronous standbys.
    pub(crate) sync_standbys: Vec<String>,
    /// Why Patroni could not be asked, when it could not.
    pub(crate) error: Option<String>,
}

/// Asks the member at `url` for the cluster and its configuration, and
/// finds the member at `server` (`host:port`).
pub(crate) async fn member(url: &str, server: Option<&str>) -> Member {
    match ask(url, server).await {
        Ok(member) => member,
        Err(e) => Member {
            error: Some(format!("could not ask Patroni at {url}: {e}")),
            ..Member::default()
        },
    }
}

async fn ask(url: &str, server: Option<&str>) -> Result<Member, reqwest::Error> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let base = url.trim_end_matches('/');
    let cluster: Value = http
        .get(format!("{base}/cluster"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let config: Value = http
        .get(format!("{base}/config"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let members = cluster["members"].as_array().cloned().unwrap_or_default();
    let address = |m: &Value| {
        format!(
            "{}:{}",
            m["host"].as_str().unwrap_or_default(),
            m["port"].as_i64().unwrap_or_default()
        )
    };
    let found = server.and_then(|server| members.iter().find(|m| address(m) == server));
    Ok(Member {
        name: found.and_then(|m| m["name"].as_str()).map(str::to_owned),
        role: found.and_then(|m| m["role"].as_str()).map(str::to_owned),
        timeline: found.and_then(|m| m["timeline"].as_i64()),
        scope: cluster["scope"].as_str().map(str::to_owned),
        mode: Some(mode(&config)),
        sync_standbys: members
            .iter()
            .filter(|m| m["role"].as_str() == Some("sync_standby"))
            .filter_map(|m| m["name"].as_str().map(str::to_owned))
            .collect(),
        error: None,
    })
}

/// The cluster's synchronous mode, from its `GET /config`.
fn mode(config: &Value) -> &'static str {
    let strict = config["synchronous_mode_strict"].as_bool() == Some(true);
    match &config["synchronous_mode"] {
        Value::Bool(true) if strict => "strict",
        Value::Bool(true) => "on",
        Value::String(s) if s == "quorum" => "quorum",
        Value::String(s) if s == "on" || s == "true" => "on",
        _ => "off",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synchronous_mode_reads_as_patroni_stores_it() {
        let read = |v: Value| mode(&v);
        use idem_runtime::serde_json::json;
        assert_eq!(read(json!({})), "off");
        assert_eq!(read(json!({"synchronous_mode": true})), "on");
        assert_eq!(
            read(json!({"synchronous_mode": true, "synchronous_mode_strict": true})),
            "strict"
        );
        assert_eq!(read(json!({"synchronous_mode": "quorum"})), "quorum");
    }
}
