// Package v1alpha1 is version v1alpha1 of the jmx.handlerkit.dev API group.
//
// Its one kind, PrometheusJmxExporter, asks the handlerkit operator to load the
// Prometheus JMX exporter java agent into the JVMs running in the pods that its
// selector matches, and reports where the resulting metrics are served.
//
// types.go is the source of truth: deepcopy (zz_generated.deepcopy.go),
// registration (zz_generated.register.go), the typed clients in
// pkg/generated and the CRD in deploy/crds are all generated from it by
// `make codegen`; see docs/development.md.
//
// +k8s:deepcopy-gen=package
// +groupName=jmx.handlerkit.dev
package v1alpha1
