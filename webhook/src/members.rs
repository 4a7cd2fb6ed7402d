//! The webhook's member clusters (`webhook.clusters`): a client per member, from its kubeconfig
//! Secret and following it as it changes ([`baton_shared::members`]), or why the member cannot
//! be reached. Judges that span members (a downscale's claim in each member's ledger) read
//! them here; nothing in the admission path waits for a member to connect: a member without a
//! client is unreachable, and says why.

use baton_config::ClusterConfig;
use baton_shared::members::{Connection, Connector, MemberClients, MemberError};

use crate::error::{Error, Failures};

/// The member clusters as this webhook reaches them. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Members {
    own: String,
    /// Every member's name, in name order (its own among them).
    names: Vec<String>,
    clients: MemberClients,
}

impl Members {
    /// Starts following every member's Secret: the members, and the future that keeps their
    /// clients current (run it as a critical task). `None` without members (this cluster
    /// alone). Each failed attempt to connect is counted in `failures`. `configs` is validated:
    /// exactly one of them, this webhook's own cluster, has no Secret.
    pub fn start(
        connector: Connector,
        configs: &[ClusterConfig],
        failures: Option<Failures>,
    ) -> Option<(Self, futures::future::BoxFuture<'static, ()>)> {
        use futures::FutureExt;
        let own = configs
            .iter()
            .find(|cluster| cluster.kubeconfig_secret.is_empty())?
            .name
            .clone();
        let clients = MemberClients::default();
        let mut names: Vec<String> = configs.iter().map(|cluster| cluster.name.clone()).collect();
        names.sort();
        let follows = configs.iter().map(|cluster| {
            let link = Link {
                cluster: cluster.name.clone(),
                clients: clients.clone(),
                in_use: None,
                last_error: None,
                failures: failures.clone(),
            };
            baton_shared::members::follow_kubeconfig(connector.clone(), cluster.clone(), link)
        });
        let drive = futures::future::join_all(follows).map(|_| ()).boxed();
        Some((
            Self {
                own,
                names,
                clients,
            },
            drive,
        ))
    }

    /// This webhook's own cluster's name.
    pub fn own(&self) -> &str {
        &self.own
    }

    /// Every member's name, in name order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// `cluster`'s client, or why it cannot be reached now.
    pub fn client(&self, cluster: &str) -> Result<kube::Client, String> {
        self.clients.get(cluster)
    }
}

/// One member's Secret as the webhook follows it: its client in [`Members`], or why not.
struct Link {
    cluster: String,
    clients: MemberClients,
    /// The kubeconfig the current client was built from.
    in_use: Option<String>,
    /// The last problem told, so that each is told once.
    last_error: Option<String>,
    failures: Option<Failures>,
}

impl Link {
    /// Counts a failed attempt to connect; its text, and whether it is new.
    fn counted(&mut self, error: MemberError) -> (String, bool) {
        let error = Error::from(error);
        if let Some(failures) = &self.failures {
            failures.count(&error);
        }
        let error = error.to_string();
        let new = self.last_error.as_ref() != Some(&error);
        self.last_error = Some(error.clone());
        (error, new)
    }
}

impl Connection for Link {
    fn in_use(&self) -> Option<&str> {
        self.in_use.as_deref()
    }

    fn connect(&mut self, kubeconfig: String, client: kube::Client) {
        self.clients.connected(&self.cluster, client);
        if self.in_use.is_some() {
            tracing::info!(cluster = %self.cluster, "the member cluster's kubeconfig Secret changed: reconnected with it");
        } else {
            tracing::info!(cluster = %self.cluster, "connected to member cluster");
        }
        self.in_use = Some(kubeconfig);
        self.last_error = None;
    }

    /// The old credentials are dropped: the member is unreachable until its Secret is fixed.
    fn refuse(&mut self, error: MemberError) {
        let (error, new) = self.counted(error);
        self.clients.disconnected(&self.cluster, error.clone());
        if self.in_use.take().is_some() {
            tracing::warn!(cluster = %self.cluster, %error, "the member cluster's kubeconfig Secret changed and cannot be used: disconnected, its downscale claims refused until it is fixed");
        } else if new {
            tracing::warn!(cluster = %self.cluster, %error, "cannot connect to member cluster; retrying");
        }
    }

    /// A connected member keeps its client; one not connected yet stays unreachable.
    fn unread(&mut self, error: MemberError) {
        let (error, new) = self.counted(error);
        if self.in_use.is_none() {
            self.clients.disconnected(&self.cluster, error.clone());
        }
        if new {
            tracing::warn!(cluster = %self.cluster, %error, "cannot read the member cluster's kubeconfig Secret; it is read again");
        }
    }
}
