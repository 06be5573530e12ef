//! Connecting to the cluster, and errors that say what to do.

use anyhow::{anyhow, bail};
use kube::api::{Api, ListParams};
use kube::Client;
use upgradeplan::api::kratix::{ResourceBinding, PROMISE_NAME_LABEL};
use upgradeplan::api::{UpgradeBudget, UpgradeFreeze, UpgradePlan, UpgradeRun};

use crate::cli::Global;

/// The server and context this process talks to, for errors that must name them.
static TARGET: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn target() -> &'static str {
    TARGET.get().map(String::as_str).unwrap_or("the API server")
}

/// A kubeconfig that cannot be read, in one sentence that says what to do.
fn unreadable_kubeconfig(path: &std::path::Path, e: &kube::config::KubeconfigError) -> anyhow::Error {
    if !path.exists() {
        anyhow!(
            "kubeconfig {} does not exist: point KUBECONFIG or --kubeconfig at a kubeconfig file",
            path.display()
        )
    } else {
        anyhow!("kubeconfig {} cannot be read: {e}", path.display())
    }
}

pub async fn connect(g: &Global) -> anyhow::Result<Client> {
    let options = kube::config::KubeConfigOptions {
        context: g.context.clone(),
        cluster: g.cluster.clone(),
        user: g.user.clone(),
    };
    let (mut config, context) = match &g.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| unreadable_kubeconfig(path, &e))?;
            let context = g.context.clone().or_else(|| kc.current_context.clone());
            let config = kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| anyhow!("kubeconfig {}: {e}", path.display()))?;
            (config, context)
        }
        None if g.context.is_some() || g.cluster.is_some() || g.user.is_some() => (
            kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| anyhow!("kubeconfig: {e}"))?,
            g.context.clone(),
        ),
        None => {
            let context = kube::config::Kubeconfig::read().ok().and_then(|kc| kc.current_context);
            let config = match (kube::Config::infer().await, &g.server) {
                (Ok(config), _) => config,
                // --server (with --token or a client certificate) needs no kubeconfig, as for kubectl.
                (Err(_), Some(server)) => kube::Config::new(server_url(server)?),
                (Err(_), None) => bail!(
                    "no cluster configured: no ~/.kube/config and not running in a pod; set KUBECONFIG or pass --kubeconfig (or --server)"
                ),
            };
            (config, context)
        }
    };
    override_connection(&mut config, g)?;
    let _ = TARGET.set(match context {
        Some(c) => format!("{} (context {c})", config.cluster_url),
        None => config.cluster_url.to_string(),
    });
    if !g.request_timeout.is_zero() {
        config.connect_timeout = Some(g.request_timeout);
        config.write_timeout = Some(g.request_timeout);
        // A watch may rightly stay silent for minutes: only one-shot requests give up on reads.
        if !g.watching {
            config.read_timeout = Some(g.request_timeout);
        }
    }
    Ok(Client::try_from(config)?)
}

/// `--server` as the URL type kube's `Config` holds.
fn server_url<U: std::str::FromStr<Err: std::fmt::Display>>(server: &str) -> anyhow::Result<U> {
    server
        .parse()
        .map_err(|e| anyhow!("--server {server:?} is not a URL such as https://10.0.0.1:6443: {e}"))
}

/// kubectl's connection and identity flags (spec §10) over what the kubeconfig says.
fn override_connection(config: &mut kube::Config, g: &Global) -> anyhow::Result<()> {
    if let Some(server) = &g.server {
        config.cluster_url = server_url(server)?;
    }
    if let Some(ca) = &g.certificate_authority {
        if !ca.is_file() {
            bail!("--certificate-authority {}: no such file", ca.display());
        }
        config.root_cert_file = Some(ca.clone());
        config.root_cert = None;
    }
    if g.insecure_skip_tls_verify {
        config.accept_invalid_certs = true;
    }
    let auth = &mut config.auth_info;
    if let Some(token) = &g.token {
        // A token given is the identity: no other credential of the kubeconfig beside it.
        auth.token = Some(token.clone().into());
        auth.token_file = None;
        auth.exec = None;
        auth.auth_provider = None;
        auth.client_certificate = None;
        auth.client_certificate_data = None;
        auth.client_key = None;
        auth.client_key_data = None;
        auth.username = None;
        auth.password = None;
    }
    match (&g.client_certificate, &g.client_key) {
        (Some(cert), Some(key)) => {
            auth.client_certificate = Some(cert.display().to_string());
            auth.client_certificate_data = None;
            auth.client_key = Some(key.display().to_string());
            auth.client_key_data = None;
        }
        (None, None) => {}
        _ => bail!("--client-certificate and --client-key go together"),
    }
    if let Some(user) = &g.as_user {
        auth.impersonate = Some(user.clone());
    }
    if !g.as_group.is_empty() {
        if auth.impersonate.is_none() {
            bail!("--as-group needs --as (Kubernetes impersonates groups of a user)");
        }
        auth.impersonate_groups = Some(g.as_group.clone());
    }
    if let Some(uid) = &g.as_uid {
        auth.impersonate_uid = Some(uid.clone());
    }
    Ok(())
}

/// Who approves, for an UpgradeApproval's `spec.approver` (spec §13.4): the user the API server
/// authenticated, from a SelfSubjectReview (Kubernetes 1.28+); where the server has none (or
/// refuses it), the kubeconfig's user of the context in use, marked ` (unverified)`. The API
/// server's audit log stays the authoritative record.
pub async fn whoami(client: &Client, g: &Global) -> String {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let reviewed = Api::<SelfSubjectReview>::all(client.clone())
        .create(&kube::api::PostParams::default(), &SelfSubjectReview::default())
        .await
        .ok()
        .and_then(|r| r.status?.user_info?.username)
        .filter(|name| !name.is_empty());
    if let Some(name) = reviewed {
        return name;
    }
    format!(
        "{} (unverified)",
        kubeconfig_user(g).unwrap_or_else(|| "unknown".to_string())
    )
}

/// The kubeconfig's user of the context in use: the user impersonated (`--as`, or the
/// kubeconfig's `as:`), else the AuthInfo's name (`--user`, or the context's).
fn kubeconfig_user(g: &Global) -> Option<String> {
    if let Some(user) = &g.as_user {
        return Some(user.clone());
    }
    let kc = match &g.kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path).ok()?,
        None => kube::config::Kubeconfig::read().ok()?,
    };
    let user = match &g.user {
        Some(user) => user.clone(),
        None => {
            let context = g.context.clone().or_else(|| kc.current_context.clone())?;
            kc.contexts
                .iter()
                .find(|c| c.name == context)?
                .context
                .as_ref()?
                .user
                .clone()?
        }
    };
    let impersonated = kc
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.as_ref()?.impersonate.clone());
    Some(impersonated.unwrap_or(user))
}

/// Whether `e` is a TLS handshake the client refused: the server is reachable, but its
/// certificate is not one the kubeconfig's CA vouches for (or not for that name).
fn untrusted(e: &kube::Error) -> bool {
    let text = format!("{e:?}").to_lowercase();
    [
        "certificate",
        "unknownissuer",
        "invalidcertificate",
        "badsignature",
        "notvalidforname",
    ]
    .iter()
    .any(|w| text.contains(w))
}

/// The TLS library's words for why, from the error's sources (the innermost says most).
fn tls_detail(e: &kube::Error) -> String {
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    detail
}

/// Whether `e` is a failure to reach the server at all (refused, unreachable, timed out).
fn unreachable(e: &kube::Error) -> Option<&'static str> {
    let text = format!("{e:?}").to_lowercase();
    if ["timed out", "timedout", "timeout", "elapsed"]
        .iter()
        .any(|w| text.contains(w))
    {
        Some("did not answer in time (--request-timeout)")
    } else if text.contains("connect") || text.contains("dns") || text.contains("refused") {
        Some("cannot be reached")
    } else {
        None
    }
}

/// The cluster-scoped kinds the plugin reads or writes.
const CLUSTER_SCOPED: &[&str] = &[
    "upgradeplans",
    "upgraderuns",
    "upgradefreezes",
    "promises",
    "promiserevisions",
    "namespaces",
];

/// Turns an API error into a message that names the verb and resource and says what to do.
pub fn explain_error(e: kube::Error, verb: &str, resource: &str, name: Option<&str>) -> anyhow::Error {
    let what = match name {
        Some(n) => format!("{resource} \"{n}\""),
        None => resource.to_string(),
    };
    match &e {
        kube::Error::Api(s) if s.code == 404 && name.is_some() && !s.message.contains("could not find the requested resource") => {
            anyhow!("{what} not found (`kubectl get {resource}` lists them)")
        }
        kube::Error::Api(s) if s.code == 404 => anyhow!(
            "the server has no {resource}: the upgradeplan CRDs are not installed (kubectl apply -f deploy/crds/, or upgradeplan-controller crd | kubectl apply -f -)"
        ),
        kube::Error::Api(s) if s.code == 403 => {
            // Cluster-scoped kinds are granted by a ClusterRole; namespaced ones by a Role.
            let role = if CLUSTER_SCOPED.contains(&resource) {
                "ClusterRole (bound with a ClusterRoleBinding)"
            } else {
                "Role in that namespace (or a ClusterRole)"
            };
            anyhow!(
                "forbidden: you may not {verb} {resource} ({}). Ask for a {role} granting `{verb}` on {resource}",
                s.message
            )
        }
        kube::Error::Api(s) if s.code == 401 => anyhow!("unauthorized: your credentials were refused ({}); check your kubeconfig", s.message),
        // Anything else the server said: one line with its words and what to do, never kube's
        // Debug dump of the Status.
        kube::Error::Api(s) => {
            let hint = match (s.code, s.reason.as_str()) {
                (409, "AlreadyExists") => "choose another name",
                (409, _) => "it changed meanwhile: try again",
                (422, _) | (400, _) => "the server refused it as invalid: fix what the message names",
                (429, _) | (500..=599, _) => "the API server could not serve it now: try again in a moment",
                _ => "check the object and your access",
            };
            let reason = if s.reason.is_empty() { String::new() } else { format!(", {}", s.reason) };
            anyhow!("cannot {verb} {what}: {} (HTTP {}{reason}); {hint}", s.message.trim_end(), s.code)
        }
        _ if untrusted(&e) => anyhow!(
            "cannot {verb} {what}: the API server at {} answered with a certificate this kubeconfig does not trust ({}): \
             check the cluster's certificate-authority in the kubeconfig (kubectl config view --minify), or that this is the right context",
            target(),
            tls_detail(&e)
        ),
        _ => match unreachable(&e) {
            Some(how) => anyhow!(
                "cannot {verb} {what}: the API server at {} {how}: is the cluster running, and is this the right context (kubectl config current-context)?",
                target()
            ),
            None => anyhow!("cannot {verb} {what}: {e}"),
        },
    }
}

pub async fn get_plan(client: &Client, name: &str) -> anyhow::Result<UpgradePlan> {
    Api::<UpgradePlan>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| explain_error(e, "get", "upgradeplans", Some(name)))
}

pub async fn get_run(client: &Client, name: &str) -> anyhow::Result<UpgradeRun> {
    Api::<UpgradeRun>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| explain_error(e, "get", "upgraderuns", Some(name)))
}

/// The run `name` names — or, where a run is expected and `name` is a plan's (spec §10), that
/// plan's active run, else its last one (said on stderr). A name that is neither gets a "did
/// you mean" from the runs and plans that exist.
pub async fn get_run_or_plans(client: &Client, name: &str) -> anyhow::Result<UpgradeRun> {
    let runs = Api::<UpgradeRun>::all(client.clone());
    if let Some(run) = runs
        .get_opt(name)
        .await
        .map_err(|e| explain_error(e, "get", "upgraderuns", Some(name)))?
    {
        return Ok(run);
    }
    let plans = Api::<UpgradePlan>::all(client.clone());
    if let Ok(Some(plan)) = plans.get_opt(name).await {
        let status = plan.status.unwrap_or_default();
        let (which, run) = match (status.active_run_ref.as_str(), status.last_run) {
            ("", Some(last)) => ("last", last.name),
            ("", None) => {
                anyhow::bail!("upgradeplan/{name} has no runs yet: start one with kubectl upgradeplan run {name}")
            }
            (active, _) => ("active", active.to_string()),
        };
        eprintln!("note: {name} is an UpgradePlan: its {which} run, upgraderun/{run}");
        return get_run(client, &run).await;
    }
    let mut names: Vec<String> = Vec::new();
    if let Ok(list) = runs.list_metadata(&Default::default()).await {
        names.extend(list.items.into_iter().filter_map(|r| r.metadata.name));
    }
    if let Ok(list) = plans.list_metadata(&Default::default()).await {
        names.extend(list.items.into_iter().filter_map(|p| p.metadata.name));
    }
    match upgradeplan::api::strict::closest(name, names.iter().map(String::as_str)) {
        Some(hint) => anyhow::bail!("no UpgradeRun or UpgradePlan named {name:?} (did you mean {hint:?}?)"),
        None => anyhow::bail!(
            "no UpgradeRun or UpgradePlan named {name:?} (kubectl upgradeplan get lists plans and their runs)"
        ),
    }
}

pub async fn list_budgets(client: &Client) -> anyhow::Result<Vec<UpgradeBudget>> {
    let api: Api<UpgradeBudget> = Api::all(client.clone());
    match list_all(&api, &ListParams::default()).await {
        Ok(l) => Ok(l),
        // Not served: the CRD is not installed, so no budget can exist.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(explain_error(e, "list", "upgradebudgets", None)),
    }
}

pub async fn get_budget(client: &Client, name: &str) -> anyhow::Result<UpgradeBudget> {
    Api::<UpgradeBudget>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| explain_error(e, "get", "upgradebudgets", Some(name)))
}

/// Every UpgradeRun.
pub async fn list_runs(client: &Client) -> anyhow::Result<Vec<UpgradeRun>> {
    list_all(&Api::<UpgradeRun>::all(client.clone()), &ListParams::default())
        .await
        .map_err(|e| explain_error(e, "list", "upgraderuns", None))
}

pub async fn get_freeze(client: &Client, name: &str) -> anyhow::Result<UpgradeFreeze> {
    Api::<UpgradeFreeze>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| explain_error(e, "get", "upgradefreezes", Some(name)))
}

/// Objects per list request, as kubectl's `--chunk-size`: a list of 100,000 bindings in one
/// request makes the API server gather them all before its first byte, longer than a
/// `--request-timeout` allows; in pages each request answers quickly.
const LIST_PAGE: u32 = 500;

/// Every page of a list, in order: `fetch(continue token)` returns one page's items and the
/// token of the next (none or empty after the last).
async fn all_pages<T, F, Fut, E>(mut fetch: F) -> Result<Vec<T>, E>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), E>>,
{
    let mut items = Vec::new();
    let mut token = None;
    loop {
        let (page, next) = fetch(token).await?;
        items.extend(page);
        match next.filter(|t| !t.is_empty()) {
            Some(t) => token = Some(t),
            None => return Ok(items),
        }
    }
}

/// Every object `lp` selects, LIST_PAGE at a time.
async fn list_all<K>(api: &Api<K>, lp: &ListParams) -> Result<Vec<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    all_pages(|token: Option<String>| {
        let mut page = lp.clone().limit(LIST_PAGE);
        if let Some(t) = &token {
            page = page.continue_token(t);
        }
        async move {
            let list = api.list(&page).await?;
            Ok((list.items, list.metadata.continue_))
        }
    })
    .await
}

/// Every UpgradeFreeze; none when the cluster does not serve the kind (no freeze can exist).
pub async fn list_freezes(client: &Client) -> anyhow::Result<Vec<UpgradeFreeze>> {
    let api: Api<UpgradeFreeze> = Api::all(client.clone());
    match list_all(&api, &ListParams::default()).await {
        Ok(l) => Ok(l),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(explain_error(e, "list", "upgradefreezes", None)),
    }
}

pub async fn list_plans(client: &Client) -> anyhow::Result<Vec<UpgradePlan>> {
    list_all(&Api::<UpgradePlan>::all(client.clone()), &ListParams::default())
        .await
        .map_err(|e| explain_error(e, "list", "upgradeplans", None))
}

/// The plan's runs: by label, and runs created by hand not yet labelled by the controller.
pub async fn runs_of(client: &Client, plan: &str) -> anyhow::Result<Vec<UpgradeRun>> {
    let all = list_all(&Api::<UpgradeRun>::all(client.clone()), &ListParams::default())
        .await
        .map_err(|e| explain_error(e, "list", "upgraderuns", None))?;
    Ok(all
        .into_iter()
        // The immutable reference, not the plan label (which may hold a shortened form).
        .filter(|r| r.plan_name() == plan)
        .collect())
}

/// The Promise's bindings, in one namespace or all.
pub async fn bindings_of(
    client: &Client,
    promise: &str,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<ResourceBinding>> {
    let api: Api<ResourceBinding> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let lp = ListParams::default().labels(&format!("{PROMISE_NAME_LABEL}={promise}"));
    list_all(&api, &lp)
        .await
        .map_err(|e| explain_error(e, "list", "resourcebindings", None))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages as the API server sends them: each ends with the next token, the last with none
    /// or an empty one (both seen in practice).
    #[test]
    fn every_page_is_fetched_in_order_with_the_token_of_the_one_before() {
        /// A page served: its items and the next token.
        type Page<'a> = (&'a [i32], Option<&'a str>);
        /// The pages served, the items listed, the tokens asked with.
        type Case<'a> = (&'a [Page<'a>], &'a [i32], &'a [Option<&'a str>]);
        let cases: [Case; 4] = [
            (&[(&[], None)], &[], &[None]),
            (&[(&[1, 2], None)], &[1, 2], &[None]),
            (
                &[(&[1, 2], Some("a")), (&[3], Some(""))],
                &[1, 2, 3],
                &[None, Some("a")],
            ),
            (
                &[(&[1], Some("a")), (&[2], Some("b")), (&[3], None)],
                &[1, 2, 3],
                &[None, Some("a"), Some("b")],
            ),
        ];
        for (pages, items, tokens) in cases {
            let mut asked = Vec::new();
            let mut served = pages.iter();
            let got: Result<Vec<i32>, ()> = futures::executor::block_on(all_pages(|token| {
                asked.push(token);
                let (page, next) = served.next().copied().unwrap_or((&[], None));
                async move { Ok((page.to_vec(), next.map(String::from))) }
            }));
            assert_eq!(got.as_deref(), Ok(items), "pages {pages:?}");
            let asked: Vec<Option<&str>> = asked.iter().map(Option::as_deref).collect();
            assert_eq!(asked, tokens, "pages {pages:?}");
        }
    }

    #[test]
    fn a_failed_page_fails_the_list() {
        let mut calls = 0;
        let got: Result<Vec<i32>, &str> = futures::executor::block_on(all_pages(|token| {
            calls += 1;
            async move {
                match token {
                    None => Ok((vec![1], Some("a".to_string()))),
                    Some(_) => Err("expired continue token"),
                }
            }
        }));
        assert_eq!(got, Err("expired continue token"));
        assert_eq!(calls, 2);
    }

    fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn server_errors_are_one_readable_line() {
        let cases = [
            (
                api_error(422, "Invalid", "UpgradeRun.platform.syntasso.io \"r\" is invalid: metadata.labels: Invalid value"),
                "cannot create upgraderuns \"r\": UpgradeRun.platform.syntasso.io \"r\" is invalid: metadata.labels: Invalid value (HTTP 422, Invalid); the server refused it as invalid: fix what the message names",
            ),
            (
                api_error(409, "AlreadyExists", "upgraderuns.platform.syntasso.io \"r\" already exists"),
                "cannot create upgraderuns \"r\": upgraderuns.platform.syntasso.io \"r\" already exists (HTTP 409, AlreadyExists); choose another name",
            ),
            (
                api_error(503, "ServiceUnavailable", "etcdserver: leader changed"),
                "cannot create upgraderuns \"r\": etcdserver: leader changed (HTTP 503, ServiceUnavailable); the API server could not serve it now: try again in a moment",
            ),
        ];
        for (e, want) in cases {
            let text = format!("{:#}", explain_error(e, "create", "upgraderuns", Some("r")));
            assert_eq!(text, want);
            assert!(!text.contains('\n') && !text.contains("Status {"), "{text}");
        }
    }
}
