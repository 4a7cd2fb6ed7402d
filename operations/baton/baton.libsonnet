// baton for Tanka/jsonnet users: deploy/'s objects (parsed from its YAML files, so this library
// and `kubectl apply -k deploy/` install the same thing; tests/tests/jsonnet.rs checks that the
// defaults render what kustomize renders), with the knobs below applied on top.
//
//   local baton = import 'baton/baton.libsonnet';
//   baton + { _config+:: { namespace: 'mimir' } }
//
// Knobs are named as the Go rollout-operator library's where they mean the same:
// `_config.namespace` is the namespace whose rollout groups are coordinated (the Go library's
// operator runs there too; baton runs apart, in `_config.baton_namespace`), `_images.baton`
// stands for `_images.rollout_operator`, and the four `ignore_rollout_operator_*` knobs turn
// the failure policy of baton's webhook of the same job to Ignore. The objects are in the
// field `baton`, keyed `<kind>_<name>` (lower case, `-` and `.` as `_`; the Namespace's
// `namespace`), for overrides:
//
//   baton+: { deployment_baton_webhook+: { spec+: { minReadySeconds: 10 } } }
{
  _config+:: {
    // The rollout groups' namespace: baton-config's groups-namespace, the groups' Roles and
    // RoleBindings, every webhook configuration's grafana.com/namespace label and
    // namespaceSelector. A Mimir or Loki environment has set it already.
    namespace: if 'namespace' in super then super.namespace else 'default',
    // baton's own namespace (its Deployments, service accounts, configuration, certificate
    // Secret and Lease), apart from the groups' so that who may create pods there cannot take
    // baton's identity (docs/security.md, "Layout").
    baton_namespace: 'baton-system',
    // Whether to ship baton's Namespace object (off when something else creates it).
    baton_namespace_enabled: true,

    // null: deploy/'s (2 controllers, one active; 3 webhook replicas, one of which its
    // PodDisruptionBudget lets go at a time).
    baton_controller_replicas: null,
    baton_webhook_replicas: null,
    baton_controller_resources: null,
    baton_webhook_resources: null,

    // The Go library's knobs of the same names: Ignore instead of Fail for the webhook doing
    // that job (docs/operations.md, "failurePolicy", says what is given up).
    ignore_rollout_operator_no_downscale_webhook_failures: false,
    ignore_rollout_operator_prepare_downscale_webhook_failures: false,
    ignore_rollout_operator_zpdb_eviction_webhook_failures: false,
    ignore_rollout_operator_zpdb_validation_webhook_failures: false,
  },

  _images+:: {
    baton: 'baton:0.1.0',
  },

  assert $._config.namespace != $._config.baton_namespace :
         'baton_namespace %s is the groups\' namespace too: baton runs apart from the groups it coordinates' % $._config.baton_namespace,

  // Import paths must be literals: each call reads its file with importstr.
  local yaml(text) = std.filter(function(o) o != null, (
    local parsed = std.parseYaml(text);
    if std.isArray(parsed) then parsed else [parsed]
  )),

  // Namespaced objects get the namespace kustomize gives them (deploy/system/ and
  // deploy/groups/ set it); the cluster-scoped ones (webhook configurations, cluster RBAC,
  // PriorityClass, CRDs, the admission policy) have none, as kustomize leaves them.
  local cluster_scoped = ['ClusterRole', 'ClusterRoleBinding'],
  local in_namespace(namespace) = function(o)
    if std.member(cluster_scoped, o.kind) then o else o { metadata+: { namespace: namespace } },
  local system = std.map(in_namespace($._config.baton_namespace), std.flattenArrays([
    yaml(importstr '../../deploy/base/config.yaml'),
    yaml(importstr '../../deploy/base/controller-rbac.yaml'),
    yaml(importstr '../../deploy/base/controller.yaml'),
    yaml(importstr '../../deploy/base/webhook-rbac.yaml'),
    yaml(importstr '../../deploy/base/webhook.yaml'),
  ])),
  local cluster = std.flattenArrays([
    yaml(importstr '../../deploy/base/webhooks.yaml'),
    yaml(importstr '../../deploy/base/priority-class.yaml'),
    yaml(importstr '../../deploy/crds/replica-template.yaml'),
    yaml(importstr '../../deploy/crds/zone-aware-pod-disruption-budget.yaml'),
    yaml(importstr '../../deploy/crds/rollout-health-check.yaml'),
    yaml(importstr '../../deploy/crds/phased-rollout.yaml'),
    yaml(importstr '../../deploy/admission-policy.yaml'),
  ] + if $._config.baton_namespace_enabled then [yaml(importstr '../../deploy/namespace/namespace.yaml')] else []),
  local groups = std.map(in_namespace($._config.namespace), std.flattenArrays([
    yaml(importstr '../../deploy/groups/controller-rbac.yaml'),
    yaml(importstr '../../deploy/groups/webhook-rbac.yaml'),
  ])),

  // A service account subject is baton's, hence in baton's namespace.
  local subjects_in_batons_namespace(o) =
    if std.objectHas(o, 'subjects') then o {
      subjects: [
        if s.kind == 'ServiceAccount' then s { namespace: $._config.baton_namespace } else s
        for s in o.subjects
      ],
    } else o,

  local ignored(name) = std.get({
    'baton-no-downscale': $._config.ignore_rollout_operator_no_downscale_webhook_failures,
    'baton-prepare-downscale': $._config.ignore_rollout_operator_prepare_downscale_webhook_failures,
    'baton-pod-eviction': $._config.ignore_rollout_operator_zpdb_eviction_webhook_failures,
    'baton-zpdb-validation': $._config.ignore_rollout_operator_zpdb_validation_webhook_failures,
  }, name, false),

  local knobs(o) =
    if o.kind == 'Namespace' then o {
      metadata+: { name: $._config.baton_namespace, labels+: { 'kubernetes.io/metadata.name': $._config.baton_namespace } },
    }
    else if o.kind == 'ConfigMap' && o.metadata.name == 'baton-config' then o {
      data+: { 'groups-namespace': $._config.namespace },
    }
    else if o.kind == 'Deployment' then
      local binary = o.metadata.name;
      local knob(name) = $._config[std.strReplace(binary, '-', '_') + '_' + name];
      local replicas = knob('replicas'), resources = knob('resources');
      o {
        spec+: {
          [if replicas != null then 'replicas']: replicas,
          template+: { spec+: { containers: [
            c {
              image: $._images.baton,
              [if resources != null then 'resources']: resources,
            }
            for c in super.containers
          ] } },
        },
      }
    else if std.endsWith(o.kind, 'WebhookConfiguration') then o {
      metadata+: { labels+: { 'grafana.com/namespace': $._config.namespace } },
      webhooks: [
        w {
          clientConfig+: { service+: { namespace: $._config.baton_namespace } },
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': $._config.namespace } },
          [if ignored(o.metadata.name) then 'failurePolicy']: 'Ignore',
        }
        for w in super.webhooks
      ],
    }
    else subjects_in_batons_namespace(o),

  // Keys stay what they are whatever the knobs say (the Namespace's too), so overrides hold.
  local key(o) =
    if o.kind == 'Namespace' then 'namespace'
    else std.asciiLower(o.kind) + '_' + std.strReplace(std.strReplace(o.metadata.name, '-', '_'), '.', '_'),

  baton: {
    [key(o)]: knobs(o)
    for o in system + cluster + groups
  },
}
