// baton's monitoring mixin, in the standard shape (mixtool, Tanka, kube-prometheus read
// `grafanaDashboards` and `prometheusAlerts`): deploy/monitoring's dashboard and alerting rules
// themselves, so this mixin and `kubectl apply -k deploy/monitoring` ship the same ones
// (tests/tests/jsonnet.rs checks it). Runbooks: docs/alerts.md.
//
//   local baton = import 'baton-mixin/mixin.libsonnet';
//   { 'baton-alerts.yaml': std.manifestYamlDoc(baton.prometheusAlerts) }
{
  grafanaDashboards+:: {
    'baton.json': std.parseJson(importstr '../../deploy/monitoring/dashboard.json'),
  },

  prometheusAlerts+:: {
    groups+: std.parseYaml(importstr '../../deploy/monitoring/alerts.yaml').groups,
  },
}
